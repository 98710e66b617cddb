"""The group coordinator's state machine, driven directly (no broker process, no sockets).

GroupCoordinator runs on one event loop; its dependencies are replaced by the smallest stand-ins: a cluster
snapshot in which this broker leads the one ``__consumer_offsets`` partition, a log manager that opens real
partition logs under tmp_path, and an ``in_thread`` that runs inline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest

from metaq.broker.coordinator import group_state as g
from metaq.broker.coordinator.config import CoordinatorConfig
from metaq.broker.coordinator.coordinator import GroupCoordinator
from metaq.broker.coordinator.group_state import JoinResult
from metaq.broker.coordinator.offsets_partition import CommittedOffset, OffsetsPartition
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.metadata import ClusterSnapshot, PartitionMeta
from zk_layout import BrokerInfo

# Kafka's wire codes, from kafka-python's registry: an oracle independent of metaq's own constants
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = Errors.CoordinatorLoadInProgressError.errno
COORDINATOR_NOT_AVAILABLE = Errors.CoordinatorNotAvailableError.errno
NOT_COORDINATOR = Errors.NotCoordinatorError.errno
ILLEGAL_GENERATION = Errors.IllegalGenerationError.errno
INCONSISTENT_GROUP_PROTOCOL = Errors.InconsistentGroupProtocolError.errno
INVALID_GROUP_ID = Errors.InvalidGroupIdError.errno
UNKNOWN_MEMBER_ID = Errors.UnknownMemberIdError.errno
INVALID_SESSION_TIMEOUT = Errors.InvalidSessionTimeoutError.errno
REBALANCE_IN_PROGRESS = Errors.RebalanceInProgressError.errno
NON_EMPTY_GROUP = Errors.NonEmptyGroupError.errno
MEMBER_ID_REQUIRED = Errors.MemberIdRequiredError.errno
FENCED_INSTANCE_ID = Errors.FencedInstanceIdError.errno

GROUP = "etl"
OFFSETS = {OFFSETS_TOPIC: {0: PartitionMeta(leader=0, leader_epoch=0, replicas=(0,), isr=(0,))}}
LEADING = ClusterSnapshot(brokers={0: BrokerInfo.plaintext(0, "127.0.0.1", 9092)}, topics=OFFSETS)


class FakeLogs:
    """The one LogManager method the coordinator uses, over real partition logs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.logs: dict[tuple[str, int], PartitionLog] = {}

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        if (topic, partition) not in self.logs:
            self.logs[(topic, partition)] = PartitionLog.open(
                self.directory / f"{topic}-{partition}", topic, partition, LogConfig(), recover=False,
                recovery_point=0)
        return self.logs[(topic, partition)]


async def _inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


async def _no_topic_creation(partitions: int) -> None:
    raise AssertionError("the offsets topic exists: nothing to create")


def run(tmp_path: Path, scenario: Callable[[GroupCoordinator], Awaitable[None]],
        snapshot: ClusterSnapshot = LEADING, load: bool = True, **config: Any) -> None:
    """Run ``scenario`` against a fresh coordinator (whose offsets partition is loaded, unless not ``load``)."""
    logs = FakeLogs(tmp_path)

    async def main() -> None:
        settings = {"group_min_session_timeout_ms": 50, **config}
        coordinator = GroupCoordinator(CoordinatorConfig(broker_id=0, **settings), logs,  # type: ignore[arg-type]
                                       lambda: snapshot, _no_topic_creation, in_thread=_inline)
        coordinator.start()
        try:
            if load:
                await loaded(coordinator)
            await scenario(coordinator)
        finally:
            await coordinator.stop()

    try:
        asyncio.run(main())
    finally:
        for log in logs.logs.values():
            log.close()


async def loaded(coordinator: GroupCoordinator) -> None:
    """Wait (polling, bounded) until the offsets partition has been replayed."""
    for _ in range(1000):
        if coordinator.check(GROUP) != COORDINATOR_LOAD_IN_PROGRESS:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the offsets partition never loaded")


def join(coordinator: GroupCoordinator, member_id: str = "", *, instance: str | None = None,
         protocols: tuple[tuple[str, bytes], ...] = (("range", b"m"),), session_ms: int = 10_000,
         rebalance_ms: int = 10_000, protocol_type: str = "consumer", require_known: bool = False,
         group: str = GROUP) -> Awaitable[JoinResult]:
    return coordinator.join_group(group, member_id, instance, "client", "/127.0.0.1", session_ms, rebalance_ms,
                                  protocol_type, list(protocols), require_known_member_id=require_known)


async def state(coordinator: GroupCoordinator) -> str:
    _, summary = await coordinator.describe_group(GROUP)
    return summary.state


async def settle() -> None:
    """Let callbacks the coordinator scheduled with call_soon run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def within(awaitable: Awaitable[Any], timeout: float = 10.0) -> Any:
    return await asyncio.wait_for(awaitable, timeout)


async def stable_pair(c: GroupCoordinator, **join_args: Any) -> tuple[JoinResult, JoinResult]:
    """Two members in generation 1, Stable: (leader, follower)."""
    first = asyncio.create_task(join(c, **join_args))
    await settle()
    second = asyncio.create_task(join(c, **join_args))
    await settle()
    first_again = await within(join(c, (await within(first)).member_id, **join_args))
    follower = await within(second)
    leader = first_again
    if follower.member_id == follower.leader:
        leader, follower = follower, leader
    sync_follower = asyncio.create_task(
        c.sync_group(GROUP, follower.generation_id, follower.member_id, None, {}))
    await c.sync_group(GROUP, leader.generation_id, leader.member_id, None,
                       {leader.member_id: b"L", follower.member_id: b"F"})
    assert await within(sync_follower) == (NONE, b"F")
    return leader, follower


def test_one_member_goes_empty_preparing_completing_stable_empty_dead(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        assert (await join(c)).error_code == COORDINATOR_LOAD_IN_PROGRESS  # the first request starts the replay
        await loaded(c)
        assert await state(c) == g.DEAD  # unknown group, no offsets
        a = await within(join(c))
        assert (a.error_code, a.generation_id, a.leader) == (NONE, 1, a.member_id)
        assert a.members == [(a.member_id, None, b"m")] and a.protocol_name == "range"
        assert await state(c) == g.COMPLETING_REBALANCE
        assert c.heartbeat(GROUP, 1, a.member_id, None) == NONE
        assert await c.commit_offsets(GROUP, 1, a.member_id, None, {("t", 0): (5, "")}) == {
            ("t", 0): REBALANCE_IN_PROGRESS}
        assert await c.sync_group(GROUP, 1, a.member_id, None, {a.member_id: b"mine"}) == (NONE, b"mine")
        assert await state(c) == g.STABLE
        assert await c.commit_offsets(GROUP, 1, a.member_id, None, {("t", 0): (5, "")}) == {("t", 0): NONE}
        assert await c.delete_group(GROUP) == NON_EMPTY_GROUP
        assert c.leave_group(GROUP, a.member_id) == NONE
        await settle()
        assert await state(c) == g.EMPTY
        assert c.heartbeat(GROUP, 1, a.member_id, None) == UNKNOWN_MEMBER_ID
        group = c._groups[GROUP]
        assert await c.delete_group(GROUP) == NONE
        assert group.state == g.DEAD and await state(c) == g.DEAD

    run(tmp_path, scenario, load=False)


def test_group_states_change_only_along_the_documented_edges() -> None:
    group = g.Group(GROUP)
    with pytest.raises(RuntimeError, match="illegal transition Empty -> Stable"):
        group.transition(g.STABLE)
    group.transition(g.DEAD)
    for target in (g.EMPTY, g.PREPARING_REBALANCE, g.COMPLETING_REBALANCE, g.STABLE):
        with pytest.raises(RuntimeError, match="illegal transition Dead"):
            group.transition(target)


def test_join_errors(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        assert (await join(c, group="")).error_code == INVALID_GROUP_ID
        assert (await join(c, session_ms=10)).error_code == INVALID_SESSION_TIMEOUT
        assert (await join(c, session_ms=2_000_000)).error_code == INVALID_SESSION_TIMEOUT
        assert (await join(c, "never-joined")).error_code == UNKNOWN_MEMBER_ID
        required = await join(c, require_known=True)  # KIP-394: come back with the id we hand out
        assert required.error_code == MEMBER_ID_REQUIRED and required.member_id
        a = await within(join(c, required.member_id))
        assert (a.error_code, a.member_id, a.generation_id) == (NONE, required.member_id, 1)
        assert (await join(c, protocol_type="connect")).error_code == INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, protocols=(("roundrobin", b""),))).error_code == INCONSISTENT_GROUP_PROTOCOL

    run(tmp_path, scenario)


@pytest.mark.parametrize(("snapshot", "error"), [
    (ClusterSnapshot(brokers=LEADING.brokers), COORDINATOR_NOT_AVAILABLE),
    (ClusterSnapshot(brokers=LEADING.brokers, topics={OFFSETS_TOPIC: {
        0: PartitionMeta(leader=1, leader_epoch=0, replicas=(1,), isr=(1,))}}), NOT_COORDINATOR),
])
def test_groups_of_partitions_this_broker_does_not_lead_are_refused(tmp_path: Path, snapshot: ClusterSnapshot,
                                                                     error: int) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        assert (await join(c)).error_code == error
        assert c.heartbeat(GROUP, 1, "m", None) == error
        assert await c.sync_group(GROUP, 1, "m", None, {}) == (error, b"")
        assert c.leave_group(GROUP, "m") == error

    run(tmp_path, scenario, snapshot=snapshot)


def test_a_second_member_rebalances_and_the_follower_waits_for_the_leaders_assignment(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        a = await within(join(c))
        await c.sync_group(GROUP, 1, a.member_id, None, {a.member_id: b"all"})
        b_join = asyncio.create_task(join(c))
        await settle()
        assert await state(c) == g.PREPARING_REBALANCE
        assert c.heartbeat(GROUP, 1, a.member_id, None) == REBALANCE_IN_PROGRESS
        assert await c.sync_group(GROUP, 1, a.member_id, None, {}) == (REBALANCE_IN_PROGRESS, b"")
        assert await c.commit_offsets(GROUP, 1, a.member_id, None, {("t", 0): (1, "")}) == {("t", 0): NONE}
        a2 = await within(join(c, a.member_id))
        b = await within(b_join)
        assert a2.generation_id == b.generation_id == 2 and a2.leader == b.leader == a.member_id
        assert sorted(m for m, _, _ in a2.members) == sorted([a.member_id, b.member_id]) and b.members == []
        assert await state(c) == g.COMPLETING_REBALANCE
        follower_sync = asyncio.create_task(c.sync_group(GROUP, 2, b.member_id, None, {}))
        await settle()
        assert not follower_sync.done()  # waits for the leader
        assert await c.commit_offsets(GROUP, 2, b.member_id, None, {("t", 0): (2, "")}) == {
            ("t", 0): REBALANCE_IN_PROGRESS}
        assert await c.sync_group(GROUP, 2, a.member_id, None, {a.member_id: b"A", b.member_id: b"B"}) == (
            NONE, b"A")
        assert await within(follower_sync) == (NONE, b"B")
        assert c.heartbeat(GROUP, 1, b.member_id, None) == ILLEGAL_GENERATION
        assert await c.sync_group(GROUP, 2, "nobody", None, {}) == (UNKNOWN_MEMBER_ID, b"")
        assert await c.commit_offsets(GROUP, 7, b.member_id, None, {("t", 0): (3, "")}) == {
            ("t", 0): ILLEGAL_GENERATION}

    run(tmp_path, scenario)


def test_a_member_that_leaves_while_completing_sends_the_others_back_to_join(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        leader, follower = await stable_pair(c)
        gen = leader.generation_id
        rejoin = asyncio.create_task(join(c, leader.member_id, protocols=(("range", b"changed"),)))
        await settle()
        assert await state(c) == g.PREPARING_REBALANCE
        assert c.heartbeat(GROUP, gen, follower.member_id, None) == REBALANCE_IN_PROGRESS
        again = await within(join(c, follower.member_id))
        assert (await within(rejoin)).generation_id == again.generation_id == gen + 1
        pending_sync = asyncio.create_task(c.sync_group(GROUP, gen + 1, follower.member_id, None, {}))
        await settle()
        assert await state(c) == g.COMPLETING_REBALANCE and not pending_sync.done()
        assert c.leave_group(GROUP, leader.member_id) == NONE
        assert await within(pending_sync) == (REBALANCE_IN_PROGRESS, b"")  # told to rejoin
        assert await state(c) == g.PREPARING_REBALANCE
        assert c.leave_group(GROUP, leader.member_id) == UNKNOWN_MEMBER_ID
        alone = await within(join(c, follower.member_id))
        assert (alone.error_code, alone.generation_id, alone.leader) == (NONE, gen + 2, follower.member_id)

    run(tmp_path, scenario)


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        a = await within(join(c, rebalance_ms=200))
        await c.sync_group(GROUP, 1, a.member_id, None, {a.member_id: b"all"})
        b = await within(join(c, rebalance_ms=200))  # a never rejoins
        assert (b.error_code, b.generation_id, b.leader, b.members) == (NONE, 2, b.member_id,
                                                                         [(b.member_id, None, b"m")])
        assert c.heartbeat(GROUP, 2, a.member_id, None) == UNKNOWN_MEMBER_ID

    run(tmp_path, scenario)


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        a = await within(join(c, session_ms=100))
        await c.sync_group(GROUP, 1, a.member_id, None, {a.member_id: b"all"})
        for _ in range(1000):  # poll: the session check runs on the coordinator's own schedule
            if await state(c) == g.EMPTY:
                break
            await asyncio.sleep(0.01)
        assert await state(c) == g.EMPTY
        assert c.heartbeat(GROUP, 1, a.member_id, None) == UNKNOWN_MEMBER_ID

    run(tmp_path, scenario)


def test_a_restarted_static_member_takes_over_its_assignment_and_fences_the_old_id(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        first = asyncio.create_task(join(c, instance="leader"))
        await settle()
        second = asyncio.create_task(join(c, instance="follower"))
        await settle()
        leader = await within(join(c, (await within(first)).member_id, instance="leader"))
        follower = await within(second)
        assert leader.member_id == leader.leader and follower.generation_id == 2
        sync_follower = asyncio.create_task(c.sync_group(GROUP, 2, follower.member_id, "follower", {}))
        await c.sync_group(GROUP, 2, leader.member_id, "leader", {leader.member_id: b"L", follower.member_id: b"F"})
        assert await within(sync_follower) == (NONE, b"F")

        restarted = await within(join(c, instance="follower"))  # same instance, no member id: a restart
        assert restarted.error_code == NONE and restarted.member_id != follower.member_id
        assert restarted.generation_id == 2 and await state(c) == g.STABLE  # no rebalance
        assert await c.sync_group(GROUP, 2, restarted.member_id, "follower", {}) == (NONE, b"F")
        # the old process of the instance is fenced (Kafka's ClassicGroup.validateMember), not merely unknown:
        # a member told UNKNOWN_MEMBER_ID joins again and would fence the restarted one in turn
        assert c.heartbeat(GROUP, 2, follower.member_id, "follower") == FENCED_INSTANCE_ID
        assert (await c.sync_group(GROUP, 2, follower.member_id, "follower", {}))[0] == FENCED_INSTANCE_ID
        assert (await join(c, follower.member_id, instance="follower")).error_code == FENCED_INSTANCE_ID
        assert c.heartbeat(GROUP, 2, restarted.member_id, "leader") == FENCED_INSTANCE_ID
        assert (await join(c, leader.member_id, instance="follower")).error_code == FENCED_INSTANCE_ID

    run(tmp_path, scenario)


def test_the_initial_rebalance_delay_puts_the_first_joins_in_one_generation(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        first = asyncio.create_task(join(c))
        second = asyncio.create_task(join(c))
        await settle()
        assert await state(c) == g.PREPARING_REBALANCE and not first.done()  # held by the delay
        a, b = await within(first), await within(second)
        assert a.generation_id == b.generation_id == 1 and a.leader == b.leader
        assert len([r for r in (a, b) if r.members]) == 1  # only the leader gets the member list

    run(tmp_path, scenario, group_initial_rebalance_delay_ms=1000)


def test_commits_from_outside_the_group_protocol_only_while_the_group_is_empty(tmp_path: Path) -> None:
    async def scenario(c: GroupCoordinator) -> None:
        tp = ("t", 0)
        assert await c.commit_offsets(GROUP, -1, "", None, {tp: (3, "zk-consumer")}) == {tp: NONE}
        a = await within(join(c))
        assert await c.commit_offsets(GROUP, -1, "", None, {tp: (4, "")}) == {tp: UNKNOWN_MEMBER_ID}
        error, fetched = c.fetch_offsets(GROUP, [tp])
        assert error == NONE and (fetched[tp].offset, fetched[tp].metadata) == (3, "zk-consumer")
        assert c.leave_group(GROUP, a.member_id) == NONE
        await settle()
        assert await c.commit_offsets(GROUP, -1, "", None, {tp: (5, "")}) == {tp: NONE}

    run(tmp_path, scenario)


def run_moving(tmp_path: Path,
               scenario: Callable[[GroupCoordinator, Callable[[int, int], None], FakeLogs], Awaitable[None]]) -> None:
    """Run ``scenario(coordinator, lead, logs)`` with the offsets partition replicated on brokers 0 and 1;
    ``lead(broker, epoch)`` makes ``broker`` its leader at ``epoch`` (the coordinator is broker 0)."""
    logs = FakeLogs(tmp_path)
    current = [LEADING]

    def lead(leader: int, epoch: int) -> None:
        current[0] = ClusterSnapshot(brokers=LEADING.brokers, topics={OFFSETS_TOPIC: {
            0: PartitionMeta(leader=leader, leader_epoch=epoch, replicas=(0, 1), isr=(0, 1))}})

    async def main() -> None:
        c = GroupCoordinator(CoordinatorConfig(broker_id=0, group_min_session_timeout_ms=50), logs,  # type: ignore[arg-type]
                             lambda: current[0], _no_topic_creation, in_thread=_inline)
        c.start()
        try:
            await loaded(c)
            await scenario(c, lead, logs)
        finally:
            await c.stop()

    try:
        asyncio.run(main())
    finally:
        for log in logs.logs.values():
            log.close()


def test_the_coordinator_follows_the_offsets_partitions_leadership(tmp_path: Path) -> None:
    """Another broker leads the offsets partition: the group is forgotten (NOT_COORDINATOR). Leading it again
    in a later leader epoch replays the log, with what the other leader wrote (replicated) meanwhile."""

    async def scenario(c: GroupCoordinator, lead: Callable[[int, int], None], logs: FakeLogs) -> None:
        a = await within(join(c))
        await c.sync_group(GROUP, 1, a.member_id, None, {a.member_id: b"all"})
        assert await c.commit_offsets(GROUP, 1, a.member_id, None, {("t", 0): (5, "")}) == {("t", 0): NONE}
        lead(1, 1)
        assert c.heartbeat(GROUP, 1, a.member_id, None) == NOT_COORDINATOR
        assert c.fetch_offsets(GROUP, None)[0] == NOT_COORDINATOR
        assert c.describe() == {}  # the group is forgotten with the partition
        # the other leader's commit, as replication appends it to this broker's copy of the log
        OffsetsPartition(logs.get_or_create(OFFSETS_TOPIC, 0)).append_commits(
            GROUP, {("t", 0): CommittedOffset(9, "", 1_700_000_000_000)})
        lead(0, 2)
        await loaded(c)
        error, offsets = c.fetch_offsets(GROUP, None)
        assert (error, offsets[("t", 0)].offset) == (NONE, 9)

    run_moving(tmp_path, scenario)


def test_a_coordinator_taking_a_group_over_keeps_its_members(tmp_path: Path) -> None:
    """The membership of a completed rebalance is stored in the offsets partition: a coordinator that takes
    the group over (this one, leading again after another broker did) knows the members, their generation
    and assignment, so their heartbeats go on and a commit in that generation is accepted. Without it, a
    member that came to the new coordinator first made a generation of its own while the others still
    consumed the partitions of the old one: two members read the same partitions."""

    async def scenario(c: GroupCoordinator, lead: Callable[[int, int], None], logs: FakeLogs) -> None:
        leader, follower = await stable_pair(c)
        gen = leader.generation_id
        lead(1, 1)
        assert c.heartbeat(GROUP, gen, leader.member_id, None) == NOT_COORDINATOR
        lead(0, 2)
        await loaded(c)
        assert c.heartbeat(GROUP, gen, follower.member_id, None) == NONE
        assert c.heartbeat(GROUP, gen, leader.member_id, None) == NONE
        summary = (await c.describe_group(GROUP))[1]
        assert (summary.state, {m.member_id: m.assignment for m in summary.members}) == (
            g.STABLE, {leader.member_id: b"L", follower.member_id: b"F"})
        assert await c.commit_offsets(GROUP, gen, follower.member_id, None, {("t", 1): (5, "")}) == {("t", 1): NONE}
        assert await c.sync_group(GROUP, gen, follower.member_id, None, {}) == (NONE, b"F")
        # everybody left: an empty group is stored, and nobody is restored from the older membership
        assert c.leave_group(GROUP, leader.member_id) == NONE
        assert c.leave_group(GROUP, follower.member_id) == NONE
        await within(_until(lambda: c.describe().get(GROUP, {}).get("state") == g.EMPTY))
        lead(1, 3)
        c.heartbeat(GROUP, gen, leader.member_id, None)
        lead(0, 4)
        await loaded(c)
        assert c.heartbeat(GROUP, gen, leader.member_id, None) == UNKNOWN_MEMBER_ID

    run_moving(tmp_path, scenario)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_a_join_waits_for_the_members_handed_an_id_with_member_id_required(tmp_path: Path) -> None:
    """KIP-394 (docs/broker-coordinated-consumer.md, "Joins wait for pending members"): a member that got
    MEMBER_ID_REQUIRED is pending until it joins again with its id; the join phase does not complete while one
    is, so a burst of new members lands in one generation. A pending member may leave (LeaveGroup)."""
    async def scenario(c: GroupCoordinator) -> None:
        a_id = (await join(c, require_known=True)).member_id
        p_id = (await join(c, require_known=True)).member_id
        q_id = (await join(c, require_known=True)).member_id
        assert await state(c) == g.EMPTY  # handing out ids starts no rebalance
        a_join = asyncio.create_task(join(c, a_id))
        await settle()
        assert await state(c) == g.PREPARING_REBALANCE and not a_join.done()  # p and q are pending
        assert c.leave_group(GROUP, q_id) == NONE
        await settle()
        assert not a_join.done()  # p still is
        p = await within(join(c, p_id))
        a = await within(a_join)
        assert (a.error_code, p.error_code, a.generation_id, p.generation_id) == (NONE, NONE, 1, 1)
        leader = a if a.leader == a.member_id else p
        assert sorted(m for m, _, _ in leader.members) == sorted([a_id, p_id])
        assert (await join(c, q_id)).error_code == UNKNOWN_MEMBER_ID  # q left: its id is no longer valid

    run(tmp_path, scenario)


def test_a_pending_member_that_never_rejoins_expires_after_its_session_timeout(tmp_path: Path) -> None:
    """Kafka's pending-member expiry (docs/broker-coordinated-consumer.md, "Joins wait for pending members"):
    the join completes without the pending member once its session timeout has passed, well before the
    rebalance timeout (10 s here), and its id is then unknown."""
    async def scenario(c: GroupCoordinator) -> None:
        a_id = (await join(c, require_known=True)).member_id
        gone_id = (await join(c, require_known=True, session_ms=200)).member_id
        a = await within(join(c, a_id), timeout=5.0)
        group = c._groups[GROUP]
        # the join completed because the pending member expired, not because the join ignored it
        assert gone_id not in group.pending_members and gone_id not in group.members
        assert (a.error_code, a.generation_id, a.leader, a.members) == (NONE, 1, a_id, [(a_id, None, b"m")])
        assert (await join(c, gone_id)).error_code == UNKNOWN_MEMBER_ID

    run(tmp_path, scenario)
