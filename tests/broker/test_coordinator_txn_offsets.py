"""Transactional offset commits in a ``__consumer_offsets`` partition (docs/transactions.md section 2): written
to the log at once inside the producer's transaction, the group's only at the commit marker, dropped at the
abort marker, and rebuilt by a replay (a coordinator restart or failover) from the batches and markers it finds.
Before, they were held in memory only: a replay between TxnOffsetCommit and the marker lost them."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaq.broker.coordinator.offsets_partition import LOADED, CommittedOffset, OffsetsPartition
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import InvalidProducerEpochError

PID, EPOCH = 4000, 3


def _loaded(directory: Path) -> OffsetsPartition:
    part = OffsetsPartition(PartitionLog.open(directory, OFFSETS_TOPIC, 0, LogConfig(), recover=False))
    part.load()
    assert part.state == LOADED
    return part


def _offset(offset: int) -> CommittedOffset:
    return CommittedOffset(offset, "", 1_700_000_000_000)


def _txn_commit(part: OffsetsPartition, offset: int, producer_id: int = PID, epoch: int = EPOCH) -> None:
    part.append_txn_commits(producer_id, epoch, "g", {("t", 0): _offset(offset)})


def _marker(part: OffsetsPartition, commit: bool, producer_id: int = PID, epoch: int = EPOCH) -> None:
    part.log.append_marker(producer_id, epoch, commit, 0)
    part.end_txn(producer_id, commit)


def _committed(part: OffsetsPartition) -> int | None:
    found = part.fetch("g", [("t", 0)]).get(("t", 0))
    return None if found is None else found.offset


def test_pending_until_commit_marker_then_replayed(tmp_path: Path) -> None:
    part = _loaded(tmp_path)
    part.append_commits("g", {("t", 0): _offset(5)})
    _txn_commit(part, 10)
    assert _committed(part) == 5  # not before the marker
    _txn_commit(part, 12)  # a second TxnOffsetCommit of the same transaction (same epoch, no sequence clash)
    _marker(part, commit=True)
    assert _committed(part) == 12
    _txn_commit(part, 20)
    _marker(part, commit=False)
    assert _committed(part) == 12
    part.log.close()

    replayed = _loaded(tmp_path)
    assert _committed(replayed) == 12
    assert replayed.pending == {}


def test_open_transaction_survives_a_replay_and_ends_with_its_marker(tmp_path: Path) -> None:
    part = _loaded(tmp_path)
    _txn_commit(part, 7)
    part.log.close()

    taken_over = _loaded(tmp_path)  # a new coordinator between TxnOffsetCommit and the marker
    assert _committed(taken_over) is None
    assert taken_over.pending == {PID: {"g": {("t", 0): _offset(7)}}}
    _marker(taken_over, commit=True)
    assert _committed(taken_over) == 7
    taken_over.log.close()
    assert _committed(_loaded(tmp_path)) == 7


def test_abort_of_a_replayed_transaction_drops_its_offsets(tmp_path: Path) -> None:
    part = _loaded(tmp_path)
    _txn_commit(part, 7)
    _txn_commit(part, 9, producer_id=PID + 1)
    part.log.close()
    taken_over = _loaded(tmp_path)
    _marker(taken_over, commit=False)
    _marker(taken_over, commit=True, producer_id=PID + 1)
    assert _committed(taken_over) == 9
    taken_over.log.close()
    assert _committed(_loaded(tmp_path)) == 9


def test_fenced_producer_cannot_add_offsets(tmp_path: Path) -> None:
    part = _loaded(tmp_path)
    _txn_commit(part, 7)
    _marker(part, commit=False, epoch=EPOCH + 1)  # a fencing abort with the bumped epoch
    with pytest.raises(InvalidProducerEpochError):
        _txn_commit(part, 8)
    assert part.pending == {}


def test_a_plain_commit_after_the_transactional_one_wins_at_the_marker(tmp_path: Path) -> None:
    """Kafka's olderThan: the transaction's offset replaces the group's only if it was appended later."""
    part = _loaded(tmp_path)
    part.append_commits("g", {("t", 1): _offset(1)})
    part.append_txn_commits(PID, EPOCH, "g", {("t", 0): _offset(10), ("t", 1): _offset(11)})
    part.append_commits("g", {("t", 0): _offset(3)})  # after TxnOffsetCommit, before the marker
    _marker(part, commit=True)
    assert (_committed(part), part.fetch("g", [("t", 1)])[("t", 1)].offset) == (3, 11)
    part.log.close()
    replayed = _loaded(tmp_path)
    assert (_committed(replayed), replayed.fetch("g", [("t", 1)])[("t", 1)].offset) == (3, 11)
