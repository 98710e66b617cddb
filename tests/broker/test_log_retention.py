"""Retention by time and size: whole segments, oldest first, delayed removal."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import OffsetOutOfRangeError
from tests.broker import decode, make_batch, make_values

HOUR = 3600 * 1000


def open_log(directory: Path, **config: int) -> PartitionLog:
    defaults = {"segment_bytes": 1000, "segment_delete_delay_ms": 60_000}
    return PartitionLog.open(directory / "t-0", "t", 0, LogConfig(**(defaults | config)), recover=False)


def fill_with_times(log: PartitionLog, times: list[int]) -> None:
    for ts in times:
        log.append(make_batch(make_values(3, 60), base_ts=ts), now_ms=ts)


def test_retention_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=10 * HOUR)
    fill_with_times(log, [i * HOUR for i in range(30)])
    bases = log.segment_base_offsets()
    assert len(bases) > 5
    end = log.log_end_offset
    now = 35 * HOUR
    deleted = log.delete_old_segments(now)
    assert deleted > 0
    assert log.segment_base_offsets() == bases[deleted:]
    assert log.log_start_offset == bases[deleted]
    assert log.log_end_offset == end
    # Every remaining segment holds a record newer than the retention limit; the deleted ones did not.
    first = log.read(log.log_start_offset, 1 << 20)
    assert first is not None and max(ts for _, ts, _ in decode(first.read_bytes())) >= now - 10 * HOUR
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[deleted] - 1, 100)
    assert log.delete_old_segments(now) == 0
    log.close()


def test_deleted_files_removed_after_delay(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=HOUR, segment_delete_delay_ms=1000)
    fill_with_times(log, [i * 60_000 for i in range(20)])
    piece = log.read(0, 1 << 20)
    assert piece is not None
    expected = piece.read_bytes()
    now = 100 * HOUR
    deleted = log.delete_old_segments(now)
    directory = log.directory
    assert len(list(directory.glob("*.log.deleted"))) == deleted
    assert len(list(directory.glob("*.index.deleted"))) == deleted
    assert len(list(directory.glob("*.timeindex.deleted"))) == deleted
    assert piece.read_bytes() == expected  # an outstanding slice still works until the real removal
    log.delete_old_segments(now + 999)
    assert list(directory.glob("*.deleted"))
    log.delete_old_segments(now + 1000)
    assert not list(directory.glob("*.deleted"))
    log.close()


def test_everything_expired_keeps_an_empty_active_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=HOUR)
    fill_with_times(log, [0, 1000, 2000])
    end = log.log_end_offset
    assert log.delete_old_segments(10 * HOUR) == 1
    assert log.segment_base_offsets() == [end]
    assert log.log_start_offset == log.log_end_offset == end
    assert log.read(end, 100) is None
    assert log.delete_old_segments(20 * HOUR) == 0  # an empty last segment is never deleted
    assert log.append(make_batch([b"x"]), now_ms=20 * HOUR).base_offset == end
    log.close()


def test_retention_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=3000)
    fill_with_times(log, [i * 1000 for i in range(40)])
    sizes = [seg.size for seg in log._segments]
    total = sum(sizes)
    deleted = log.delete_old_segments(10**12)
    assert deleted > 0
    # Kafka's rule: delete oldest segments only while the log stays at or above retention_bytes.
    assert log.size_bytes() >= 3000 > log.size_bytes() - sizes[deleted]
    assert total - sum(sizes[:deleted]) == log.size_bytes()
    assert log.log_start_offset == log.segment_base_offsets()[0]
    log.close()


def test_unlimited_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=-1)
    fill_with_times(log, [0, 1, 2, 3, 4, 5])
    count = log.segment_count()
    assert log.delete_old_segments(10**15) == 0 and log.segment_count() == count
    log.close()


def test_recovery_point_not_below_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=HOUR)
    fill_with_times(log, [i * 1000 for i in range(20)] + [10 * HOUR])
    log.delete_old_segments(10 * HOUR + 1)
    assert log.recovery_point >= log.log_start_offset > 0
    log.close()


def test_reopen_after_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=HOUR)
    fill_with_times(log, [i * 1000 for i in range(20)] + [10 * HOUR])
    log.delete_old_segments(10 * HOUR + 1)
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    assert not list((tmp_path / "t-0").glob("*.deleted"))  # close removes pending deletions
    reopened = open_log(tmp_path)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
    reopened.close()
