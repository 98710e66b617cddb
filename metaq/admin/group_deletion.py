"""``groups delete`` and ``offsets delete``: a group, or some of its committed offsets, deleted wherever the group
is known (``/consumers/<g>`` and the brokers' group coordinators), as ``kafka-consumer-groups --delete`` and
``--delete-offsets`` do; refused while the group has live members.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from metaq.admin.broker_groups import CoordinatorGroups, CoordinatorListing
from metaq.admin.log_offsets import TopicPartition
from metaq.client.group_offsets import error_name
from metaq.errors import ErrorCode, GroupActiveError, GroupNotFoundError, for_code
from zk_layout import ZkLayout
from zk_layout.paths import consumer_group_path


@dataclass(frozen=True)
class GroupDeletion:
    """What ``groups delete`` removed: ``/consumers/<g>`` and/or the group at its coordinator (a broker id)."""

    group: str
    zookeeper: bool
    coordinator: int | None

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "zookeeper": self.zookeeper, "coordinator": self.coordinator}


def delete_group(layout: ZkLayout, group: str, coordinators: CoordinatorGroups | None = None) -> GroupDeletion:
    """Delete a group wherever it is known, as ``kafka-consumer-groups --delete`` does (its ZooKeeper mode for
    ``/consumers/<g>``, DeleteGroups for a coordinator's group, whose offsets get tombstones); refused with
    GroupActiveError while it has members, in Kafka's words. The coordinator is asked first: it may refuse."""
    known = (coordinators.list() if coordinators is not None else CoordinatorListing()).groups.get(group)
    in_zookeeper = layout.group_exists(group)
    if not in_zookeeper and known is None:
        raise GroupNotFoundError(f"group {group!r} does not exist (neither under "
                                 f"{layout.full_path(consumer_group_path(group))} nor at a broker's coordinator)")
    live = layout.consumer_ids(group) if in_zookeeper else []
    if live or (known is not None and known.members):
        members = live + [m.member_id for m in (known.members if known is not None else ())]
        raise GroupActiveError(f"Delete for group {group} failed because its consumers are still active: "
                               f"{', '.join(members)}")
    deleted_at = None
    if known is not None and coordinators is not None:
        code = coordinators.delete(group, known.coordinator)
        if code == ErrorCode.NON_EMPTY_GROUP:
            raise GroupActiveError(f"Delete for group {group} failed because its consumers are still active "
                                   f"(broker {known.coordinator}: NON_EMPTY_GROUP)")
        if code not in (0, ErrorCode.GROUP_ID_NOT_FOUND):
            raise for_code(code)(f"DeleteGroups of {group!r} at broker {known.coordinator}: error {code}")
        deleted_at = known.coordinator if code == 0 else None
    removed = layout.delete_group(group) if in_zookeeper else False
    return GroupDeletion(group, removed, deleted_at)


SUCCESSFUL = "Successful"  # kafka-consumer-groups --delete-offsets' STATUS of a deleted offset


@dataclass(frozen=True)
class OffsetDeleteResult:
    """One row of ``offsets delete``: ``error`` is None when the offset was deleted (or there was none),
    else why not (Kafka's error name, e.g. GROUP_SUBSCRIBED_TO_TOPIC while a live member reads the topic)."""

    topic: str
    partition: int
    error: str | None = None

    @property
    def status(self) -> str:
        return SUCCESSFUL if self.error is None else f"Error: {self.error}"

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "error": self.error}


def delete_offsets(layout: ZkLayout, group: str, partitions: Iterable[TopicPartition],
                   coordinators: CoordinatorGroups | None = None, *, force: bool = False) -> list[OffsetDeleteResult]:
    """Delete a group's committed offsets of ``partitions`` wherever the group is known, as
    ``kafka-consumer-groups --delete-offsets`` does: its offset nodes in ZooKeeper (refused with GroupActiveError
    while the group has registered members, unless ``force``, as ``offsets reset``), and OffsetDelete at a
    coordinator's group (which refuses, per partition, the topics a live member is subscribed to)."""
    keys = sorted(set(partitions))
    known = (coordinators.list() if coordinators is not None else CoordinatorListing()).groups.get(group)
    in_zookeeper = layout.group_exists(group)
    if not in_zookeeper and known is None:
        raise GroupNotFoundError(f"group {group!r} does not exist (neither under "
                                 f"{layout.full_path(consumer_group_path(group))} nor at a broker's coordinator)")
    errors: dict[TopicPartition, str] = {}
    if known is not None and coordinators is not None:
        code, codes = coordinators.delete_offsets(group, known.coordinator, keys)
        if code:
            raise for_code(code)(f"OffsetDelete of group {group!r} at broker {known.coordinator}: "
                                 f"{error_name(code)}")
        errors = {tp: error_name(c) for tp, c in codes.items() if c}
    if in_zookeeper:
        live = layout.consumer_ids(group)
        if live and not force:
            raise GroupActiveError(f"group {group!r} has {len(live)} live member(s) ({', '.join(live[:3])}); "
                                   "stop them first, or use --force to delete its offsets anyway")
        for topic, partition in keys:
            layout.delete_offset(group, topic, partition)
    return [OffsetDeleteResult(t, p, errors.get((t, p))) for t, p in keys]
