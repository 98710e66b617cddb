"""Consumer groups as an operator sees them: members, and per partition the committed offset, log end, lag,
owner, last commit time and a status flag.

    describe_group(layout, log_offsets, "etl")     # GroupDescription(group="etl", members=[...], partitions=[...])

The gathering functions read ZooKeeper (and ask the leaders for log offsets); :func:`build_description`
is the pure part that decides lag and status, so that it can be tested without servers. Offsets come from
ZooKeeper and, given a :class:`~metaq.client.group_offsets.GroupOffsetsStore`, from ``__consumer_offsets``
over the offsets channel; a partition's offset is ``max(zookeeper, kafka)``, what a metaq consumer with
``offsets.storage=kafka`` resumes from, and its ``source`` says which store(s) hold it.

Given a :class:`~metaq.admin.broker_groups.CoordinatorGroups`, groups that the brokers' group coordinators know
(protocol groups: confluent-kafka, ``kcat -G``, kafka-python; and groups with offsets only in
``__consumer_offsets``) are listed and described too, with their members, state and assignment; ``kind`` says
where a group is known: ``zookeeper`` (``/consumers``), ``protocol`` (a coordinator) or ``both``. Listing the groups
is metaq.admin.group_listing's, deleting them (or their offsets) metaq.admin.group_deletion's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from metaq.admin.broker_groups import CoordinatorGroup, CoordinatorGroups, CoordinatorListing
from metaq.admin.log_offsets import LogOffsets, TopicPartition, Watermarks
from metaq.admin.migration import MigrationView, migration_view
from metaq.client.group_offsets import GroupOffsetsStore
from metaq.errors import (
    GroupNotFoundError,
    MetaqError,
    UnknownTopicError,
)
from zk_layout import OffsetNode, TopicCount, ZkLayout
from zk_layout.paths import consumer_group_path

# Partition status flags, most serious first (a partition shows the first that applies).
ORPHAN = "ORPHAN"  # the owner node names a consumer that is no longer registered
NO_OWNER = "NO_OWNER"  # members subscribe to the topic, yet nobody owns the partition
UNKNOWN_TOPIC = "UNKNOWN_TOPIC"  # offsets for a topic that no longer exists
OUT_OF_RANGE = "OUT_OF_RANGE"  # the committed offset is outside [log start, log end]
NO_LEADER = "NO_LEADER"  # the log offsets cannot be read now
STALLED = "STALLED"  # lag > 0 and no commit for ``stall_after_ms``
OK = "OK"

# Where a partition's offset came from.
ZOOKEEPER = "zookeeper"
KAFKA = "kafka"
BOTH = "both"

DEFAULT_STALL_AFTER_MS = 10 * 60 * 1000
_GENERATED_ID = re.compile(r"(?P<host>.+)-(?P<ms>[0-9]{10,})-(?P<hex>[0-9a-f]{1,8})")


@dataclass(frozen=True)
class Member:
    """A registered consumer: ``/consumers/<g>/ids/<consumer id>``. ``ephemeral`` is False for a persistent
    node, which is no live consumer (a fake or left-over one): metaq consumers leave it out of the
    assignment, Kafka 0.8 consumers give it partitions nobody reads; ``groups describe`` flags it."""

    consumer_id: str
    host: str | None
    subscription: dict[str, int]
    pattern: str
    registered_ms: int | None
    ephemeral: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"consumer_id": self.consumer_id, "host": self.host, "subscription": self.subscription,
                "pattern": self.pattern, "registered_ms": self.registered_ms, "ephemeral": self.ephemeral}


@dataclass(frozen=True)
class PartitionLag:
    """One row of ``groups describe``. ``offset`` is None when the group has not committed one."""

    topic: str
    partition: int
    offset: int | None
    log_start: int | None
    log_end: int | None
    owner: str | None
    last_commit_ms: int | None
    first_commit_ms: int | None
    status: str
    source: str | None = None  # zookeeper | kafka | both (which stores hold ``offset``); None without one
    claimed_ms: int | None = None  # when an owner fenced a node that holds no offset yet (its ``-1``)

    @property
    def lag(self) -> int | None:
        """``log end - offset``, as ConsumerOffsetChecker computes it; None when either is unknown."""
        if self.offset is None or self.log_end is None:
            return None
        return self.log_end - self.offset

    @property
    def consumer_id(self) -> str | None:
        """The owner thread id without its ``-<n>`` suffix (kafka-consumer-groups' CONSUMER-ID)."""
        return None if self.owner is None else consumer_id_of_owner(self.owner)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "log_start_offset": self.log_start, "log_end_offset": self.log_end, "lag": self.lag,
                "owner": self.owner, "consumer_id": self.consumer_id, "last_commit_ms": self.last_commit_ms,
                "first_commit_ms": self.first_commit_ms, "status": self.status, "offset_source": self.source,
                "claimed_ms": self.claimed_ms}

    @property
    def not_committed_yet(self) -> bool:
        """Owned, but its owner has committed nothing yet (the node holds the fence's ``-1``, or nothing):
        the owner reads from ``auto.offset.reset`` and the first commit that moves the offset writes it."""
        return self.offset is None and self.owner is not None


@dataclass(frozen=True)
class GroupDescription:
    group: str
    members: list[Member]
    partitions: list[PartitionLag]
    offsets_storage: str = "zookeeper"
    kafka_note: str | None = None  # why the offsets in __consumer_offsets were not read, if they were not
    protocol: CoordinatorGroup | None = None  # what the group's coordinator knows (members joined by protocol)
    migration: MigrationView | None = None  # a live migration's marker and member modes (metaq.admin.migration)

    @property
    def active(self) -> bool:
        return bool(self.members) or bool(self.protocol and self.protocol.members)

    @property
    def total_lag(self) -> int:
        """The sum of the lags known; :attr:`unknown_lag` says how many rows it leaves out."""
        return sum(p.lag for p in self.partitions if p.lag is not None and p.lag > 0)

    @property
    def unknown_lag(self) -> int:
        """Rows without a lag (no committed offset, or no log end): the total is a lower bound when > 0."""
        return sum(1 for p in self.partitions if p.lag is None)

    def problems(self) -> list[PartitionLag]:
        return [p for p in self.partitions if p.status != OK]

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "active": self.active, "offsets_storage": self.offsets_storage,
                "kafka_offsets_note": self.kafka_note, "total_lag": self.total_lag,
                "partitions_without_lag": self.unknown_lag,
                "members": [m.to_json() for m in self.members],
                "protocol": None if self.protocol is None else self.protocol.to_json(),
                "migration": None if self.migration is None else self.migration.to_json(),
                "partitions": [p.to_json() for p in self.partitions]}


# -- pure helpers -------------------------------------------------------------------------------------


def consumer_id_of_owner(owner: str) -> str:
    """``etl_host-1700000000000-6b2a1f0c-0`` -> ``etl_host-1700000000000-6b2a1f0c``. Data without a numeric
    ``-<n>`` suffix (MetaQ and pykafka write the bare consumer id) is returned as it is."""
    consumer_id, dash, number = owner.rpartition("-")
    if dash and consumer_id and number.isascii() and number.isdigit():
        return consumer_id
    return owner


def owner_is_live(owner: str, live_ids: Iterable[str]) -> bool:
    """Whether ``owner`` names a registered consumer, in Kafka's ``<id>-<n>`` form or as the bare id."""
    live = set(live_ids)
    return owner in live or consumer_id_of_owner(owner) in live


def host_of(group: str, consumer_id: str) -> str | None:
    """The host in a generated consumer id ``<group>_<host>-<ms>-<hex>``; None for a configured
    ``consumer.id`` or another client's format."""
    prefix = f"{group}_"
    if not consumer_id.startswith(prefix):
        return None
    match = _GENERATED_ID.fullmatch(consumer_id[len(prefix):])
    return match["host"] if match else None


def member_of(group: str, consumer_id: str, registration: TopicCount, ephemeral: bool = True) -> Member:
    registered = registration.timestamp_ms if registration.timestamp_ms > 0 else None
    return Member(consumer_id, host_of(group, consumer_id), dict(registration.subscription),
                  registration.pattern, registered, ephemeral)


def subscribed_topics(registrations: Mapping[str, TopicCount], all_topics: Iterable[str]) -> set[str]:
    """Existing topics some live member consumes (wildcards expanded against ``all_topics``)."""
    existing = list(all_topics)
    topics: set[str] = set()
    for registration in registrations.values():
        topics.update(t for t in registration.streams_per_topic(existing) if t in existing)
    return topics


def partition_status(row: PartitionLag, *, live_ids: set[str], expected: bool, topic_exists: bool,
                     watermarks: Watermarks | None, now_ms: int, stall_after_ms: int) -> str:
    """The first flag that applies, most serious first; see the constants above."""
    if row.owner is not None and not owner_is_live(row.owner, live_ids):
        return ORPHAN
    if row.owner is None and expected and live_ids:
        return NO_OWNER
    if not topic_exists:
        return UNKNOWN_TOPIC
    if watermarks is None or watermarks.start is None or watermarks.end is None:
        return NO_LEADER
    if row.offset is not None and not watermarks.start <= row.offset <= watermarks.end:
        return OUT_OF_RANGE
    lag = row.lag
    if row.last_commit_ms is None and row.source == KAFKA:
        return OK  # Kafka gives no commit time: no evidence of a stall
    if lag and lag > 0 and (row.last_commit_ms is None or now_ms - row.last_commit_ms > stall_after_ms):
        return STALLED
    return OK


def build_description(
    group: str,
    registrations: Mapping[str, TopicCount],
    partitions_by_topic: Mapping[str, list[int]],
    offsets: Mapping[TopicPartition, OffsetNode],
    owners: Mapping[TopicPartition, str],
    watermarks: Mapping[TopicPartition, Watermarks],
    *,
    now_ms: int,
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS,
    topics: Iterable[str] | None = None,
    kafka_offsets: Mapping[TopicPartition, int] | None = None,
    kafka_note: str | None = None,
    persistent_members: Iterable[str] = (),
    protocol: CoordinatorGroup | None = None,
) -> GroupDescription:
    """Rows for every partition the group has an offset (in ZooKeeper or ``kafka_offsets``) or owner for,
    or that a member subscribes to; a ``protocol`` member owns the partitions assigned to it.

    ``partitions_by_topic`` holds the *existing* topics (with their partitions); ``topics`` limits the rows;
    ``persistent_members`` are the members registered by persistent nodes (flagged, see :class:`Member`).
    """
    kafka = dict(kafka_offsets or {})
    live = set(registrations)
    expected_topics = subscribed_topics(registrations, partitions_by_topic)
    if protocol is not None:
        assigned = {tp: m.member_id for m in protocol.members for tp in m.assignment}
        owners = {**assigned, **owners}
        live |= {m.member_id for m in protocol.members}
        expected_topics |= protocol.topics
    rows = []
    for topic, partition in row_keys(registrations, partitions_by_topic, [*offsets, *kafka], owners, topics):
        node = offsets.get((topic, partition))
        marks = watermarks.get((topic, partition))
        offset, source = merged_offset(None if node is None else node.offset, kafka.get((topic, partition)))
        committed = node if node is not None and node.offset is not None else None  # -1: a claim's times
        row = PartitionLag(
            topic, partition, offset,
            None if marks is None else marks.start, None if marks is None else marks.end,
            owners.get((topic, partition)), None if committed is None else committed.mtime_ms,
            None if committed is None else committed.ctime_ms, OK, source,
            claimed_ms=node.mtime_ms if node is not None and committed is None else None)
        status = partition_status(row, live_ids=live, expected=topic in expected_topics,
                                  topic_exists=topic in partitions_by_topic, watermarks=marks, now_ms=now_ms,
                                  stall_after_ms=stall_after_ms)
        rows.append(replace(row, status=status))
    persistent = set(persistent_members)
    members = [member_of(group, cid, reg, cid not in persistent) for cid, reg in sorted(registrations.items())]
    sources = {r.source for r in rows if r.source is not None}
    storage = KAFKA if sources == {KAFKA} else "zookeeper+kafka" if sources - {ZOOKEEPER} else ZOOKEEPER
    return GroupDescription(group, members, rows, storage, kafka_note, protocol)


def merged_offset(zookeeper: int | None, kafka: int | None) -> tuple[int | None, str | None]:
    """``max(zookeeper, kafka)`` (a fence's -1 counts as none) and where it came from: zookeeper, kafka,
    both (equal), or None when neither has one."""
    zk = zookeeper if zookeeper is not None and zookeeper >= 0 else None
    if zk is None and kafka is None:
        return None, None
    if kafka is None or (zk is not None and zk > kafka):
        return zk, ZOOKEEPER
    if zk is None or kafka > zk:
        return kafka, KAFKA
    return zk, BOTH


def row_keys(registrations: Mapping[str, TopicCount], partitions_by_topic: Mapping[str, list[int]],
             offsets: Iterable[TopicPartition], owners: Iterable[TopicPartition],
             topics: Iterable[str] | None = None) -> list[TopicPartition]:
    """The partitions ``groups describe`` shows: those with an offset or an owner, and every partition of
    a topic a member subscribes to (or of the ``topics`` asked for)."""
    keys = set(offsets) | set(owners)
    keys |= {(t, p) for t in subscribed_topics(registrations, partitions_by_topic) for p in partitions_by_topic[t]}
    if topics is not None:
        wanted = set(topics)
        keys = {k for k in keys if k[0] in wanted} | {(t, p) for t in wanted for p in partitions_by_topic.get(t, [])}
    return sorted(keys)


# -- gathering ------------------------------------------------------------------------------------------


def require_group(layout: ZkLayout, group: str) -> None:
    if not layout.group_exists(group):
        raise GroupNotFoundError(f"group {group!r} does not exist (no {layout.full_path(consumer_group_path(group))})")


def topic_partitions(layout: ZkLayout, topics: Iterable[str] | None = None) -> dict[str, list[int]]:
    """topic -> partitions of the existing topics (all of them, or those in ``topics`` that exist)."""
    result = {}
    for topic in layout.topics() if topics is None else sorted(set(topics)):
        assignment = layout.topic_assignment(topic)
        if assignment is not None:
            result[topic] = assignment.partition_ids
    return result


def check_topics_known(topics: Iterable[str], partitions_by_topic: Mapping[str, list[int]],
                       group_keys: Iterable[TopicPartition]) -> None:
    """UnknownTopicError for a topic that neither exists nor has offsets or owners in the group."""
    known = set(partitions_by_topic) | {t for t, _ in group_keys}
    missing = sorted(set(topics) - known)
    if missing:
        raise UnknownTopicError(f"topic {missing[0]!r} does not exist")


def describe_group(
    layout: ZkLayout,
    log_offsets: LogOffsets,
    group: str,
    *,
    topics: Iterable[str] | None = None,
    stall_after_ms: int = DEFAULT_STALL_AFTER_MS,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    kafka: GroupOffsetsStore | None = None,
    coordinators: CoordinatorGroups | None = None,
) -> GroupDescription:
    """Read the group from ZooKeeper (and with ``kafka`` its offsets in ``__consumer_offsets``, with
    ``coordinators`` what its coordinator knows) and the log offsets from the leaders; GroupNotFoundError if
    none of them knows the group.

    An unreachable coordinator does not fail the description: what it holds is left out, with a note."""
    kafka_offsets, kafka_note = read_kafka_offsets(kafka, group)
    listing = coordinators.list() if coordinators is not None else CoordinatorListing()
    protocol = listing.groups.get(group)
    if protocol is None and listing.notes:
        kafka_note = "; ".join(filter(None, [kafka_note, *listing.notes]))
    if not kafka_offsets and protocol is None:
        require_group(layout, group)
    exists = layout.group_exists(group)
    nodes = layout.consumer_nodes(group) if exists else {}
    registrations = {cid: node.registration for cid, node in nodes.items()}
    offsets = layout.offset_nodes(group) if exists else {}
    owners = layout.owners(group) if exists else {}
    partitions_by_topic = topic_partitions(layout)
    if topics is not None:
        check_topics_known(topics, partitions_by_topic, [*offsets, *owners, *kafka_offsets])
    assigned = {tp: "" for m in (protocol.members if protocol else ()) for tp in m.assignment}
    keys = row_keys(registrations, partitions_by_topic, [*offsets, *kafka_offsets], [*owners, *assigned], topics)
    marks = log_offsets.watermarks(k for k in keys if k[0] in partitions_by_topic)
    description = build_description(group, registrations, partitions_by_topic, offsets, owners, marks,
                                    now_ms=now_ms(), stall_after_ms=stall_after_ms, topics=topics,
                                    kafka_offsets=kafka_offsets, kafka_note=kafka_note, protocol=protocol,
                                    persistent_members=[cid for cid, node in nodes.items() if not node.ephemeral])
    return replace(description, migration=migration_view(layout, group)) if exists else description


def read_kafka_offsets(kafka: GroupOffsetsStore | None, group: str) -> tuple[dict[TopicPartition, int], str | None]:
    """The group's offsets in ``__consumer_offsets`` and None, or ({}, why they could not be read). No
    ``__consumer_offsets`` topic is not worth a note: nothing was ever stored in Kafka, so nothing is missing."""
    if kafka is None or not kafka.available():
        return {}, None
    try:
        return kafka.fetch(group), None
    except MetaqError as e:  # KafkaOffsetsUnavailable, or the coordinator refused
        return {}, f"offsets stored in Kafka were not read: {e}"
