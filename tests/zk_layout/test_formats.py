"""Node codecs: byte-exact against the examples in the spec, tolerant of old versions and MetaQ, and every bad
input is a MalformedNodeError that names the path."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metaq.errors import ConfigError, MalformedNodeError
from zk_layout import (
    BLACK_LIST,
    STATIC,
    WHITE_LIST,
    BrokerInfo,
    ClusterId,
    ControllerInfo,
    PartitionState,
    TopicAssignment,
    TopicConfig,
    TopicCount,
    decode_controller_epoch,
    decode_offset,
    decode_owner,
    encode_controller_epoch,
    encode_offset,
    encode_owner,
    normalize_topic_filter,
    parse_endpoint,
)

BROKER_V5 = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://127.0.0.1:9092"],"jmx_port":-1,"port":9092,"host":"127.0.0.1","version":5,'
    b'"timestamp":"1700000000000"}'
)
BROKER_V1 = b'{"jmx_port":-1,"timestamp":"1428512949385","host":"kafka1","version":1,"port":9092}'


# -- brokers ------------------------------------------------------------------------------------------------


def test_broker_v5_encodes_byte_for_byte_like_kafka() -> None:
    info = BrokerInfo.plaintext(0, "127.0.0.1", 9092, timestamp_ms=1700000000000)
    assert info.encode() == BROKER_V5


def test_broker_v5_round_trip() -> None:
    info = BrokerInfo.decode("/brokers/ids/0", BROKER_V5)
    assert (info.id, info.host, info.port, info.timestamp_ms, info.version) == (0, "127.0.0.1", 9092, 1700000000000, 5)
    assert info.endpoints == ("PLAINTEXT://127.0.0.1:9092",)
    assert info.encode() == BROKER_V5


def test_broker_v1_from_kafka_0_8() -> None:
    info = BrokerInfo.decode("/brokers/ids/3", BROKER_V1)
    assert (info.id, info.host, info.port, info.jmx_port, info.version) == (3, "kafka1", 9092, -1, 1)
    assert info.endpoints == ()
    assert info.address() == ("kafka1", 9092)


def test_broker_without_plaintext_listener_has_null_host() -> None:
    raw = b'{"version":4,"host":null,"port":-1,"endpoints":["SSL://h:9093"],"jmx_port":-1,"timestamp":"1"}'
    info = BrokerInfo.decode("/brokers/ids/1", raw)
    assert info.host is None and info.port == -1
    assert info.address() is None
    assert info.address("SSL") == ("h", 9093)


def test_broker_rack_is_written_from_v3() -> None:
    info = BrokerInfo.plaintext(1, "h", 1, timestamp_ms=5, rack="r1")
    assert json.loads(info.encode())["rack"] == "r1"
    assert "rack" not in json.loads(info.encode(version=2))
    assert BrokerInfo.decode("/brokers/ids/1", info.encode()).rack == "r1"


@pytest.mark.parametrize(
    ("raw", "host", "port"),
    [(b"meta://10.0.0.5:8123", "10.0.0.5", 8123), (b"meta://[::1]:8123", "::1", 8123)],
)
def test_broker_metaq_uri(raw: bytes, host: str, port: int) -> None:
    info = BrokerInfo.decode("/meta/brokers/ids/7", raw)
    assert (info.id, info.host, info.port, info.version) == (7, host, port, 0)


def test_ipv6_endpoint_parses() -> None:
    assert parse_endpoint("PLAINTEXT://[::1]:9092") == ("PLAINTEXT", "::1", 9092)
    assert BrokerInfo.plaintext(0, "::1", 9092).endpoints == ("PLAINTEXT://[::1]:9092",)


def test_broker_id_must_come_from_path_or_argument() -> None:
    with pytest.raises(MalformedNodeError) as e:
        BrokerInfo.decode("/brokers/ids/x", BROKER_V5)
    assert e.value.path == "/brokers/ids/x"
    assert BrokerInfo.decode("/anything", BROKER_V5, broker_id=9).id == 9


# -- topics -------------------------------------------------------------------------------------------------


def test_topic_assignment_v1_exact() -> None:
    raw = b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}'
    assignment = TopicAssignment.decode("/brokers/topics/t", raw)
    assert assignment.partitions == {0: (1, 2), 1: (2, 3)}
    assert assignment.encode() == raw


def test_topic_assignment_partitions_sort_numerically() -> None:
    assignment = TopicAssignment({10: [0], 2: [0], 1: [0]})
    assert assignment.partition_ids == [1, 2, 10]
    assert assignment.encode() == b'{"version":1,"partitions":{"1":[0],"2":[0],"10":[0]}}'


def test_topic_assignment_v3() -> None:
    raw = (
        b'{"version":3,"partitions":{"0":[1,2],"1":[2,1]},"adding_replicas":{},"removing_replicas":{},'
        b'"topic_id":"Vm9sYXRpbGVDbHVzdGVyQQ"}'
    )
    assignment = TopicAssignment.decode("/brokers/topics/t", raw)
    assert (assignment.version, assignment.topic_id) == (3, "Vm9sYXRpbGVDbHVzdGVyQQ")
    assert assignment.encode() == raw


def test_partition_state_exact() -> None:
    raw = b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}'
    state = PartitionState.decode("/brokers/topics/t/partitions/0/state", raw)
    assert state == PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)
    assert state.encode() == raw


def test_partition_state_keeps_kafka_3_8_recovery_state() -> None:
    raw = b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0],"leader_recovery_state":1}'
    assert PartitionState.decode("/s", raw).leader_recovery_state == 1
    assert PartitionState.decode("/s", raw).encode() == raw


def test_topic_config_and_cluster_and_controller() -> None:
    assert TopicConfig().encode() == b'{"version":1,"config":{}}'
    assert ClusterId("Vm9sYXRpbGVDbHVzdGVyQQ").encode() == b'{"version":"1","id":"Vm9sYXRpbGVDbHVzdGVyQQ"}'
    assert ClusterId.decode("/cluster/id", b'{"version":1,"id":"abc"}') == ClusterId("abc", "1")
    v1 = b'{"version":1,"brokerid":0,"timestamp":"1700000000000"}'
    v2 = b'{"version":2,"brokerid":0,"timestamp":"1700000000000","kraftControllerEpoch":-1}'
    assert ControllerInfo(0, 1700000000000).encode() == v1
    assert ControllerInfo.decode("/controller", v2).encode() == v2
    assert encode_controller_epoch(1) == b"1"
    assert decode_controller_epoch("/controller_epoch", b"1") == 1


# -- consumers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "pattern", "subscription"),
    [
        (
            b'{"version":1,"subscription":{"clicks":2,"views":1},"pattern":"static","timestamp":"1428512949385"}',
            STATIC,
            {"clicks": 2, "views": 1},
        ),
        (
            b'{"version":1,"subscription":{"logs\\\\..*":1},"pattern":"white_list","timestamp":"1428512949385"}',
            WHITE_LIST,
            {"logs\\..*": 1},
        ),
        (
            b'{"version":1,"subscription":{"__.*":2},"pattern":"black_list","timestamp":"1428512949385"}',
            BLACK_LIST,
            {"__.*": 2},
        ),
    ],
)
def test_topic_count_spec_examples_round_trip(raw: bytes, pattern: str, subscription: dict[str, int]) -> None:
    count = TopicCount.decode("/consumers/g/ids/c", raw)
    assert (count.pattern, count.subscription, count.timestamp_ms) == (pattern, subscription, 1428512949385)
    assert count.encode() == raw


def test_topic_count_unknown_pattern_or_empty_subscription_is_static() -> None:
    odd = TopicCount.decode("/c", b'{"subscription":{"a":1,"b":2},"pattern":"whatever"}')
    assert (odd.pattern, odd.subscription) == (STATIC, {"a": 1, "b": 2})
    empty = TopicCount.decode("/c", b'{"subscription":{},"pattern":"white_list"}')
    assert (empty.pattern, empty.subscription) == (STATIC, {})


def test_topic_count_wildcard_keeps_first_entry() -> None:
    count = TopicCount.decode("/c", b'{"subscription":{"a.*":3,"b.*":1},"pattern":"white_list"}')
    assert count.subscription == {"a.*": 3}


def test_topic_count_requires_pattern_and_subscription() -> None:
    for raw in (b'{"subscription":{"a":1}}', b'{"pattern":"static"}'):
        with pytest.raises(MalformedNodeError):
            TopicCount.decode("/c", raw)


def test_topic_count_metaq_csv_is_static_one_stream() -> None:
    count = TopicCount.decode("/meta/consumers/g/ids/g_c", b"t1,t2")
    assert (count.pattern, count.subscription, count.version) == (STATIC, {"t1": 1, "t2": 1}, 0)


def test_topic_filter_expansion() -> None:
    topics = ["logs.a", "logs.b", "metrics", "__consumer_offsets"]
    white = TopicCount({" 'logs\\..*' ": 2}, WHITE_LIST, 1)
    assert white.streams_per_topic(topics) == {"logs.a": 2, "logs.b": 2}
    black = TopicCount({"logs\\..*": 1}, BLACK_LIST, 1)
    assert black.streams_per_topic(topics) == {"metrics": 1}
    assert black.streams_per_topic(topics, exclude_internal=False) == {"__consumer_offsets": 1, "metrics": 1}
    assert normalize_topic_filter(' "a, b" ') == "a|b"
    with pytest.raises(ConfigError):
        TopicCount({"(": 1}, WHITE_LIST, 1).streams_per_topic(topics)


@pytest.mark.parametrize(
    ("raw", "offset"),
    [(b"4213", 4213), (b"1349857398021-10240", 10240), (b"-1-0", 0), (b"-1-1234", 1234), (b" 7\n", 7)],
)
def test_decode_offset_tolerant(raw: bytes, offset: int) -> None:
    assert decode_offset("/consumers/g/offsets/t/0", raw) == offset


@pytest.mark.parametrize("raw", [b"", b"x", b"1-", b"1--2", b"0x10", b"1_000", b"\xd9\xa4", b"1" * 30, b"1-2-3"])
def test_decode_offset_rejects(raw: bytes) -> None:
    with pytest.raises(MalformedNodeError) as e:
        decode_offset("/consumers/g/offsets/t/0", raw)
    assert e.value.path == "/consumers/g/offsets/t/0"


def test_encode_offset_is_digits_only() -> None:
    assert encode_offset(4213) == b"4213"
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError):
            encode_offset(bad)  # type: ignore[arg-type]


def test_owner_round_trip() -> None:
    thread = "etl_host1-1700000000000-6b2a1f0c-0"
    assert decode_owner("/o", encode_owner(thread)) == thread
    with pytest.raises(MalformedNodeError):
        decode_owner("/o", b"")


# -- malformed input ----------------------------------------------------------------------------------------

DECODERS: dict[str, Callable[[str, Any], object]] = {
    "broker": BrokerInfo.decode,
    "assignment": TopicAssignment.decode,
    "state": PartitionState.decode,
    "topic_config": TopicConfig.decode,
    "topic_count": TopicCount.decode,
    "cluster_id": ClusterId.decode,
    "controller": ControllerInfo.decode,
    "offset": decode_offset,
    "owner": decode_owner,
    "controller_epoch": decode_controller_epoch,
}
PATH = "/brokers/ids/1"


@pytest.mark.parametrize(
    ("decoder", "raw"),
    [
        ("broker", b"{"),
        ("broker", b'{"version":"5","host":"h","port":1}'),
        ("broker", b'{"version":5,"host":"h","port":"9092"}'),
        ("broker", b'{"version":5,"timestamp":"soon"}'),
        ("broker", b"meta://nohostport"),
        ("broker", b"\xff\xfe"),
        ("broker", None),
        ("assignment", b'{"version":1,"partitions":{"x":[1]}}'),
        ("assignment", b'{"version":1,"partitions":{"0":[true]}}'),
        ("assignment", b'{"version":1}'),
        ("assignment", b"[1,2]"),
        ("state", b'{"leader":0}'),
        ("state", b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":0}'),
        ("topic_count", b'"topic"'),
        ("topic_count", b'{"subscription":{"a":-1},"pattern":"static"}'),
        ("topic_count", b'{"subscription":[],"pattern":"static"}'),
        ("cluster_id", b'{"version":"1"}'),
        ("controller", b'{"version":1}'),
        ("broker", b"[" * 100000),
        ("assignment", b'{"partitions":{"' + b"1" * 5000 + b'":[1]}}'),
        ("state", b'{"leader":' + b"1" * 5000 + b"}"),
    ],
)
def test_malformed_raises_with_path(decoder: str, raw: bytes | None) -> None:
    with pytest.raises(MalformedNodeError) as e:
        DECODERS[decoder](PATH, raw)
    assert e.value.path == PATH
    assert PATH in str(e.value)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(DECODERS)), raw=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_malformed(name: str, raw: bytes) -> None:
    try:
        DECODERS[name](PATH, raw)
    except MalformedNodeError as e:
        assert e.path == PATH


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_known_keys = st.sampled_from(
    [
        "version", "host", "port", "endpoints", "timestamp", "jmx_port", "rack", "features",
        "listener_security_protocol_map", "partitions", "adding_replicas", "removing_replicas", "topic_id",
        "leader", "leader_epoch", "isr", "controller_epoch", "leader_recovery_state", "subscription",
        "pattern", "config", "id", "brokerid", "kraftControllerEpoch",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(DECODERS)), obj=st.dictionaries(_known_keys, _json_values, max_size=8))
def test_arbitrary_json_objects_raise_only_malformed(name: str, obj: dict[str, Any]) -> None:
    raw = json.dumps(obj).encode()
    try:
        DECODERS[name](PATH, raw)
    except MalformedNodeError as e:
        assert e.path == PATH
