"""The group coordinator's administrative operations (:class:`~metaq.broker.coordinator.coordinator.GroupCoordinator`):
ListGroups and DescribeGroups across the offsets partitions this broker leads, DeleteGroups and OffsetDelete.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Collection
from typing import Any, NamedTuple

from metaq.broker.coordinator import group_state as g
from metaq.broker.coordinator.config import CoordinatorConfig
from metaq.broker.coordinator.group_state import Group, GroupSummary
from metaq.broker.coordinator.offsets_partition import (
    LOADED,
    OffsetsPartition,
)
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, partition_for
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupListing(NamedTuple):
    """One group of a ListGroups answer."""

    group_id: str
    protocol_type: str
    state: str


class GroupAdminOps:
    """ListGroups, DescribeGroups, DeleteGroups and OffsetDelete, for :class:`GroupCoordinator`."""

    _snapshot: Callable[[], ClusterSnapshot]
    _groups: dict[str, Group]
    _partitions: dict[int, OffsetsPartition]
    _config: CoordinatorConfig
    _in_thread: Callable[..., Awaitable[Any]]

    @abstractmethod
    def _resign(self, snapshot: ClusterSnapshot) -> None: ...

    @abstractmethod
    def offsets_partitions(self, snapshot: ClusterSnapshot) -> int: ...

    @abstractmethod
    async def _loaded(self, indexes: Collection[int]) -> None: ...

    @abstractmethod
    def _group(self, group_id: str, *, create: bool) -> Group | None: ...

    @abstractmethod
    async def _ready(self, group_id: str) -> int: ...

    @abstractmethod
    def _partition_of(self, group_id: str) -> OffsetsPartition: ...

    async def list_groups(self, states: Collection[str] = ()) -> tuple[int, list[GroupListing]]:
        """(error, listings) of every group this broker coordinates: those with members
        or a known protocol, and those with offsets only (Empty, protocol type "" unless known), as Kafka lists
        its group cache. ``states`` filters (case-insensitively). Waits for the partitions to load."""
        snapshot = self._snapshot()
        self._resign(snapshot)
        led = [i for i, meta in (snapshot.topics.get(OFFSETS_TOPIC) or {}).items()
               if meta.leader == self._config.broker_id]
        await self._loaded(led)
        error = ErrorCode.NONE
        listed: dict[str, tuple[str, str]] = {}
        for index in led:
            part = self._partitions.get(index)
            if part is None or part.state != LOADED:
                self._partitions.pop(index, None)  # a failed load: the next request tries again
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
                continue
            for group_id in part.groups():
                listed[group_id] = ("", g.EMPTY)
            for group_id in list(part.memberships):
                self._group(group_id, create=False)  # a stored membership is restored as requests would
        mine = set(led)
        total = self.offsets_partitions(snapshot)
        for group_id, group in self._groups.items():
            if partition_for(group_id, total) in mine and not group.is_(g.DEAD):
                listed[group_id] = (group.protocol_type or "", group.state)
        wanted = {s.lower() for s in states}
        return error, sorted(GroupListing(gid, ptype, state) for gid, (ptype, state) in listed.items()
                             if not wanted or state.lower() in wanted)

    async def describe_group(self, group_id: str) -> tuple[int, GroupSummary]:
        """(error, summary); a group the coordinator does not know is Dead (DescribeGroups < v6 says so with
        no error). A group with offsets only is Empty."""
        error = await self._ready(group_id)
        if error:
            return error, GroupSummary(group_id, g.DEAD, "", "", [])
        group = self._group(group_id, create=False)
        if group is not None and not group.is_(g.DEAD):
            return ErrorCode.NONE, group.describe()
        if self._partition_of(group_id).fetch(group_id, None):
            return ErrorCode.NONE, GroupSummary(group_id, g.EMPTY, "", "", [])
        return ErrorCode.NONE, GroupSummary(group_id, g.DEAD, "", "", [])

    async def delete_group(self, group_id: str) -> int:
        """Kafka's DeleteGroups for one group: only an Empty (or Dead) group; its offsets are tombstoned in
        ``__consumer_offsets`` (so the deletion survives a restart), then the group is forgotten."""
        error = await self._ready(group_id)
        if error:
            return error
        group = self._groups.get(group_id)
        if group is not None and not group.is_(g.EMPTY, g.DEAD):
            return ErrorCode.NON_EMPTY_GROUP
        part = self._partition_of(group_id)
        if group is None and not part.fetch(group_id, None):
            return ErrorCode.GROUP_ID_NOT_FOUND
        error = await self._delete_offsets(group_id, part, None)
        if error:
            return error
        if part.membership(group_id) is not None:
            try:
                part.store_membership(group_id, None)
            except Exception as e:
                log.error("group %s: writing its tombstone to %s-%d failed: %s", group_id, OFFSETS_TOPIC,
                          part.partition, e)
                return ErrorCode.KAFKA_STORAGE_ERROR
        group = self._groups.pop(group_id, None)
        if group is not None:
            if group.join_timer is not None:
                group.join_timer.cancel()
            if not group.is_(g.DEAD):
                group.transition(g.DEAD)
        log.info("group %s deleted", group_id)
        return ErrorCode.NONE

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Kafka's OffsetDelete: (group error, error per partition). Offsets of topics a live member of a
        ``consumer`` group subscribes to stay (GROUP_SUBSCRIBED_TO_TOPIC); a non-empty group of another
        protocol type is refused whole (NON_EMPTY_GROUP)."""
        error = await self._ready(group_id)
        if error:
            return error, {}
        group = self._groups.get(group_id)
        part = self._partition_of(group_id)
        if (group is None or group.is_(g.DEAD)) and not part.fetch(group_id, None):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        errors: dict[tuple[str, int], int] = {}
        if group is not None and not group.is_(g.EMPTY, g.DEAD):
            if group.protocol_type != g.CONSUMER_PROTOCOL_TYPE:
                return ErrorCode.NON_EMPTY_GROUP, {}
            subscribed = group.subscribed_topics()
            errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions
                      if subscribed is None or tp[0] in subscribed}
        eligible = [tp for tp in partitions if tp not in errors]
        error = await self._delete_offsets(group_id, part, eligible)
        errors.update({tp: error for tp in eligible})
        return ErrorCode.NONE, errors

    async def _delete_offsets(self, group_id: str, part: OffsetsPartition,
                              partitions: list[tuple[str, int]] | None) -> int:
        try:
            removed = part.delete_offsets(group_id, partitions)
            if self._config.flush_each_commit:
                await self._in_thread(part.log.flush)
        except Exception as e:
            log.error("group %s: writing tombstones to %s-%d failed: %s", group_id, OFFSETS_TOPIC, part.partition, e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if removed:
            log.info("group %s: deleted the offsets of %d partitions", group_id, len(removed))
        return ErrorCode.NONE
