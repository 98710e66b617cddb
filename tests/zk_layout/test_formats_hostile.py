"""Nodes anyone with ZooKeeper access may write: ids that no Kafka client can be told about (int32), offsets
that are no offset, and topic filters that would make a backtracking regex engine spin (the catastrophic pattern
in a child interpreter: integration_tests/test_topic_pattern_linear_time.py)."""

from __future__ import annotations

import json

import pytest

from metaq.broker.config import BrokerConfig
from metaq.errors import ConfigError, MalformedNodeError
from zk_layout import BrokerInfo, PartitionState, TopicAssignment, TopicCount, decode_offset

BROKER = {"version": 5, "host": "127.0.0.1", "port": 9092, "endpoints": ["PLAINTEXT://127.0.0.1:9092"]}


def _json(obj: object) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize("broker_id", [str(2**31), "4294967296", str(2**40)])
def test_broker_id_above_int32_is_malformed(broker_id: str) -> None:
    path = f"/brokers/ids/{broker_id}"
    with pytest.raises(MalformedNodeError, match=f"malformed node {path}: .*int32"):
        BrokerInfo.decode(path, _json(BROKER))


def test_largest_int32_broker_id_is_fine() -> None:
    assert BrokerInfo.decode(f"/brokers/ids/{2**31 - 1}", _json(BROKER)).id == 2**31 - 1


@pytest.mark.parametrize("port", [65536, 2**40, -2])
def test_broker_port_out_of_range_is_malformed(port: int) -> None:
    with pytest.raises(MalformedNodeError, match="'port'"):
        BrokerInfo.decode("/brokers/ids/1", _json({**BROKER, "port": port}))


@pytest.mark.parametrize("partitions", [{"4294967296": [0]}, {"0": [2**31]}, {"0": [-1]}])
def test_topic_partition_or_replica_above_int32_is_malformed(partitions: dict[str, list[int]]) -> None:
    with pytest.raises(MalformedNodeError, match="malformed node /brokers/topics/t"):
        TopicAssignment.decode("/brokers/topics/t", _json({"version": 1, "partitions": partitions}))


@pytest.mark.parametrize("key,value", [("leader", 2**40), ("leader_epoch", 2**31), ("isr", [2**32]),
                                       ("controller_epoch", 2**33)])
def test_partition_state_values_above_int32_are_malformed(key: str, value: object) -> None:
    state = {"controller_epoch": 1, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0], key: value}
    with pytest.raises(MalformedNodeError, match=key):
        PartitionState.decode("/brokers/topics/t/partitions/0/state", _json(state))


def test_broker_id_config_must_fit_int32() -> None:
    with pytest.raises(ConfigError, match="'broker.id'"):
        BrokerConfig.from_properties({"broker.id": 2**40, "zookeeper.connect": "127.0.0.1:2181"})
    assert BrokerConfig.from_properties({"broker.id": 2**31 - 1, "zookeeper.connect": "z:1"}).broker_id == 2**31 - 1


@pytest.mark.parametrize("raw", [b"-5", b"-2", b"-9223372036854775808"])
def test_negative_offset_other_than_minus_one_is_malformed(raw: bytes) -> None:
    path = "/consumers/g/offsets/t/0"
    with pytest.raises(MalformedNodeError, match=f"malformed node {path}: negative offset"):
        decode_offset(path, raw)


def test_minus_one_and_metaq_forms_still_read() -> None:
    assert decode_offset("/p", b"-1") == -1
    assert decode_offset("/p", b"-1-0") == 0
    assert decode_offset("/p", b"1349857398021-10240") == 10240


def test_whitelist_regex_rejected_by_re2_is_malformed_naming_the_node() -> None:
    path = "/consumers/g/ids/g_peer"
    raw = _json({"version": 1, "subscription": {"(a)\\1": 1}, "pattern": "white_list", "timestamp": "1"})
    with pytest.raises(MalformedNodeError, match=f"malformed node {path}: topic filter .*not a valid regex"):
        TopicCount.decode(path, raw)


def test_kafka_whitelist_conventions_under_re2() -> None:
    """',' means '|' (Kafka 0.8), full match as Java's String.matches, and the usual syntax."""
    count = TopicCount.decode("/consumers/g/ids/x", _json(
        {"version": 1, "subscription": {"logs\\..*, audit": 2}, "pattern": "white_list", "timestamp": "1"}))
    topics = ["logs.web", "audit", "auditx", "logsXweb", "xlogs.web"]
    assert count.streams_per_topic(topics) == {"audit": 2, "logs.web": 2}
    usual = TopicCount({"(?i)CLICKS|[a-c]{2}\\d": 1}, "white_list")  # no ',' in {m,n}: it would become '|'
    assert usual.streams_per_topic(["clicks", "ab1", "abcd1", "views"]) == {"ab1": 1, "clicks": 1}
