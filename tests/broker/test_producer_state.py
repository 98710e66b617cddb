"""Idempotent producers on one partition log: deduplication, sequence and epoch checks, snapshots, replay and
truncation (after Kafka's ProducerStateManagerTest and UnifiedLogTest)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.producer_state import (
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)
from metaq.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from metaq.protocol.batches import INT32_MAX, increment_sequence
from tests.broker import make_batch, make_values

PID = 4000


def open_log(directory: Path, *, recover: bool = False, **config: int) -> PartitionLog:
    defaults = {"segment_bytes": 100_000, "index_interval_bytes": 200}
    return PartitionLog.open(directory / "t-0", "t", 0, LogConfig(**(defaults | config)), recover=recover)


def batch(seq: int, count: int = 3, *, epoch: int = 0, pid: int = PID, base_ts: int | None = None) -> bytes:
    """Timestamped now unless told: a producer's state expires by its batches' timestamps."""
    return make_batch(make_values(count, tag=f"{pid}-{epoch}-{seq}-"), producer=(pid, epoch, seq),
                      base_ts=int(time.time() * 1000) if base_ts is None else base_ts)


def record_count(log: PartitionLog) -> int:
    return log.log_end_offset - log.log_start_offset


def test_a_resent_batch_answers_the_original_offsets_and_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(batch(0))
    second = log.append(batch(3))
    again = log.append(batch(0))
    assert (again.base_offset, again.last_offset, again.duplicate) == (first.base_offset, first.last_offset, True)
    assert log.append(batch(3)).base_offset == second.base_offset
    assert record_count(log) == 6


def test_only_the_last_five_batches_are_recognised(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(6):
        log.append(batch(i, count=1))
    assert log.append(batch(1, count=1)).duplicate  # among the last five
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(0, count=1))  # forgotten: it is a sequence that does not follow 5


def test_a_gap_and_a_stale_epoch_are_refused_and_append_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(0, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(5, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(3, epoch=2))  # a new epoch starts at sequence 0
    assert log.append(batch(0, epoch=2)).base_offset == 3
    assert record_count(log) == 6


def test_an_unknown_producer_may_start_at_any_sequence_as_in_kafka_3(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert not log.append(batch(42)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(50))


def test_sequences_wrap_at_int32_max(tmp_path: Path) -> None:
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    log = open_log(tmp_path)
    log.append(batch(INT32_MAX - 1, count=2))
    wrapped = log.append(batch(0, count=2))
    assert log.append(batch(0, count=2)).base_offset == wrapped.base_offset


def test_state_survives_a_clean_restart_through_its_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(batch(0))
    log.close()
    assert (tmp_path / "t-0" / f"{3:020d}.snapshot").exists()
    log = open_log(tmp_path)
    assert log.append(batch(0)).base_offset == first.base_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(4))


def test_state_is_replayed_from_the_log_after_an_unclean_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    spans = [log.append(batch(3 * i)) for i in range(8)]  # several rolls, each with a snapshot
    assert log.segment_count() > 2
    log._close_files()  # a crash: no snapshot at the end
    log = open_log(tmp_path, recover=True, segment_bytes=400)
    for i in range(3, 8):  # the last five batches, partly replayed from the tail after the last snapshot
        assert log.append(batch(3 * i)).base_offset == spans[i].base_offset
    assert log.append(batch(24)).base_offset == spans[-1].last_offset + 1


def test_truncation_forgets_the_cut_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    spans = [log.append(batch(3 * i)) for i in range(6)]
    log.truncate_to(spans[2].base_offset)
    result = log.append(batch(6))  # the cut batch is no longer a duplicate: it is appended again
    assert (result.duplicate, result.base_offset) == (False, spans[2].base_offset)


def test_a_follower_builds_the_same_state_as_its_leader(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    result = leader.append(batch(0))
    sliced = leader.read(0, 1 << 20)
    assert sliced is not None
    follower.append_replica(sliced.read_bytes())
    assert follower.append(batch(0)).base_offset == result.base_offset
    assert follower.producer_state.producers[PID].last_seq == 2


def test_expired_producers_are_forgotten(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=1000)
    log.append(batch(0, base_ts=1_600_000_000_000))
    assert log.remove_expired_producers(now_ms=1_600_000_000_500) == 0
    assert log.remove_expired_producers(now_ms=1_600_000_002_000) == 1
    assert not log.append(batch(0)).duplicate


def test_snapshot_encoding_is_kafkas_version_1() -> None:
    entry = ProducerEntry(9)
    entry.add(2, BatchMetadata(5, 7, 100, 102, 1234))
    data = encode_snapshot([entry])
    assert data[:2] == b"\x00\x01" and len(data) == 2 + 4 + 4 + 46
    (loaded,) = decode_snapshot(data)
    assert (loaded.producer_id, loaded.epoch, list(loaded.batches)) == (9, 2, [BatchMetadata(5, 7, 100, 102, 1234)])
    with pytest.raises(ValueError, match="CRC"):
        decode_snapshot(data[:-1] + b"\x01")


def test_retention_deletes_snapshots_with_their_segments_and_keeps_the_state(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, segment_delete_delay_ms=0)
    spans = [log.append(batch(3 * i)) for i in range(8)]
    snapshots = log.producer_state.snapshot_offsets()
    assert snapshots == log.segment_base_offsets()[1:]  # one per roll, at the new segment's base
    log.delete_records_before(spans[5].base_offset, now_ms=0)
    assert all(offset >= log.segment_base_offsets()[0] for offset in log.producer_state.snapshot_offsets())
    assert log.append(batch(21)).base_offset == spans[7].base_offset  # still deduplicated
    log.close()
    log = open_log(tmp_path, segment_bytes=400)
    assert log.append(batch(21)).base_offset == spans[7].base_offset  # and after a restart


def test_a_clean_shutdowns_snapshot_is_loaded_without_replay_a_crash_replays_from_the_one_before(
        tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, "t-0", expiration_ms=10**12)
    for offset in (3, 6):
        state.map_end_offset = offset
        state.take_snapshot()
    assert state.load_snapshot(0, 6, now_ms=0) == 6  # a snapshot at the log end: a clean shutdown's
    assert state.load_snapshot(0, 9, now_ms=0) == 3  # the log goes on after the newest: a crash
