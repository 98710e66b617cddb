"""The pure parts of the group admin APIs: what DescribeGroups shows of a group, which topics its members
subscribe to (OffsetDelete), and offset tombstones that survive a reload of the partition."""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from metaq.broker.coordinator import group_state as g
from metaq.broker.coordinator.group_state import Group, Member
from metaq.broker.coordinator.offsets_partition import CommittedOffset, OffsetsPartition
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog


def _subscription(*topics: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode())


def _group(protocol_type: str = "consumer", **metadata: bytes) -> Group:
    group = Group("etl")
    for name, md in metadata.items():
        group.add(Member(name, None, f"client-{name}", "/127.0.0.1", 10000, 10000, protocol_type, [("range", md)]))
    return group


def _stable(group: Group) -> Group:
    group.transition(g.PREPARING_REBALANCE)
    group.transition(g.COMPLETING_REBALANCE)
    group.protocol_name = "range"
    for member in group.members.values():
        member.assignment = b"assigned-" + member.member_id.encode()
    group.transition(g.STABLE)
    return group


def test_describe_shows_metadata_and_assignment_only_when_stable() -> None:
    group = _group(a=_subscription("clicks"))
    group.transition(g.PREPARING_REBALANCE)
    preparing = group.describe()
    assert (preparing.state, preparing.protocol_name, preparing.protocol_type) == ("PreparingRebalance", "", "consumer")
    assert [(m.metadata, m.assignment) for m in preparing.members] == [(b"", b"")]
    group.transition(g.COMPLETING_REBALANCE)
    group.protocol_name = "range"
    group.members["a"].assignment = b"x"
    group.transition(g.STABLE)
    [member] = group.describe().members
    assert (member.client_id, member.client_host, member.metadata, member.assignment) == (
        "client-a", "/127.0.0.1", _subscription("clicks"), b"x")
    assert group.describe().protocol_name == "range"


def test_subscribed_topics_of_consumer_groups() -> None:
    assert _stable(_group(a=_subscription("clicks"), b=_subscription("clicks", "views"))).subscribed_topics() == {
        "clicks", "views"}
    assert _group(a=b"not a subscription").subscribed_topics() is None  # unknown: every topic counts as subscribed
    assert _group("connect", a=_subscription("clicks")).subscribed_topics() is None


def _partition(directory: Path) -> OffsetsPartition:
    log = PartitionLog.open(directory / f"{OFFSETS_TOPIC}-0", OFFSETS_TOPIC, 0, LogConfig(), recover=False,
                            recovery_point=0)
    return OffsetsPartition(log)


def test_deleted_offsets_stay_deleted_after_a_reload(tmp_path: Path) -> None:
    part = _partition(tmp_path)
    part.load()
    part.append_commits("etl", {("clicks", 0): CommittedOffset(5, "", 1), ("clicks", 1): CommittedOffset(6, "", 1)})
    part.append_commits("other", {("clicks", 0): CommittedOffset(7, "", 1)})
    assert part.delete_offsets("etl", [("clicks", 1), ("views", 0)]) == [("clicks", 1)]
    assert set(part.fetch("etl", None)) == {("clicks", 0)}
    assert part.delete_offsets("etl") == [("clicks", 0)]
    assert part.groups() == ["other"]
    part.log.close()

    reloaded = _partition(tmp_path)
    reloaded.load()
    assert reloaded.groups() == ["other"] and reloaded.fetch("etl", None) == {}
