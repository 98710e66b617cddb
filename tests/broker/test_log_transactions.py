"""Transactions in one partition log: markers, the last stable offset, the aborted-transaction index and their
state across a clean close, a crash (replay) and truncation (after Kafka's UnifiedLogTest and
TransactionIndexTest); the coordinator's state machine and records; the consumer's aborted-batch filter
(docs/transactions.md)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from metaq.broker.coordinator.txn_state import (
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_COMMIT,
    InvalidTransition,
    TxnMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.producer_state import decode_snapshot
from metaq.broker.log.txn_index import AbortedTxn
from metaq.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
from metaq.protocol.batches import assign_offsets, validate_batches
from metaq.protocol.control import aborted_ranges, build_marker, marker_is_abort
from metaq.protocol.records import decode_records
from tests.broker import make_batch, make_values

A, B = 5000, 6000  # two transactional producers


def open_log(directory: Path, *, recover: bool = False, **config: int) -> PartitionLog:
    defaults = {"segment_bytes": 100_000, "index_interval_bytes": 200}
    return PartitionLog.open(directory / "t-0", "t", 0, LogConfig(**(defaults | config)), recover=recover)


def txn_batch(pid: int, seq: int, count: int = 2, epoch: int = 0) -> bytes:
    return make_batch(make_values(count, tag=f"{pid}-{seq}-"), transactional=True, producer=(pid, epoch, seq),
                      base_ts=int(time.time() * 1000))


def test_markers_move_the_lso_and_index_aborts(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(A, 0))  # A: 0..1
    log.append(txn_batch(B, 0))  # B: 2..3
    assert log.last_stable_offset(log.log_end_offset) == 0
    log.append_marker(A, 0, commit=False, coordinator_epoch=0)  # abort A @4
    assert log.last_stable_offset(log.log_end_offset) == 2  # B still open
    log.append_marker(B, 0, commit=True, coordinator_epoch=0)  # commit B @5
    assert log.last_stable_offset(log.log_end_offset) == 6
    assert log.aborted_transactions(0, 6) == [AbortedTxn(0, A, 4, 2)]
    assert log.aborted_transactions(5, 6) == []  # ended before 5
    assert log.last_stable_offset(3) == 3  # never above the high watermark
    log.close()


def test_open_transactions_and_the_index_survive_a_clean_close_and_a_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(A, 0))
    log.append_marker(A, 0, commit=False, coordinator_epoch=0)  # aborted 0..2
    log.append(txn_batch(B, 0))  # open from 3
    log.close()
    entries = decode_snapshot(next((tmp_path / "t-0").glob("*.snapshot")).read_bytes())
    assert {e.producer_id: e.current_txn_first_offset for e in entries} == {A: -1, B: 3}
    log = open_log(tmp_path)
    assert log.last_stable_offset(log.log_end_offset) == 3
    assert log.aborted_transactions(0, 5) == [AbortedTxn(0, A, 2, 3)]
    log.close()
    # a crash: no snapshot at the log end, the .txnindex lost; both rebuilt by replaying the log
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    for path in (tmp_path / "t-0").glob("*.txnindex"):
        path.unlink()
    log = open_log(tmp_path, recover=True)
    assert log.last_stable_offset(log.log_end_offset) == 3
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, 5)] == [(A, 0, 2)]
    log.close()


def test_truncation_forgets_aborts_past_the_cut(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(A, 0))
    log.append_marker(A, 0, commit=False, coordinator_epoch=0)  # marker @2
    log.truncate_to(2)
    assert log.aborted_transactions(0, 10) == []
    assert log.last_stable_offset(log.log_end_offset) == 0  # A's transaction is open again
    log.close()


def test_stale_markers_are_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(A, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(A, 2, commit=True, coordinator_epoch=0)
    log.append_marker(A, 4, commit=False, coordinator_epoch=5)  # a fencing abort with a bumped epoch
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(A, 4, commit=False, coordinator_epoch=4)
    with pytest.raises(InvalidProducerEpochError):  # the fenced producer's next batch
        log.append(txn_batch(A, 2, epoch=3))
    log.close()


def test_marker_records_and_the_consumer_filter() -> None:
    assert marker_is_abort(build_marker(A, 0, commit=False, coordinator_epoch=1, timestamp_ms=0)) is True
    assert marker_is_abort(build_marker(A, 0, commit=True, coordinator_epoch=1, timestamp_ms=0)) is False
    # as a log stores them: A 0..1, its abort marker 2, B 3..4, its commit marker 5
    stored = bytearray()
    offset = 0
    for piece in (txn_batch(A, 0), build_marker(A, 0, False, 0, 0), txn_batch(B, 0), build_marker(B, 0, True, 0, 0)):
        buf = bytearray(piece)
        offset = assign_offsets(buf, validate_batches(buf), offset)
        stored += buf
    assert aborted_ranges(bytes(stored), [SimpleNamespace(producer_id=A, first_offset=0)]) == [(0, 1)]
    assert aborted_ranges(bytes(stored), []) == []
    # control records are never decoded as records
    assert [r[0] for r in decode_records(bytes(stored)).records] == [0, 1, 3, 4]


def test_coordinator_states_and_records() -> None:
    txn = TxnMetadata("tid", 42, 0, 60000)
    ongoing = txn.transition(ONGOING, 10, partitions=frozenset({("t", 0), ("t", 1)}), start_ms=10)
    assert decode_value("tid", encode_value(ongoing)) == ongoing
    assert decode_key(encode_key("tid")) == "tid"
    prepared = ongoing.transition(PREPARE_COMMIT, 11)
    with pytest.raises(InvalidTransition):
        prepared.transition(EMPTY, 12)  # markers first
    assert prepared.transition(COMPLETE_COMMIT, 12).state == COMPLETE_COMMIT


def test_a_follower_builds_the_same_transaction_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append(txn_batch(A, 0))
    leader.append_marker(A, 0, commit=False, coordinator_epoch=0)
    leader.append(txn_batch(B, 0))  # open
    piece = leader.read(0, 1 << 20)
    assert piece is not None
    follower = open_log(tmp_path / "follower")
    follower.append_replica(piece.read_bytes())
    assert follower.last_stable_offset(follower.log_end_offset) == leader.last_stable_offset(leader.log_end_offset) == 3
    assert follower.aborted_transactions(0, 10) == leader.aborted_transactions(0, 10) == [AbortedTxn(0, A, 2, 3)]
    leader.close()
    follower.close()
