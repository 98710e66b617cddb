"""The group membership protocol of :class:`~metaq.broker.coordinator.coordinator.GroupCoordinator`: JoinGroup,
SyncGroup, Heartbeat and LeaveGroup drive each group's state machine (:mod:`metaq.broker.coordinator.group_state`),
and the session loop removes members that stop heartbeating or do not rejoin within the rebalance timeout, and
pending members (KIP-394) that do not come back with their id within their session timeout.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from abc import abstractmethod
from collections.abc import Callable

from metaq.broker.coordinator import group_state as g
from metaq.broker.coordinator.config import CoordinatorConfig
from metaq.broker.coordinator.group_state import Group, JoinResult, Member, protocols_bytes
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ErrorCode

log = logging.getLogger(__name__)


SESSION_CHECK_S = 0.1  # how often member sessions are checked


def _fail_member(member: Member, error: int) -> None:
    """Answer a member's pending JoinGroup and SyncGroup with ``error``."""
    join, member.join_waiter = member.join_waiter, None
    if join is not None and not join.done():
        join.set_result(JoinResult(error, member_id=member.member_id))
    sync, member.sync_waiter = member.sync_waiter, None
    if sync is not None and not sync.done():
        sync.set_result((error, b""))


def loop_now() -> float:
    return asyncio.get_running_loop().time()


class GroupMembership:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup and member expiry, for :class:`GroupCoordinator`."""

    _config: CoordinatorConfig
    _snapshot: Callable[[], ClusterSnapshot]
    _groups: dict[str, Group]

    @abstractmethod
    def check(self, group_id: str) -> int: ...

    @abstractmethod
    def _group(self, group_id: str, *, create: bool) -> Group | None: ...

    @abstractmethod
    def _store_membership(self, group: Group) -> None: ...

    @abstractmethod
    def _resign(self, snapshot: ClusterSnapshot) -> None: ...

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
                      protocol_type, protocols, last_heartbeat=loop_now())
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
            # KIP-394: the member must come back with this id; the join waits for it until its session expires
            group.add_pending(spec.member_id, loop_now() + spec.session_timeout_ms / 1000.0)
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
        member.last_heartbeat = loop_now()
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
            member.last_heartbeat = loop_now()
            result = JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_name, group.leader_id or "",
                                member.member_id, members if member.member_id == group.leader_id else [])
            if waiter is not None and not waiter.done():
                waiter.set_result(result)

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
        member.last_heartbeat = loop_now()
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
        group.members[member_id].last_heartbeat = loop_now()
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_(g.PREPARING_REBALANCE) else ErrorCode.NONE

    def leave_group(self, group_id: str, member_id: str) -> int:
        error = self.check(group_id)
        if error:
            return error
        group = self._group(group_id, create=False)
        if group is not None and member_id in group.pending_members:
            self._drop_pending(group, member_id, "left the group")
            return ErrorCode.NONE
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(group, member_id, "left the group")
        return ErrorCode.NONE

    def _drop_pending(self, group: Group, member_id: str, reason: str) -> None:
        """A pending member that left or expired: a join held up by it may complete now (Kafka's
        removePendingMemberAndUpdateGroup)."""
        if not group.remove_pending(member_id):
            return
        log.info("group %s: pending member %s %s", group.group_id, member_id, reason)
        if group.is_(g.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

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
            now = loop_now()
            for group in list(self._groups.values()):
                for member in list(group.members.values()):
                    waiting = member.join_waiter is not None and not member.join_waiter.done()
                    if not waiting and now - member.last_heartbeat > member.session_timeout_ms / 1000.0:
                        self._remove_member(group, member.member_id, "session timed out")
                for member_id in group.expired_pending(now):
                    self._drop_pending(group, member_id, "did not join again with its id within its session timeout")
