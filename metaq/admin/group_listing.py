"""``groups list``: every consumer group, under ``/consumers`` and at the brokers' group coordinators, one
:class:`GroupSummary` each, its ``kind`` saying where it is known and its ``state`` in Kafka's names.

    list_groups(layout)                            # [GroupSummary("etl", members=2, topics=["clicks"])]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from metaq.admin.broker_groups import CoordinatorGroup, CoordinatorGroups, CoordinatorListing
from metaq.admin.groups import BOTH, read_kafka_offsets
from metaq.client.group_offsets import GroupOffsetsStore
from metaq.errors import ConfigError, MalformedNodeError
from zk_layout import ZkLayout

# Where a group is known (``groups list`` KIND): /consumers, a broker's group coordinator, or both.
ZOOKEEPER_KIND = "zookeeper"
PROTOCOL_KIND = "protocol"

# Kafka's group states (ConsumerGroupState) that a ZooKeeper group can be in.
STABLE = "Stable"
EMPTY = "Empty"


@dataclass(frozen=True)
class GroupSummary:
    """One line of ``groups list``. ``error`` says why the group could not be read whole (a malformed node,
    named), so that one bad group does not hide the others."""

    group: str
    members: int
    topics: list[str] = field(default_factory=list)
    kind: str = ZOOKEEPER_KIND
    state: str | None = None  # Kafka's group state: the coordinator's, or Stable/Empty from ZooKeeper's ids
    error: str | None = None  # why the group could not be read (a malformed node, named)

    @property
    def active(self) -> bool:
        return self.members > 0

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "kind": self.kind, "members": self.members, "active": self.active,
                "state": self.state, "topics": self.topics, "error": self.error}


@dataclass(frozen=True)
class GroupListing:
    groups: list[GroupSummary]
    notes: list[str] = field(default_factory=list)  # brokers whose groups could not be read, and why


def list_groups(layout: ZkLayout, coordinators: CoordinatorGroups | None = None,
                kafka: GroupOffsetsStore | None = None) -> list[GroupSummary]:
    """Every group under ``/consumers``, with or without live members (and those the coordinators know)."""
    return group_listing(layout, coordinators, kafka).groups


def group_listing(layout: ZkLayout, coordinators: CoordinatorGroups | None = None,
                  kafka: GroupOffsetsStore | None = None) -> GroupListing:
    """:func:`list_groups` with the notes about brokers that could not be asked. With ``kafka``, a coordinator's
    group without assigned partitions (Empty, or offsets only) shows the topics it has offsets for, as
    ``kafka-consumer-groups --describe`` does."""
    listing = coordinators.list() if coordinators is not None else CoordinatorListing()
    summaries = {s.group: s for s in _zookeeper_groups(layout)}
    for name, known in listing.groups.items():
        offset_topics: set[str] = set()
        if not known.topics:
            offsets, note = read_kafka_offsets(kafka, name)
            offset_topics = {t for t, _ in offsets}
            if note:
                listing.notes.append(f"group {name}: {note}")
        summaries[name] = merge_summary(summaries.get(name), known, offset_topics)
    return GroupListing([summaries[g] for g in sorted(summaries)], listing.notes)


def merge_summary(zookeeper: GroupSummary | None, known: CoordinatorGroup,
                  offset_topics: Iterable[str] = ()) -> GroupSummary:
    """One row for a group the coordinator knows (and perhaps ZooKeeper too). A coordinator that holds only
    offsets (no protocol type, no members: a simple or ZooKeeper-coordinated consumer committing to Kafka)
    does not decide the state of a ZooKeeper group."""
    topics = known.topics | set(offset_topics)
    if zookeeper is None:
        return GroupSummary(known.group, len(known.members), sorted(topics), PROTOCOL_KIND, known.state)
    offsets_only = not known.protocol_type and not known.members
    return GroupSummary(known.group, zookeeper.members + len(known.members),
                        sorted(set(zookeeper.topics) | topics), BOTH,
                        zookeeper.state if offsets_only else known.state)


def _zookeeper_groups(layout: ZkLayout) -> list[GroupSummary]:
    """Every group under ``/consumers``. A group with a malformed node is listed with its ``error`` (naming
    the node) rather than failing the whole listing."""
    summaries = []
    for group in layout.groups():
        try:
            members = layout.consumer_ids(group)
        except ConfigError:  # a name that is not a valid group id (another tool's node): list it, bare
            summaries.append(GroupSummary(group, 0, [], state=EMPTY))
            continue
        try:
            topics = {t for t, _ in layout.offset_nodes(group)} | {t for t, _ in layout.owners(group)}
        except MalformedNodeError as e:
            summaries.append(GroupSummary(group, len(members), [], state=zookeeper_state(len(members)),
                                          error=str(e)))
            continue
        summaries.append(GroupSummary(group, len(members), sorted(topics), state=zookeeper_state(len(members))))
    return summaries


def zookeeper_state(members: int) -> str:
    """A ZooKeeper group's state in Kafka's names (``ConsumerGroupState``), so that ``groups list`` reads the
    same for both kinds of group: Stable with registered members, Empty without. ZooKeeper keeps no
    rebalance state a reader could see (members rebalance each on its own), so no other state applies."""
    return STABLE if members else EMPTY
