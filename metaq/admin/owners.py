"""Owner nodes of a group, with orphans flagged, and their repair.

    report = owners_report(layout, "etl")
    report.orphans                           # [OwnerRow("clicks", 2, owner="etl_dead-...-0", status="ORPHAN")]
    delete_orphans(layout, report)           # [("clicks", 2)]: only nodes that still name the dead consumer

An owner is an *orphan* when its consumer id is no longer registered under ``ids``. Ephemeral owners
vanish with their session, so a lasting orphan is a persistent node or one left by hand, and it blocks
every rebalance that needs the partition (Metamorphosis #102). A partition with *no owner* while members
subscribe to its topic is flagged too, as Kafka's VerifyConsumerRebalance does; it is normal for a moment
during a rebalance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from metaq.admin.groups import (
    NO_OWNER,
    OK,
    ORPHAN,
    consumer_id_of_owner,
    owner_is_live,
    require_group,
    subscribed_topics,
    topic_partitions,
)
from metaq.admin.log_offsets import TopicPartition
from metaq.json_types import JsonObject
from zk_layout import OwnerNode, TopicCount, ZkLayout


@dataclass(frozen=True)
class OwnerRow:
    """One partition of ``metaq owners``; ``owner`` is None for a NO_OWNER row."""

    topic: str
    partition: int
    owner: str | None
    ephemeral: bool | None
    claimed_ms: int | None
    status: str

    @property
    def consumer_id(self) -> str | None:
        return None if self.owner is None else consumer_id_of_owner(self.owner)

    def to_json(self) -> JsonObject:
        return {"topic": self.topic, "partition": self.partition, "owner": self.owner,
                "consumer_id": self.consumer_id, "ephemeral": self.ephemeral, "claimed_ms": self.claimed_ms,
                "status": self.status}


@dataclass(frozen=True)
class OwnersReport:
    """``persistent_members``: members registered by a persistent node, no live consumer (see
    :class:`~metaq.admin.groups.Member`)."""

    group: str
    members: list[str]
    rows: list[OwnerRow]
    persistent_members: list[str] = field(default_factory=list)

    @property
    def orphans(self) -> list[OwnerRow]:
        return [r for r in self.rows if r.status == ORPHAN]

    @property
    def unowned(self) -> list[OwnerRow]:
        return [r for r in self.rows if r.status == NO_OWNER]

    def to_json(self) -> JsonObject:
        return {"group": self.group, "members": self.members, "persistent_members": self.persistent_members,
                "orphans": len(self.orphans),
                "unowned": len(self.unowned), "owners": [r.to_json() for r in self.rows]}


def check_owners(group: str, registrations: Mapping[str, TopicCount], owners: Mapping[TopicPartition, OwnerNode],
                 partitions_by_topic: Mapping[str, list[int]]) -> OwnersReport:
    """The pure check: every owner node, plus a NO_OWNER row for each unowned partition members expect."""
    live = set(registrations)
    rows = [OwnerRow(t, p, node.thread_id, node.ephemeral, node.ctime_ms,
                     OK if owner_is_live(node.thread_id, live) else ORPHAN)
            for (t, p), node in owners.items()]
    if live:
        for topic in subscribed_topics(registrations, partitions_by_topic):
            rows += [OwnerRow(topic, p, None, None, None, NO_OWNER)
                     for p in partitions_by_topic[topic] if (topic, p) not in owners]
    rows.sort(key=lambda r: (r.topic, r.partition))
    return OwnersReport(group, sorted(live), rows)


def owners_report(layout: ZkLayout, group: str) -> OwnersReport:
    """Read the group's members and owner nodes; GroupNotFoundError if the group is absent."""
    require_group(layout, group)
    nodes = layout.consumer_nodes(group)
    owners = layout.owner_nodes(group)
    report = check_owners(group, {cid: node.registration for cid, node in nodes.items()}, owners,
                          topic_partitions(layout))
    return replace(report, persistent_members=sorted(cid for cid, node in nodes.items() if not node.ephemeral))


def delete_orphans(layout: ZkLayout, report: OwnersReport) -> list[TopicPartition]:
    """Delete the orphan owner nodes of ``report``. A node is deleted only if it still names the same owner
    and that consumer is still not registered, so a partition claimed meanwhile is left alone."""
    live = set(layout.consumer_ids(report.group))
    deleted = []
    for row in report.orphans:
        assert row.owner is not None
        if owner_is_live(row.owner, live):
            continue
        if layout.release_partition(report.group, row.topic, row.partition, row.owner):
            deleted.append((row.topic, row.partition))
    return deleted
