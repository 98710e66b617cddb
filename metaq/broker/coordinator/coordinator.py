"""GroupCoordinator: groups and offsets of every group whose ``partitionFor(group)`` this broker leads.

Everything runs on the broker's event loop (no locks); replaying a partition's log runs on a worker
thread while requests for its groups get COORDINATOR_LOAD_IN_PROGRESS. Rebalances complete as soon as
every known member has rejoined and no member handed an id with MEMBER_ID_REQUIRED is still to come back
with it (no fixed delay unless ``group.initial.rebalance.delay.ms`` asks for one for empty groups); members
that do not rejoin within the rebalance timeout, or stop heartbeating for their session timeout, are
removed, and so are pending members that do not come back within their session timeout.

The coordinator moves with the leadership of ``__consumer_offsets`` partitions (replicated like any topic,
docs/architecture.md "Replication"): a partition is replayed from the local log when this broker first
serves it as leader, and forgotten, with its groups, as soon as the snapshot names another leader or a new
leader epoch (the groups' requests then get NOT_COORDINATOR and their clients look the coordinator up
again; leading it again later replays the log, which now holds what the other leader wrote). The leader stamps
its appends with its leader epoch and, with ``offsets.commit.required.acks`` -1 (the default, as in Kafka),
answers a commit only once every ISR member has it, so a commit survives the leader's death.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from metaq.broker.coordinator import group_state as g
from metaq.broker.coordinator.config import CoordinatorConfig
from metaq.broker.coordinator.group_admin_ops import GroupAdminOps
from metaq.broker.coordinator.group_state import Group, Member
from metaq.broker.coordinator.locate import CoordinatorAddress, locate_coordinator
from metaq.broker.coordinator.membership import GroupMembership, loop_now
from metaq.broker.coordinator.offset_commits import OffsetCommits
from metaq.broker.coordinator.offsets_partition import (
    LOADED,
    LOADING,
    OffsetsPartition,
    TopicPartition,
)
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, GroupValue, StoredMember, partition_for
from metaq.broker.coordinator.replicated_append import Replication
from metaq.broker.log.log_manager import LogManager
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupCoordinator(GroupMembership, OffsetCommits, GroupAdminOps):
    """The group coordinator of one broker (module docstring): owns the :class:`OffsetsPartition` of every
    ``__consumer_offsets`` partition this broker leads, with the leader epoch each was loaded in, the
    :class:`Group` of every group mapped to them, the replay tasks of partitions still loading, and the
    session and housekeeping tasks that expire members and offsets. Everything it owns is touched on the event
    loop only; the logs (appends) belong to the :class:`LogManager` it is given."""

    def __init__(
        self,
        config: CoordinatorConfig,
        logs: LogManager,
        snapshot: Callable[[], ClusterSnapshot],
        create_offsets_topic: Callable[[int], Awaitable[None]],
        *,
        replication: Replication | None = None,
        notify: Callable[[tuple[str, int]], None] = lambda _key: None,
        in_thread: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    ) -> None:
        """``replication``: with it, appends are stamped and replicated; ``notify`` wakes followers' long polls
        when the offsets log grows; ``in_thread`` runs blocking log work (replays, flushes) off the loop."""
        self._config = config
        self._logs = logs
        self._snapshot = snapshot
        self._create_offsets_topic = create_offsets_topic
        self._in_thread = in_thread
        self._partitions: dict[int, OffsetsPartition] = {}
        self._epochs: dict[int, int] = {}  # offsets partition -> the leader epoch its cache was loaded in
        self._groups: dict[str, Group] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}  # partitions being replayed
        self._tasks: list[asyncio.Task[None]] = []
        self.replication = replication
        self.notify = notify

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._session_loop(), name="coordinator-sessions"),
                       asyncio.create_task(self._housekeeping_loop(), name="coordinator-housekeeping")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for group in self._groups.values():
            self._fail_waiters(group, ErrorCode.NOT_COORDINATOR)

    # -- where a group lives -----------------------------------------------------------------------

    def offsets_partitions(self, snapshot: ClusterSnapshot) -> int:
        parts = snapshot.topics.get(OFFSETS_TOPIC)
        return len(parts) if parts else self._config.offsets_topic_num_partitions

    def offsets_partition_of(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of ``group_id`` in the current cluster snapshot."""
        return partition_for(group_id, self.offsets_partitions(self._snapshot()))

    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of ``group_id`` whose offsets an open transaction has written but not ended (Kafka's
        ``GroupMetadata.hasPendingOffsetCommits``): OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT
        for them."""
        part = self._partitions.get(self.offsets_partition_of(group_id))
        if part is None:
            return set()
        return {tp for groups in part.pending.values() for tp in groups.get(group_id, {})}

    async def find_coordinator(self, key: str, listener: str) -> CoordinatorAddress:
        """The broker coordinating group ``key``, on ``listener`` (the one the request came in on)."""
        return await locate_coordinator(self._snapshot, OFFSETS_TOPIC, key, self._create_offsets_topic,
                                        self._config.offsets_topic_num_partitions, listener)

    def check(self, group_id: str) -> int:
        """0 if this broker coordinates ``group_id`` and its offsets are loaded, else the error to answer."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        snapshot = self._snapshot()
        if OFFSETS_TOPIC not in snapshot.topics:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self._resign(snapshot)
        index = partition_for(group_id, self.offsets_partitions(snapshot))
        meta = snapshot.partition(OFFSETS_TOPIC, index)
        if meta is None or meta.leader != self._config.broker_id:
            return ErrorCode.NOT_COORDINATOR
        part = self._partition(index, meta.leader_epoch)
        if part.state == LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if part.state != LOADED:
            del self._partitions[index]  # a failed load: try again on the next request
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def _resign(self, snapshot: ClusterSnapshot) -> None:
        """Forget the offsets partitions this broker no longer leads, or led in an older leader epoch, and
        their groups (members waiting in a join or sync get NOT_COORDINATOR)."""
        parts = snapshot.topics.get(OFFSETS_TOPIC) or {}
        lost = [i for i in self._partitions if (meta := parts.get(i)) is None
                or meta.leader != self._config.broker_id or meta.leader_epoch != self._epochs.get(i)]
        if not lost:
            return
        total = self.offsets_partitions(snapshot)
        for index in lost:
            self._partitions.pop(index, None)
            self._epochs.pop(index, None)
            for group_id in [gid for gid in self._groups if partition_for(gid, total) == index]:
                self._fail_waiters(self._groups.pop(group_id), ErrorCode.NOT_COORDINATOR)
            log.info("no longer coordinating the groups of %s-%d: its leadership moved", OFFSETS_TOPIC, index)

    def _partition(self, index: int, leader_epoch: int | None = None) -> OffsetsPartition:
        """The cache of an offsets partition this broker leads; its replay starts on first use."""
        part = self._partitions.get(index)
        if part is None:
            if leader_epoch is None:
                meta = self._snapshot().partition(OFFSETS_TOPIC, index)
                leader_epoch = meta.leader_epoch if meta is not None else -1
            self._epochs[index] = leader_epoch
            part = self._partitions[index] = OffsetsPartition(self._logs.get_or_create(OFFSETS_TOPIC, index))
            part.leader_epoch = self._append_epoch(index)
            self._loads[index] = asyncio.get_running_loop().create_task(self._load(index, part))
        return part

    async def _load(self, index: int, part: OffsetsPartition) -> None:
        try:
            await self._in_thread(part.load)
        finally:
            self._loads.pop(index, None)

    async def _loaded(self, indexes: Collection[int]) -> None:
        """Wait for the replay of these partitions (started if needed); a request cancelled meanwhile does not
        cancel the replay."""
        for index in indexes:
            self._partition(index)
        waiting = [self._loads[i] for i in indexes if i in self._loads]
        if waiting:
            await asyncio.wait([asyncio.shield(t) for t in waiting])

    async def _ready(self, group_id: str) -> int:
        """As :meth:`check`, but waits for a partition that is loading instead of answering LOAD_IN_PROGRESS
        (the admin APIs: clients do not all retry it)."""
        error = self.check(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            await self._loaded([partition_for(group_id, self.offsets_partitions(self._snapshot()))])
            error = self.check(group_id)
        return error

    def _partition_of(self, group_id: str) -> OffsetsPartition:
        return self._partitions[partition_for(group_id, self.offsets_partitions(self._snapshot()))]

    def _group(self, group_id: str, *, create: bool) -> Group | None:
        group = self._groups.get(group_id) or self._restore(group_id)
        if group is None and create:
            group = self._groups[group_id] = Group(group_id)
        return group

    def _restore(self, group_id: str) -> Group | None:
        """The group's membership as the offsets partition last stored it (written by this or a former
        coordinator), or None."""
        part = self._partitions.get(partition_for(group_id, self.offsets_partitions(self._snapshot())))
        stored = part.membership(group_id) if part is not None and part.state == LOADED else None
        if stored is None or not stored.members:
            return None
        now = loop_now()
        members = [Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                          m.rebalance_timeout_ms, stored.protocol_type, [(stored.protocol or "", m.subscription)],
                          last_heartbeat=now, assignment=m.assignment) for m in stored.members]
        group = self._groups[group_id] = Group.restore(group_id, stored.generation, stored.protocol_type,
                                                       stored.protocol, stored.leader, members)
        log.info("group %s: generation %d with %d members restored from %s-%d", group_id, stored.generation,
                 len(members), OFFSETS_TOPIC, part.partition if part is not None else -1)
        return group

    def _store_membership(self, group: Group) -> None:
        """Write the group's membership (after a completed rebalance, or empty) to its offsets partition,
        best effort: a coordinator that takes the group over without it starts with an empty group."""
        if self.check(group.group_id):
            return  # no longer its coordinator (the log is another leader's to write)
        members = tuple(StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.rebalance_timeout_ms, m.session_timeout_ms,
                                     m.metadata_for(group.protocol_name or ""), m.assignment)
                        for m in group.members.values())
        value = GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
                           members, int(time.time() * 1000))
        try:
            part = self._partition_of(group.group_id)
            part.leader_epoch = self._append_epoch(part.partition)
            if part.leader_epoch is None and self.replication is not None \
                    and self.replication.replicated(OFFSETS_TOPIC, part.partition):
                return  # the replica manager no longer has us lead it either
            part.store_membership(group.group_id, value)
        except Exception as e:
            log.warning("group %s: storing its membership in %s failed: %s", group.group_id, OFFSETS_TOPIC, e)
            return
        self._wake_followers(part)

    # -- JoinGroup ---------------------------------------------------------------------------------

    # -- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------------

    # -- offsets -----------------------------------------------------------------------------------

    # -- admin: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete ------------------------------


    # -- housekeeping ------------------------------------------------------------------------------

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self._config.offsets_retention_check_interval_ms / 1000.0, 30.0))
            self._resign(self._snapshot())
            now = int(time.time() * 1000)
            active = {gid for gid, grp in self._groups.items() if grp.members}
            for part in list(self._partitions.values()):
                if part.state != LOADED:
                    continue
                try:
                    for group_id in part.expire(now, self._config.offsets_retention_ms, active):
                        self._forget_if_empty(group_id)
                except Exception:
                    log.exception("offsets housekeeping of %s-%d failed", OFFSETS_TOPIC, part.partition)

    def _forget_if_empty(self, group_id: str) -> None:
        """A group whose stored membership was tombstoned by expiry: Dead, unless a member joined meanwhile."""
        group = self._groups.get(group_id)
        if group is None or not group.is_(g.EMPTY, g.DEAD):
            return
        del self._groups[group_id]
        if group.join_timer is not None:
            group.join_timer.cancel()
        if not group.is_(g.DEAD):
            group.transition(g.DEAD)

    def describe(self) -> dict[str, Any]:
        return {gid: grp.summary() for gid, grp in self._groups.items()}


