"""The embedded consumer protocol (metaq.consumer.group_protocol): byte layouts and the range assignor."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.group_protocol import (
    Member,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    roundrobin_assign,
)
from metaq.errors import ConfigError, ProtocolError


def test_range_matches_the_javadoc_example() -> None:
    """RangeAssignor's Javadoc: C0 and C1, t0 and t1 with 3 partitions each ->
    C0: [t0p0, t0p1, t1p0, t1p1], C1: [t0p2, t1p2]."""
    members = {m: Member(m, None, ("t0", "t1")) for m in ("C1", "C0")}
    assert range_assign(members, {"t0": 3, "t1": 3}) == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "C1": [("t0", 2), ("t1", 2)]}


def test_range_orders_static_members_first_and_skips_unsubscribed() -> None:
    members = {"a": Member("a", None, ("t",)), "z": Member("z", "instance-1", ("t",)), "b": Member("b", None, ("u",))}
    assert range_assign(members, {"t": 3, "u": 1}) == {"z": [("t", 0), ("t", 1)], "a": [("t", 2)], "b": [("u", 0)]}


def test_range_gives_unknown_topics_nothing() -> None:
    assert range_assign({"a": Member("a", None, ("gone",))}, {}) == {"a": []}


def test_roundrobin_matches_the_javadoc_examples() -> None:
    """RoundRobinAssignor's Javadoc: C0, C1 on t0, t1 (3 partitions each) -> C0: [t0p0, t0p2, t1p1],
    C1: [t0p1, t1p0, t1p2]; and C0 on t0, C1 on t0+t1, C2 on t0+t1+t2 (1, 2, 3 partitions) -> C0: [t0p0],
    C1: [t1p0], C2: [t1p1, t2p0, t2p1, t2p2]."""
    even = {m: Member(m, None, ("t0", "t1")) for m in ("C1", "C0")}
    assert roundrobin_assign(even, {"t0": 3, "t1": 3}) == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)], "C1": [("t0", 1), ("t1", 0), ("t1", 2)]}
    uneven = {"C0": Member("C0", None, ("t0",)), "C1": Member("C1", None, ("t0", "t1")),
              "C2": Member("C2", None, ("t0", "t1", "t2"))}
    assert roundrobin_assign(uneven, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": [("t0", 0)], "C1": [("t1", 0)], "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def test_byte_layouts_are_kafkas_consumer_protocol() -> None:
    data = encode_subscription(["b", "a"])
    assert ConsumerProtocolSubscription.decode(data).topics == ["a", "b"]
    assert decode_subscription(data) == ("a", "b")
    raw = encode_assignment([("t", 2), ("t", 0), ("u", 1)])
    decoded = ConsumerProtocolAssignment.decode(raw)
    assert [(tp.topic, tp.partitions) for tp in decoded.assigned_partitions] == [("t", [0, 2]), ("u", [1])]
    assert decode_assignment(raw) == [("t", 0), ("t", 2), ("u", 1)]
    assert decode_assignment(b"") == []


def test_foreign_bytes_are_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode_subscription(b"\x00")


def test_group_coordination_config() -> None:
    base = {"group.id": "g", "zookeeper.connect": "zk:2181"}
    assert ConsumerConfig.from_properties(base).group_coordination == "zookeeper"
    config = ConsumerConfig.from_properties({**base, "group.coordination": "kafka", "group.instance.id": "i-1"})
    assert (config.group_coordination, config.session_timeout_ms, config.heartbeat_interval_ms,
            config.max_poll_interval_ms, config.group_instance_id) == ("kafka", 45000, 3000, 300000, "i-1")
    with pytest.raises(ConfigError, match="group.coordination"):
        ConsumerConfig.from_properties({**base, "group.coordination": "etcd"})
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        ConsumerConfig.from_properties({**base, "group.coordination": "kafka", "session.timeout.ms": 3000,
                                        "heartbeat.interval.ms": 3000})
    assert ConsumerConfig.from_properties({**base, "group.coordination": "kafka", "partition.assignment.strategy":
                                           "roundrobin"}).partition_assignment_strategy == "roundrobin"
