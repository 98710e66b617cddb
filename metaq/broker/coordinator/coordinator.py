"""GroupCoordinator: groups and offsets of every group whose ``partitionFor(group)`` this broker leads.

Everything runs on the broker's event loop (no locks); replaying a partition's log runs on a worker
thread while requests for its groups get COORDINATOR_LOAD_IN_PROGRESS. Rebalances complete as soon as
every known member has rejoined (no fixed delay unless ``group.initial.rebalance.delay.ms`` asks for one
for empty groups); members that do not rejoin within the rebalance timeout, or stop heartbeating for
their session timeout, are removed.

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
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, Self

from metaq.broker.config import BrokerConfig
from metaq.broker.coordinator import group as g
from metaq.broker.coordinator.group import Group, GroupSummary, JoinResult, Member, protocols_bytes
from metaq.broker.coordinator.offsets_partition import (
    LOADED,
    LOADING,
    CommittedOffset,
    OffsetsPartition,
    TopicPartition,
)
from metaq.broker.coordinator.schema import OFFSETS_TOPIC, GroupValue, StoredMember, partition_for
from metaq.broker.log.manager import LogManager
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ErrorCode, InvalidProducerEpochError, MessageSizeTooLargeError

log = logging.getLogger(__name__)

SESSION_CHECK_S = 0.1  # how often member sessions are checked
COMMIT_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms: how long a commit waits for the ISR
# a commit the ISR did not take (as Kafka's GroupMetadataManager maps them): the client finds the coordinator
_REPLICATION_ERRORS: dict[int, int] = {ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE}


class Replication(Protocol):
    """What the coordinator needs of the broker's replica manager (metaq.broker.replication.manager)."""

    def append_epoch(self, topic: str, partition: int) -> int | None: ...

    def leader_appended(self, topic: str, partition: int) -> None: ...

    def replicated(self, topic: str, partition: int) -> bool: ...

    async def min_insync_replicas(self, topic: str) -> int: ...

    async def wait_replicated(self, topic: str, partition: int, required: int, min_isr: int,
                              timeout_s: float) -> int: ...


class CoordinatorAddress(NamedTuple):
    """A FindCoordinator answer: the broker coordinating a group, or the error (node -1) why none does."""

    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1


class GroupListing(NamedTuple):
    """One group of a ListGroups answer."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class CoordinatorConfig:
    broker_id: int
    offsets_topic_num_partitions: int = 50
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 0
    flush_each_commit: bool = False
    offsets_commit_required_acks: int = -1
    group_max_member_metadata_bytes: int = 1048576
    group_max_metadata_bytes: int = 8388608

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Self:
        """The coordinator's settings in a broker config (``offsets.retention.minutes`` in ms; a commit is
        flushed at once when ``log.flush.interval.messages`` asks for a flush per message)."""
        return cls(
            broker_id=config.broker_id,
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_retention_ms=config.offsets_retention_minutes * 60000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            flush_each_commit=config.log_flush_interval_messages <= 1,
            offsets_commit_required_acks=config.offsets_commit_required_acks,
            group_max_member_metadata_bytes=config.group_max_member_metadata_bytes,
            group_max_metadata_bytes=config.group_max_metadata_bytes,
        )


class GroupCoordinator:
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
        now = _now()
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

    async def join_group(self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]], *,
                         require_known_member_id: bool) -> JoinResult:
        error = self.check(group_id)
        if error:
            return JoinResult(error, member_id=member_id)
        if not (self._config.group_min_session_timeout_ms <= session_timeout_ms
                <= self._config.group_max_session_timeout_ms):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self._group(group_id, create=True)
        assert group is not None
        if group.is_(g.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports(protocol_type, [name for name, _ in protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if error := self._metadata_error(group, member_id, protocols):
            return JoinResult(error, member_id=member_id)
        spec = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                      rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
                      protocol_type, protocols, last_heartbeat=_now())
        if not member_id:
            return await self._join_new(group, spec, require_known_member_id)
        return await self._join_known(group, spec)

    def _metadata_error(self, group: Group, member_id: str, protocols: list[tuple[str, bytes]]) -> int:
        """A JoinGroup whose protocol metadata is over the member's or the group's bound: the leader's answer
        carries every member's metadata, so without a bound a few members could make it gigabytes."""
        size = protocols_bytes(protocols)
        if size > self._config.group_max_member_metadata_bytes:
            log.warning("group %s: refused a JoinGroup with %d bytes of protocol metadata (at most %d,"
                        " metaq.group.max.member.metadata.bytes)", group.group_id, size,
                        self._config.group_max_member_metadata_bytes)
            return ErrorCode.INVALID_REQUEST
        current = group.members.get(member_id)
        total = group.metadata_bytes - (current.metadata_bytes if current is not None else 0) + size
        if total > self._config.group_max_metadata_bytes:
            log.warning("group %s: refused a JoinGroup: its members' protocol metadata would be %d bytes (at most"
                        " %d, metaq.group.max.metadata.bytes)", group.group_id, total,
                        self._config.group_max_metadata_bytes)
            return ErrorCode.GROUP_MAX_SIZE_REACHED
        return ErrorCode.NONE

    async def _join_new(self, group: Group, spec: Member, require_known_member_id: bool) -> JoinResult:
        spec.member_id = f"{spec.client_id}-{uuid.uuid4()}"
        if spec.group_instance_id and spec.group_instance_id in group.static_members:
            return await self._rejoin_static(group, spec)
        if require_known_member_id and not spec.group_instance_id:
            group.pending_members.add(spec.member_id)  # KIP-394: the member must come back with this id
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=spec.member_id)
        group.add(spec)
        return await self._wait_for_join(group, spec)

    async def _join_known(self, group: Group, spec: Member) -> JoinResult:
        if spec.member_id in group.pending_members:
            group.add(spec)
            return await self._wait_for_join(group, spec)
        current = group.static_members.get(spec.group_instance_id) if spec.group_instance_id else None
        if current is not None and current != spec.member_id:  # the instance first, as in _member_error
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=spec.member_id)
        member = group.members.get(spec.member_id)
        if member is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=spec.member_id)
        changed = member.protocols != spec.protocols
        group.set_protocols(member, spec.protocols)
        member.session_timeout_ms = spec.session_timeout_ms
        member.rebalance_timeout_ms = spec.rebalance_timeout_ms
        member.last_heartbeat = _now()
        if group.is_(g.STABLE) and not changed and member.member_id != group.leader_id:
            return self._current_generation(group, member)  # a follower re-syncing: nothing changed
        return await self._wait_for_join(group, member)

    async def _rejoin_static(self, group: Group, spec: Member) -> JoinResult:
        """A static member restarted: it replaces its old member id and keeps its assignment."""
        old_id = group.static_members[spec.group_instance_id]  # type: ignore[index]
        old = group.remove(old_id)
        if old is not None:
            spec.assignment = old.assignment
            _fail_member(old, ErrorCode.FENCED_INSTANCE_ID)
        was_leader = group.leader_id is None or group.leader_id == old_id
        group.add(spec)
        if was_leader:
            group.leader_id = spec.member_id
        if group.is_(g.STABLE) and old is not None and old.protocols == spec.protocols and not was_leader:
            return self._current_generation(group, spec)
        return await self._wait_for_join(group, spec)

    def _current_generation(self, group: Group, member: Member) -> JoinResult:
        return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_name, group.leader_id or "",
                          member.member_id, [])

    async def _wait_for_join(self, group: Group, member: Member) -> JoinResult:
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        if not group.is_(g.PREPARING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        elif group.initial_delay_until is not None:
            self._extend_initial_delay(group)
        else:
            self._maybe_complete_join(group)
        return await waiter

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        was_empty = group.is_(g.EMPTY)
        if group.is_(g.COMPLETING_REBALANCE):
            self._fail_sync_waiters(group, ErrorCode.REBALANCE_IN_PROGRESS)
        log.info("group %s: preparing to rebalance (%s)", group.group_id, reason)
        group.transition(g.PREPARING_REBALANCE)
        delay_ms = self._config.group_initial_rebalance_delay_ms if was_empty else 0
        timeout_ms = max(group.max_rebalance_timeout_ms(), delay_ms)
        loop = asyncio.get_running_loop()
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer = loop.call_later(timeout_ms / 1000.0, self._complete_join, group)
        if delay_ms > 0:
            group.join_timer.cancel()
            group.initial_delay_until = loop.time() + timeout_ms / 1000.0
            group.join_timer = loop.call_later(delay_ms / 1000.0, self._complete_join, group)
        else:
            self._maybe_complete_join(group)

    def _extend_initial_delay(self, group: Group) -> None:
        """A member joined during the initial delay: wait one more delay for others (as Kafka's
        InitialDelayedJoin does), but not past the rebalance timeout."""
        assert group.initial_delay_until is not None
        loop = asyncio.get_running_loop()
        delay_s = self._config.group_initial_rebalance_delay_ms / 1000.0
        if group.join_timer is not None:
            group.join_timer.cancel()
        fire_at = min(loop.time() + delay_s, group.initial_delay_until)
        group.join_timer = loop.call_at(fire_at, self._complete_join, group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.initial_delay_until is not None:
            return  # the initial delay batches the first joins: only its timer completes the join
        if group.is_(g.PREPARING_REBALANCE) and group.all_rejoined():
            asyncio.get_running_loop().call_soon(self._complete_join, group)

    def _complete_join(self, group: Group) -> None:
        if not group.is_(g.PREPARING_REBALANCE):
            return
        group.initial_delay_until = None
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in [m for m in group.members.values() if m.join_waiter is None or m.join_waiter.done()]:
            log.info("group %s: member %s did not rejoin in time; removed", group.group_id, member.member_id)
            group.remove(member.member_id)
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition(g.EMPTY)
            self._store_membership(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition(g.COMPLETING_REBALANCE)
        members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                   for m in group.members.values()]
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            member.last_heartbeat = _now()
            result = JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_name, group.leader_id or "",
                                member.member_id, members if member.member_id == group.leader_id else [])
            if waiter is not None and not waiter.done():
                waiter.set_result(result)

    # -- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------------

    def _member_error(self, group: Group | None, member_id: str, generation_id: int,
                      instance_id: str | None = None) -> int:
        if group is None or group.is_(g.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        # the instance first, as Kafka does (docs/broker-coordinated-consumer.md, "Static membership"): the old
        # process of a restarted static member must learn it was fenced, not rejoin and fence the new one
        current = group.static_members.get(instance_id) if instance_id else None
        if current is not None and current != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members or (instance_id and current is None):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                         assignments: dict[str, bytes]) -> tuple[int, bytes]:
        error = self.check(group_id)
        if error:
            return error, b""
        group = self._group(group_id, create=False)
        error = self._member_error(group, member_id, generation_id, instance_id)
        if error:
            return error, b""
        assert group is not None
        member = group.members[member_id]
        member.last_heartbeat = _now()
        if group.is_(g.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        if group.is_(g.STABLE):
            return ErrorCode.NONE, member.assignment
        waiter: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.transition(g.STABLE)
            self._store_membership(group)
            for m in group.members.values():
                w, m.sync_waiter = m.sync_waiter, None
                if w is not None and not w.done():
                    w.set_result((ErrorCode.NONE, m.assignment))
        return await waiter

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        error = self.check(group_id)
        if error:
            return error
        group = self._group(group_id, create=False)
        error = self._member_error(group, member_id, generation_id, instance_id)
        if error:
            return error
        assert group is not None
        group.members[member_id].last_heartbeat = _now()
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_(g.PREPARING_REBALANCE) else ErrorCode.NONE

    def leave_group(self, group_id: str, member_id: str) -> int:
        error = self.check(group_id)
        if error:
            return error
        group = self._group(group_id, create=False)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(group, member_id, "left the group")
        return ErrorCode.NONE

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        log.info("group %s: member %s %s", group.group_id, member_id, reason)
        _fail_member(member, ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(g.STABLE, g.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member_id} {reason}")
        elif group.is_(g.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _fail_sync_waiters(self, group: Group, error: int) -> None:
        for member in group.members.values():
            w, member.sync_waiter = member.sync_waiter, None
            if w is not None and not w.done():
                w.set_result((error, b""))

    def _fail_waiters(self, group: Group, error: int) -> None:
        for member in group.members.values():
            _fail_member(member, error)

    async def _session_loop(self) -> None:
        while True:
            await asyncio.sleep(SESSION_CHECK_S)
            self._resign(self._snapshot())
            now = _now()
            for group in list(self._groups.values()):
                for member in list(group.members.values()):
                    waiting = member.join_waiter is not None and not member.join_waiter.done()
                    if not waiting and now - member.last_heartbeat > member.session_timeout_ms / 1000.0:
                        self._remove_member(group, member.member_id, "session timed out")

    # -- offsets -----------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                             offsets: dict[tuple[str, int], tuple[int, str]], retention_ms: int = -1,
                             ) -> dict[tuple[str, int], int]:
        """Per topic-partition error codes. Appended to the log before the cache (and the answer)."""
        error = self.check(group_id) or self._commit_error(group_id, generation_id, member_id, instance_id)
        if error:
            return {tp: error for tp in offsets}
        return await self._store_commits(group_id, offsets, retention_ms)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 offsets: dict[tuple[str, int], tuple[int, str]]) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets appended to the group's offsets partition inside the producer's
        transaction, pending until its marker (:meth:`end_txn`; docs/transactions.md section 2)."""
        error = self.check(group_id)
        if error:
            return {tp: error for tp in offsets}
        return await self._store_commits(group_id, offsets, -1, (producer_id, producer_epoch))

    async def end_txn(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """The producer's marker was written to ``offsets_partition``: its pending offsets there become the
        groups' (commit) or are dropped (abort), as Kafka's onTransactionCompleted. A partition still
        loading is waited for (its replay may have ended before the marker); one not loaded here replays the
        marker when it is."""
        if offsets_partition in self._loads:
            await self._loaded([offsets_partition])
        part = self._partitions.get(offsets_partition)
        if part is not None and part.state == LOADED:
            groups = part.end_txn(producer_id, commit)
            if groups:
                log.debug("producer %d %s the offsets of groups %s", producer_id,
                          "committed" if commit else "aborted", groups)

    async def _store_commits(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str]],
                             retention_ms: int, producer: tuple[int, int] | None = None
                             ) -> dict[tuple[str, int], int]:
        now = int(time.time() * 1000)
        expire = now + retention_ms if retention_ms > 0 else -1
        errors = {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp, (_, md) in offsets.items()
                  if len((md or "").encode("utf-8")) > self._config.offset_metadata_max_bytes}
        commits = {tp: CommittedOffset(off, md or "", now, expire) for tp, (off, md) in offsets.items()
                   if tp not in errors}
        part = self._partition_of(group_id)
        try:
            part.leader_epoch = self._append_epoch(part.partition)
            if producer is None:
                part.append_commits(group_id, commits)
            else:
                part.append_txn_commits(producer[0], producer[1], group_id, commits)
            if self._config.flush_each_commit:
                await self._in_thread(part.log.flush)
        except MessageSizeTooLargeError as e:
            # as Kafka's GroupMetadataManager.storeOffsets maps MESSAGE_TOO_LARGE: a size error the client must
            # act on (commit fewer partitions at once), where KAFKA_STORAGE_ERROR would be retried for ever
            log.warning("group %s: an OffsetCommit of %d partitions is too large for %s: %s", group_id,
                        len(offsets), OFFSETS_TOPIC, e)
            return {tp: ErrorCode.INVALID_COMMIT_OFFSET_SIZE for tp in offsets}
        except InvalidProducerEpochError as e:
            log.warning("group %s: transactional offsets refused: %s", group_id, e)
            return {tp: ErrorCode.PRODUCER_FENCED for tp in offsets}
        except Exception as e:
            log.error("group %s: appending offsets to %s-%d failed: %s", group_id, OFFSETS_TOPIC, part.partition, e)
            return {tp: ErrorCode.KAFKA_STORAGE_ERROR for tp in offsets}
        error = await self._replicated(part)
        if error:
            return {tp: error for tp in offsets}
        return {tp: errors.get(tp, ErrorCode.NONE) for tp in offsets}

    def _append_epoch(self, index: int) -> int | None:
        return self.replication.append_epoch(OFFSETS_TOPIC, index) if self.replication is not None else None

    async def _replicated(self, part: OffsetsPartition) -> int:
        """After an append to a replicated offsets partition: wake the followers and, with
        offsets.commit.required.acks -1, wait until the ISR has it. 0 or the error to answer."""
        replication = self.replication
        if replication is None or not self._wake_followers(part):
            return ErrorCode.NONE
        if self._config.offsets_commit_required_acks != -1:
            return ErrorCode.NONE
        min_isr = await replication.min_insync_replicas(OFFSETS_TOPIC)
        code = await replication.wait_replicated(OFFSETS_TOPIC, part.partition, part.log.log_end_offset, min_isr,
                                                 COMMIT_TIMEOUT_S)
        if code:
            log.warning("a commit to %s-%d was not replicated: error %d", OFFSETS_TOPIC, part.partition, code)
        if not code:
            return ErrorCode.NONE
        return int(_REPLICATION_ERRORS.get(code, ErrorCode.NOT_COORDINATOR))

    def _wake_followers(self, part: OffsetsPartition) -> bool:
        """After an append: move the HW of a leader alone in its ISR, wake the followers' long polls.
        False if the partition is not replicated."""
        replication = self.replication
        if replication is None or not replication.replicated(OFFSETS_TOPIC, part.partition):
            return False
        replication.leader_appended(OFFSETS_TOPIC, part.partition)
        self.notify((OFFSETS_TOPIC, part.partition))
        return True

    def _commit_error(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        group = self._group(group_id, create=False)
        if generation_id < 0 and (group is None or group.is_(g.EMPTY)):
            return ErrorCode.NONE  # a commit from outside the group protocol (simple or ZooKeeper-coordinated consumer)
        error = self._member_error(group, member_id, generation_id, instance_id)
        if error:
            return error
        assert group is not None
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_(g.COMPLETING_REBALANCE) else ErrorCode.NONE

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[int, dict[tuple[str, int], CommittedOffset]]:
        error = self.check(group_id)
        if error:
            return error, {}
        return ErrorCode.NONE, self._partition_of(group_id).fetch(group_id, partitions)

    # -- admin: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete ------------------------------

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


async def locate_coordinator(snapshot_of: Callable[[], ClusterSnapshot], topic: str, key: str,
                             create_topic: Callable[[int], Awaitable[None]], partitions: int, listener: str
                             ) -> CoordinatorAddress:
    """The leader of ``key``'s partition of the internal ``topic`` (created
    with ``partitions`` on first use), on ``listener`` (the one the request came in on): where Kafka's FindCoordinator
    sends a group (``__consumer_offsets``) or a transactional id (``__transaction_state``)."""
    snapshot = snapshot_of()
    if topic not in snapshot.topics:
        await create_topic(partitions)
        snapshot = snapshot_of()
        if topic not in snapshot.topics:
            return CoordinatorAddress(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    existing = snapshot.topics.get(topic)
    meta = snapshot.partition(topic, partition_for(key, len(existing) if existing else partitions))
    address = snapshot.address(meta.leader, listener) if meta else None
    if meta is None or address is None:
        return CoordinatorAddress(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return CoordinatorAddress(ErrorCode.NONE, meta.leader, address[0], address[1])


async def replicate_append(replication: Replication | None, notify: Callable[[tuple[str, int]], None], topic: str,
                           partition: int, end_offset: int, timeout_s: float) -> int:
    """After a coordinator's append to a replicated internal partition it leads: move the HW of a leader alone
    in its ISR, wake the followers' long polls and wait until the ISR has ``end_offset`` (Kafka's
    requiredAcks -1 for ``__transaction_state``). 0, or the replication error."""
    if replication is None or not replication.replicated(topic, partition):
        return ErrorCode.NONE
    replication.leader_appended(topic, partition)
    notify((topic, partition))
    min_isr = await replication.min_insync_replicas(topic)
    return await replication.wait_replicated(topic, partition, end_offset, min_isr, timeout_s)


def _fail_member(member: Member, error: int) -> None:
    """Answer a member's pending JoinGroup and SyncGroup with ``error``."""
    join, member.join_waiter = member.join_waiter, None
    if join is not None and not join.done():
        join.set_result(JoinResult(error, member_id=member.member_id))
    sync, member.sync_waiter = member.sync_waiter, None
    if sync is not None and not sync.done():
        sync.set_result((error, b""))


def _now() -> float:
    return asyncio.get_running_loop().time()
