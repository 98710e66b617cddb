"""ProducerConfig: Kafka property names, defaults, and errors that name the key."""

from __future__ import annotations

import pytest

from metaq.errors import ConfigError
from metaq.producer import Producer, ProducerConfig


def test_defaults():
    c = ProducerConfig.from_properties({"zookeeper.connect": "127.0.0.1:2181/metaq"})
    assert c.zookeeper_connect == "127.0.0.1:2181/metaq"
    assert (c.client_id, c.acks, c.linger_ms, c.retries, c.retry_backoff_ms) == ("metaq-producer", -1, 5, 5, 100)
    assert c.idempotent  # as Kafka's producer 3.x: acks=all and idempotence by default
    assert (c.buffer_memory, c.max_block_ms, c.max_request_size) == (33554432, 60000, 1048576)
    assert (c.request_timeout_ms, c.partitioner, c.compression_type) == (30000, "default", "none")
    assert (c.zookeeper_session_timeout_ms, c.zookeeper_connection_timeout_ms) == (6000, 6000)
    assert c.metadata_max_age_ms == 300000
    assert c.batch_size <= c.max_request_size


@pytest.mark.parametrize(("raw", "acks"), [("all", -1), ("ALL", -1), ("-1", -1), ("0", 0), (1, 1)])
def test_acks(raw, acks):
    assert ProducerConfig.from_properties({"acks": raw}).acks == acks
    assert ProducerConfig.from_properties(acks=raw).acks == acks


@pytest.mark.parametrize(("props", "key"), [
    ({"acks": "2"}, "'acks'"),
    ({"acks": "some"}, "'acks'"),
    ({"linger.ms": "-1"}, "'linger.ms'"),
    ({"batch.size": "0"}, "'batch.size'"),
    ({"retries": "many"}, "'retries'"),
    ({"partitioner": "sticky"}, "'partitioner'"),
    ({"compression.type": "brotli"}, "'compression.type'"),
    ({"batch.size": "2000000"}, "'batch.size'"),  # > max.request.size
    ({"max.request.size": "1000000", "buffer.memory": "1000"}, "'max.request.size'"),
])
def test_bad_values_name_the_key(props, key):
    with pytest.raises(ConfigError, match=key):
        ProducerConfig.from_properties(props)


def test_unknown_key_suggests_the_closest():
    with pytest.raises(ConfigError, match="'linger.ms'"):
        ProducerConfig.from_properties({"linger.msec": "5"})


def test_producer_requires_zookeeper_connect_without_injected_metadata():
    with pytest.raises(ConfigError, match="'zookeeper.connect'"):
        Producer({"acks": "all"})


@pytest.mark.parametrize(("props", "idempotent"), [
    ({}, True),
    ({"acks": "1"}, False),  # unset: the settings decide, as Kafka's producer 3.x
    ({"retries": "0"}, False),
    ({"max.in.flight.requests.per.connection": "6"}, False),
    ({"enable.idempotence": "false"}, False),
    ({"enable.idempotence": "true", "max.in.flight.requests.per.connection": "5"}, True),
])
def test_idempotence_default_follows_kafka(props, idempotent):
    assert ProducerConfig.from_properties(props).idempotent is idempotent


def test_explicit_idempotence_with_conflicting_settings_is_an_error():
    with pytest.raises(ConfigError, match="'enable.idempotence': true needs acks must be all"):
        ProducerConfig.from_properties({"enable.idempotence": "true", "acks": "1"})
