"""The embedded "consumer" protocol of Kafka's group protocol: subscriptions, assignments and the assignors.

JoinGroup carries each member's *subscription* and SyncGroup the leader's *assignments* as opaque bytes whose
layout is Kafka's ``ConsumerProtocol`` (``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``,
version 0, as kafka-python's schemas encode them). Using that layout, the protocol type ``consumer`` and the
assignor names ``range`` and ``roundrobin`` is what lets metaq members share a group with Java, librdkafka and
kafka-python members (docs/broker-coordinated-consumer.md)::

    data = encode_subscription(["clicks"])
    assignment = range_assign({"m1": Member("m1", None, ("clicks",))}, {"clicks": 4})   # {"m1": [("clicks", 0), ...]}
    decode_assignment(encode_assignment(assignment["m1"]))                             # [("clicks", 0), ...]

Pure functions only: the leader computes the whole group's assignment from the JoinGroup answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from metaq.consumer.assignors import range_split
from metaq.errors import ProtocolError

PROTOCOL_TYPE = "consumer"
RANGE = "range"
ROUNDROBIN = "roundrobin"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Member:
    """One member of the JoinGroup answer, its subscription decoded."""

    member_id: str
    group_instance_id: str | None
    topics: tuple[str, ...]

    def sort_key(self) -> tuple[int, str, str]:
        """Kafka's ``AbstractPartitionAssignor.MemberInfo`` order: static members (by instance id) before dynamic
        ones, then by member id."""
        if self.group_instance_id is not None:
            return (0, self.group_instance_id, self.member_id)
        return (1, "", self.member_id)


def encode_subscription(topics: Iterable[str]) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=sorted(set(topics)), user_data=None).encode())


def decode_subscription(data: bytes) -> tuple[str, ...]:
    """The topics of a member's subscription; ProtocolError if the bytes are not Kafka's ConsumerProtocol."""
    try:
        return tuple(ConsumerProtocolSubscription.decode(bytes(data)).topics)
    except Exception as e:  # the decoder raises assorted errors on truncated or foreign bytes
        raise ProtocolError(f"a member's subscription does not decode as ConsumerProtocolSubscription: {e}") from e


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    assigned = [ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=sorted(ps))
                for topic, ps in sorted(by_topic.items())]
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=assigned, user_data=None).encode())


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a SyncGroup answer; an empty answer (a member left out by the leader) is none."""
    if not data:
        return []
    try:
        decoded = ConsumerProtocolAssignment.decode(bytes(data))
    except Exception as e:
        raise ProtocolError(f"the SyncGroup assignment does not decode as ConsumerProtocolAssignment: {e}") from e
    return sorted((tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions)


def range_assign(members: Mapping[str, Member], partition_counts: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's ``RangeAssignor`` (without rack awareness): per topic, contiguous runs of its partitions go to the
    subscribed members in :meth:`Member.sort_key` order, the first ``count % members`` getting one more. A topic
    with no known partition count assigns nothing. Every member gets an entry, possibly empty."""
    result: dict[str, list[TopicPartition]] = {member_id: [] for member_id in members}
    ordered = sorted(members.values(), key=Member.sort_key)
    for topic in sorted({t for m in members.values() for t in m.topics}):
        count = partition_counts.get(topic, 0)
        subscribed: Sequence[str] = [m.member_id for m in ordered if topic in m.topics]
        for key, member_id in range_split(subscribed, [(topic, p) for p in range(count)]).items():
            result[member_id].append(key)
    return {member_id: sorted(parts) for member_id, parts in result.items()}


def roundrobin_assign(members: Mapping[str, Member],
                      partition_counts: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's ``RoundRobinAssignor``: every subscribed topic's partitions (topics by name, partitions in order)
    dealt one at a time to the members in :meth:`Member.sort_key` order, going round, skipping a member not
    subscribed to the partition's topic."""
    result: dict[str, list[TopicPartition]] = {member_id: [] for member_id in members}
    ordered = sorted(members.values(), key=Member.sort_key)
    if not ordered:
        return result
    position = 0
    for topic in sorted({t for m in ordered for t in m.topics}):
        for partition in range(partition_counts.get(topic, 0)):
            while topic not in ordered[position % len(ordered)].topics:
                position += 1
            result[ordered[position % len(ordered)].member_id].append((topic, partition))
            position += 1
    return result


ASSIGNORS = {RANGE: range_assign, ROUNDROBIN: roundrobin_assign}
"""Assignor name (JoinGroup's protocol name, ``partition.assignment.strategy``) -> function."""


def metadata_changes(assigned: Mapping[str, int], now: Mapping[str, tuple[int, ...] | None]) -> list[str]:
    """What changed in the subscribed topics since the leader computed the assignment from ``assigned``
    (partition counts): Java's ``ConsumerCoordinator`` rejoins when its ``assignmentSnapshot`` no longer
    matches the metadata (a topic gained partitions, was created or deleted). Empty: nothing changed."""
    changes = []
    for topic in sorted(set(assigned) | set(now)):
        before = assigned.get(topic, 0)
        ids = now.get(topic)
        after = len(ids) if ids else 0
        if before != after:
            changes.append(f"topic {topic} has {after} partitions (the assignment used {before})")
    return changes
