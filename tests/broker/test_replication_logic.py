"""The pure logic of replication: leader election, the high watermark, ISR lag, and the follower's log
operations (append keeping the leader's offsets, truncation, reads bounded by the high watermark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.replication.election import elect, elect_preferred, imbalanced_brokers, initial_state
from metaq.broker.replication.leader_epochs import LeaderEpochCache
from metaq.broker.replication.partition_state import LeaderState, high_watermark
from metaq.errors import StorageError
from metaq.protocol.batches import valid_prefix
from tests.broker import decode, make_batch, make_values
from zk_layout import PartitionState


def _state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


# -- election ------------------------------------------------------------------------------------------


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() -> None:
    new = elect(_state(1, (1, 0, 2)), (1, 2, 0), live={0, 2}, controller_epoch=3)
    assert new == PartitionState(leader=2, leader_epoch=6, isr=(0, 2), controller_epoch=3)


def test_a_replica_outside_the_isr_is_never_elected_cleanly() -> None:
    new = elect(_state(1, (1, 2)), (1, 2, 0), live={0}, controller_epoch=3)
    assert new is not None and new.leader == -1 and new.isr == (1, 2) and new.leader_epoch == 6
    assert elect(new, (1, 2, 0), live={0}, controller_epoch=3) is None  # already offline: no rewrite


def test_unclean_election_takes_any_live_replica() -> None:
    new = elect(_state(1, (1,)), (1, 2, 0), live={0, 2}, controller_epoch=3, unclean=True)
    assert new is not None and new.leader == 2 and new.isr == (2,)


def test_an_offline_partition_gets_its_last_isr_member_back() -> None:
    offline = _state(-1, (1,), epoch=7)
    new = elect(offline, (0, 1, 2), live={0, 1}, controller_epoch=4)
    assert new == PartitionState(leader=1, leader_epoch=8, isr=(1,), controller_epoch=4)


def test_a_dead_follower_leaves_the_isr_without_a_new_epoch() -> None:
    new = elect(_state(0, (0, 1, 2)), (0, 1, 2), live={0, 1}, controller_epoch=2)
    assert new == PartitionState(leader=0, leader_epoch=5, isr=(0, 1), controller_epoch=2)
    assert elect(_state(0, (0, 1, 2)), (0, 1, 2), live={0, 1, 2}, controller_epoch=2) is None


def test_preferred_election_needs_the_first_replica_alive_and_in_sync() -> None:
    assert elect_preferred(_state(2, (2, 0)), (0, 1, 2), live={0, 1, 2}, controller_epoch=3) == PartitionState(
        leader=0, leader_epoch=6, isr=(2, 0), controller_epoch=3)
    assert elect_preferred(_state(2, (2, 1)), (0, 1, 2), live={0, 1, 2}, controller_epoch=3) is None  # not in sync
    assert elect_preferred(_state(2, (2, 0)), (0, 1, 2), live={1, 2}, controller_epoch=3) is None  # dead
    assert elect_preferred(_state(0, (0, 2)), (0, 1, 2), live={0, 1, 2}, controller_epoch=3) is None  # leads


def test_brokers_leading_too_few_of_their_preferred_partitions_are_imbalanced() -> None:
    leaders = {("t", p): (leader, replicas) for p, (leader, replicas) in enumerate([
        (0, (0, 1, 2)), (1, (0, 1, 2)),  # broker 0 prefers two partitions and lost one: 50 %
        (1, (1, 2, 0)), (1, (1, 0, 2)), (1, (1, 2, 0)), (1, (1, 0, 2)), (1, (1, 2, 0)),
        (1, (1, 0, 2)), (1, (1, 2, 0)), (1, (1, 0, 2)), (1, (1, 2, 0)), (2, (1, 0, 2)),  # broker 1: 1 of 10
        (0, (2, 0, 1)),  # broker 2: 100 %, but it is dead
    ])}
    assert imbalanced_brokers(leaders, live={0, 1}, percentage=10) == {0}
    assert imbalanced_brokers(leaders, live={0, 1}, percentage=50) == set()
    assert imbalanced_brokers(leaders, live={0, 1, 2}, percentage=10) == {0, 2}


# -- high watermark and lag ----------------------------------------------------------------------------


def test_high_watermark_is_the_smallest_isr_leo_and_never_moves_back() -> None:
    assert high_watermark(0, 0, 10, (0, 1, 2), {1: 7, 2: 9}) == 7
    assert high_watermark(8, 0, 10, (0, 1, 2), {1: 7, 2: 9}) == 8
    assert high_watermark(0, 0, 10, (0, 2), {1: 3, 2: 9}) == 9  # 1 is out of the ISR: it does not hold it back
    assert high_watermark(4, 0, 10, (0, 1), {}) == 4  # a follower not heard from yet counts as at the HW
    assert high_watermark(0, 0, 10, (0,), {}) == 10  # the leader alone


def test_leader_state_tracks_followers_and_lag() -> None:
    state = LeaderState(broker_id=0, leader_epoch=1, hw=0, started_ms=1000, epoch_start_offset=0)
    state.record_fetch(1, 5, leader_leo=10, now_ms=2000)
    state.record_fetch(2, 10, leader_leo=10, now_ms=2000)
    assert state.update_hw(10, (0, 1, 2)) and state.hw == 5
    assert state.lagging((0, 1, 2), now_ms=4500, max_lag_ms=3000) == [1]  # 1 was never caught up since 1000
    assert state.caught_up((0, 1, 2), (0, 2)) == [1]  # out of the ISR, but at the HW
    # reached the leader's LEO of its previous fetch: caught up as of that fetch (2000), not of this one
    state.record_fetch(1, 10, leader_leo=12, now_ms=4900)
    assert state.lagging((0, 1, 2), now_ms=4900, max_lag_ms=3000) == []
    assert state.lagging((0, 1, 2), now_ms=5500, max_lag_ms=3000) == [1, 2]
    state.record_fetch(1, 12, leader_leo=12, now_ms=5500)
    assert state.lagging((0, 1, 2), now_ms=5500, max_lag_ms=3000) == [2]


# -- follower log operations ---------------------------------------------------------------------------


def _log(tmp_path: Path, name: str = "t-0") -> PartitionLog:
    return PartitionLog.open(tmp_path / name, "t", 0, LogConfig(segment_bytes=1000), recover=False)


def test_a_follower_appends_the_leaders_batches_at_the_leaders_offsets(tmp_path: Path) -> None:
    leader = _log(tmp_path, "leader-0")
    follower = _log(tmp_path, "follower-0")
    for i in range(6):
        leader.append(make_batch(make_values(3, 40, tag=f"b{i}-")))
    position = 0
    while position < leader.log_end_offset:
        piece = leader.read(position, 300)
        assert piece is not None
        data = piece.read_bytes()
        follower.append_replica(data[:valid_prefix(data)[0]])  # as the fetcher: whole batches only
        position = follower.log_end_offset
    assert follower.log_end_offset == leader.log_end_offset == 18
    assert follower.segment_count() > 1
    assert decode(follower.read(0, 1 << 20).read_bytes()) == decode(leader.read(0, 1 << 20).read_bytes())
    with pytest.raises(StorageError, match="does not continue the log at 18"):
        follower.append_replica(leader.read(3, 100).read_bytes())


def test_truncation_drops_whole_batches_and_later_segments(tmp_path: Path) -> None:
    plog = _log(tmp_path)
    for i in range(6):
        plog.append(make_batch(make_values(3, 40, tag=f"b{i}-")))
    assert plog.segment_count() > 1
    assert plog.truncate_to(7) == 6  # offset 7 is inside the batch 6..8: the batch goes
    assert plog.log_end_offset == 6 and max(plog.segment_base_offsets()) <= 6
    assert [offset for offset, *_ in decode(plog.read(0, 1 << 20).read_bytes())] == list(range(6))
    assert plog.append(make_batch(make_values(2, 40, tag="new-"))).base_offset == 6
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=1000), recover=True)
    assert reopened.log_end_offset == 8


def test_consumer_reads_stop_at_the_high_watermark(tmp_path: Path) -> None:
    plog = _log(tmp_path)
    for i in range(4):
        plog.append(make_batch(make_values(2, 20, tag=f"b{i}-")))
    assert plog.read(0, 1 << 20, max_offset=0) is None
    piece = plog.read(0, 1 << 20, max_offset=4)
    assert piece is not None and [o for o, *_ in decode(piece.read_bytes())] == [0, 1, 2, 3]
    assert plog.read(4, 1 << 20, max_offset=4) is None
    whole = plog.read(0, 1 << 20)
    assert whole is not None and len(decode(whole.read_bytes())) == 8


# -- leader epochs (KIP-101) ---------------------------------------------------------------------------


def test_epoch_lookup_answers_the_start_of_the_next_epoch(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == (-1, -1)  # nothing known
    assert cache.assign(0, 0) and cache.assign(2, 10) and cache.assign(5, 25)
    assert not cache.assign(4, 30)  # older than the latest: ignored
    assert cache.end_offset_for(0, 40) == (0, 10)
    assert cache.end_offset_for(1, 40) == (0, 10)  # epoch 1 never led here: the largest epoch below it
    assert cache.end_offset_for(2, 40) == (2, 25)
    assert cache.end_offset_for(5, 40) == (5, 40)  # the latest epoch ends at the log end
    assert cache.end_offset_for(9, 40) == (5, 40)
    assert LeaderEpochCache.load(tmp_path).entries == [(0, 0), (2, 10), (5, 25)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n5 25\n"


def test_epochs_that_began_past_a_truncation_are_forgotten(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path, [(0, 0), (2, 10), (5, 25)])
    cache.truncate_from_end(25)
    assert cache.entries == [(0, 0), (2, 10)]
    assert cache.assign(6, 10)  # a new epoch starting where epoch 2 did (it wrote nothing) replaces it
    assert LeaderEpochCache.load(tmp_path).entries == [(0, 0), (6, 10)]


def test_an_unreadable_epoch_file_is_treated_as_empty(tmp_path: Path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("garbage")
    assert LeaderEpochCache.load(tmp_path).entries == []


def test_the_leader_stamps_its_epoch_into_appended_batches(tmp_path: Path) -> None:
    plog = _log(tmp_path)
    plog.append(make_batch(make_values(2, 20)), leader_epoch=7)
    plog.append(make_batch(make_values(2, 20)))
    piece = plog.read(0, 1 << 20)
    assert piece is not None
    epochs = [h.partition_leader_epoch for h in valid_prefix(piece.read_bytes())[1]]  # CRCs still valid
    assert epochs[0] == 7 and epochs[1] != 7


def test_a_follower_below_the_leaders_log_start_restarts_its_log_there(tmp_path: Path) -> None:
    plog = _log(tmp_path)
    for i in range(6):
        plog.append(make_batch(make_values(3, 40, tag=f"b{i}-")))
    plog.truncate_fully_and_start_at(40)
    assert (plog.log_start_offset, plog.log_end_offset, plog.segment_base_offsets()) == (40, 40, [40])
    assert plog.append(make_batch(make_values(2, 20))).base_offset == 40
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=1000), recover=True)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (40, 42)


def test_initial_state_of_a_partition_another_tool_created() -> None:
    """Kafka's NewPartition -> OnlinePartition: the first live replica in assignment order leads, every live
    replica is in the ISR, leader epoch 0; no state while no replica is alive."""
    assert initial_state((2, 0, 1), {0, 1}, controller_epoch=4) == PartitionState(
        leader=0, leader_epoch=0, isr=(0, 1), controller_epoch=4)
    assert initial_state((0,), {0}, controller_epoch=1) == PartitionState(
        leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)
    assert initial_state((3, 4), {0, 1}, controller_epoch=1) is None
