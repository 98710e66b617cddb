"""The pure parts of the live migration: which mode the marker asks of a member, the path between modes, the
bridge leader's assignment and the bytes that carry a member's consumer id (metaq.consumer.migration)."""

from __future__ import annotations

import pytest

from metaq.consumer.assignors import AssignmentContext
from metaq.consumer.group_protocol import decode_subscription, encode_subscription
from metaq.consumer.migration import (
    bridge_assignment,
    bridge_consumer_id,
    encode_bridge_subscription,
    next_step,
    target_mode,
)
from metaq.errors import MalformedNodeError
from zk_layout import TopicCount
from zk_layout.migration import BRIDGING, DONE, MIGRATING, MemberMode, MigrationMarker


@pytest.mark.parametrize(("marker", "consumer", "configured", "expected"), [
    (None, "c1", "zookeeper", "zookeeper"),
    (None, "c1", "kafka", "kafka"),
    (MigrationMarker("kafka", 1, MIGRATING), "c1", "zookeeper", "bridge"),
    (MigrationMarker("kafka", 1, MIGRATING, True, ("c2",)), "c1", "zookeeper", "zookeeper"),  # not named yet
    (MigrationMarker("kafka", 1, MIGRATING, True, ("c1",)), "c1", "zookeeper", "bridge"),
    (MigrationMarker("kafka", 1, MIGRATING, True, ()), "c1", "kafka", "bridge"),  # must respect owner nodes
    (MigrationMarker("kafka", 1, DONE), "c1", "zookeeper", "kafka"),
    (MigrationMarker("zookeeper", 2, BRIDGING), "c1", "kafka", "bridge"),
    (MigrationMarker("zookeeper", 2, BRIDGING, True), "c1", "zookeeper", "bridge"),
    (MigrationMarker("zookeeper", 2, MIGRATING), "c1", "kafka", "zookeeper"),
    (MigrationMarker("zookeeper", 2, MIGRATING, True, ("c2",)), "c1", "kafka", "bridge"),
    (MigrationMarker("zookeeper", 2, DONE), "c1", "kafka", "zookeeper"),
])
def test_the_marker_decides_the_mode(marker: MigrationMarker | None, consumer: str, configured: str,
                                     expected: str) -> None:
    assert target_mode(marker, consumer, configured) == expected


def test_zookeeper_and_kafka_members_pass_through_bridge() -> None:
    assert next_step("zookeeper", "kafka") == "bridge"
    assert next_step("kafka", "zookeeper") == "bridge"
    assert next_step("zookeeper", "bridge") == "bridge"
    assert next_step("bridge", "kafka") == "kafka"


def test_the_bridge_leader_gives_each_member_its_zookeeper_share() -> None:
    """Kafka 0.8's range over the three registrations (string-sorted thread ids c1-0, c2-0, c3-0): c1 gets 0-3,
    c2 4-7, c3 8-11. c2 is still a ZooKeeper member (not in the JoinGroup): its share goes to nobody here;
    a librdkafka member without our user data gets nothing."""
    registrations = {cid: TopicCount(subscription={"t": 1}) for cid in ("g_c1", "g_c2", "g_c3")}
    context = AssignmentContext.from_topic_counts(registrations, {"t": list(range(12))})
    members = {"m-a": ("g_c3", ("t",)), "m-b": ("g_c1", ("t",)), "rdkafka-1": (None, ("t",))}
    assert bridge_assignment(members, context, "range", "0.8") == {
        "m-a": [("t", p) for p in range(8, 12)], "m-b": [("t", p) for p in range(4)], "rdkafka-1": []}


def test_a_bridge_subscription_names_the_consumer_id_and_stays_kafkas_format() -> None:
    data = encode_bridge_subscription(["t2", "t1"], "g_host-1-ab")
    assert decode_subscription(data) == ("t1", "t2")
    assert bridge_consumer_id(data) == "g_host-1-ab"
    assert bridge_consumer_id(encode_subscription(["t1"])) is None
    assert bridge_consumer_id(b"\x00\x01garbage") is None


def test_marker_and_mode_nodes_round_trip() -> None:
    marker = MigrationMarker("zookeeper", 3, MIGRATING, True, ("c1",)).with_member("c0")
    assert marker.members == ("c0", "c1")
    assert MigrationMarker.decode("/m", marker.encode()) == marker
    assert MemberMode.decode("/m/c1", MemberMode("bridge", 3).encode()) == MemberMode("bridge", 3)
    with pytest.raises(MalformedNodeError):
        MigrationMarker.decode("/m", b'{"to": "etcd", "epoch": 1, "state": "DONE"}')
    with pytest.raises(MalformedNodeError):
        MemberMode.decode("/m/c1", b'{"coordination": "both"}')
