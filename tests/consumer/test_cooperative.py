"""The cooperative protocol's pure parts (metaq.consumer.cooperative, sticky, hash_ring): the subscription codec,
the incremental change, MetaQ's consistent hash. Equality with Java's assignors: integration_tests/
test_assignors_vs_java.py."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import ConsumerProtocolSubscription

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.cooperative import (
    AssignmentChange,
    MemberSubscription,
    assign,
    decode_subscription,
    encode_subscription,
    sticky_user_data,
)
from metaq.consumer.group_protocol import encode_subscription as encode_v0
from metaq.consumer.hash_ring import consistent_hash_assign
from metaq.errors import ConfigError, ProtocolError


def test_subscription_v3_round_trips_and_v0_still_decodes() -> None:
    data = encode_subscription(["b", "a"], owned=[("a", 2), ("a", 0)], generation=7, user_data=sticky_user_data(7))
    assert decode_subscription(data) == MemberSubscription(("a", "b"), b"\x00\x00\x00\x07", (("a", 0), ("a", 2)), 7)
    # a v0-only reader (kafka-python's schema) still reads the topics and user data of the v3 bytes
    assert ConsumerProtocolSubscription.decode(data).topics == ["a", "b"]
    assert decode_subscription(encode_v0(["t"])) == MemberSubscription(("t",))
    with pytest.raises(ProtocolError):
        decode_subscription(data[:-9])


def test_cooperative_sticky_holds_back_moved_partitions() -> None:
    """A new member gets nothing in the first round: its partitions are first revoked by their owners."""
    owners = {"a": MemberSubscription(("t",), sticky_user_data(3), tuple(("t", p) for p in range(4)), 3),
              "b": MemberSubscription(("t",))}
    first = assign("cooperative-sticky", owners, {"t": 4}, {})
    assert first == {"a": [("t", 0), ("t", 1)], "b": []}
    change = AssignmentChange.of(owners["a"].owned, first["a"])
    assert (change.kept, change.revoked, change.added) == ({("t", 0), ("t", 1)}, {("t", 2), ("t", 3)}, set())
    second = assign("cooperative-sticky", {"a": MemberSubscription(("t",), None, tuple(first["a"]), 4),
                                           "b": MemberSubscription(("t",), None, (), 4)}, {"t": 4}, {})
    assert second == {"a": [("t", 0), ("t", 1)], "b": [("t", 2), ("t", 3)]}


def test_sticky_with_different_subscriptions_is_valid_and_keeps_owned() -> None:
    subs = {"a": MemberSubscription(("x", "y"), None, (("y", 0), ("y", 1), ("y", 2)), 2),
            "b": MemberSubscription(("y",), None, (), 2), "c": MemberSubscription(("x",), None, (), 2)}
    result = assign("cooperative-sticky", subs, {"x": 2, "y": 3}, {})
    every = sorted(tp for parts in result.values() for tp in parts)
    assert len(every) == len(set(every))
    assert all(t in subs[m].topics for m, parts in result.items() for t, _ in parts)
    assert len(set(result["a"]) & set(subs["a"].owned)) == 2  # keeps two, one moves to b (next round)
    assert result["b"] == []


def test_consistent_hash_moves_only_the_leaving_members_partitions() -> None:
    topics = {m: ("t",) for m in ("m1", "m2", "m3")}
    before = consistent_hash_assign(topics, {"t": 64})
    after = consistent_hash_assign({m: t for m, t in topics.items() if m != "m2"}, {"t": 64})
    assert sorted(p for parts in before.values() for p in parts) == [("t", p) for p in range(64)]
    assert all(set(before[m]) <= set(after[m]) for m in ("m1", "m3"))
    static = consistent_hash_assign({"x": ("t",)}, {"t": 4}, {"x": "instance-1"})
    assert static == {"x": [("t", p) for p in range(4)]}


def test_new_assignors_need_kafka_coordination() -> None:
    base = {"group.id": "g", "zookeeper.connect": "127.0.0.1:1"}
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        ConsumerConfig.from_properties({**base, "partition.assignment.strategy": "cooperative-sticky"})
    config = ConsumerConfig.from_properties({**base, "group.coordination": "kafka",
                                             "partition.assignment.strategy": "metaq-consistent-hash"})
    assert config.partition_assignment_strategy == "metaq-consistent-hash"
