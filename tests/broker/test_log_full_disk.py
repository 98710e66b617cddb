"""A full disk at the segment level: failed or short appends are rolled back to the last good batch, and
recovery keeps later segments when an earlier one has a torn tail."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from metaq.broker.log.index import OffsetIndex
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import StorageError
from tests.broker import make_batch, make_values
from tests.broker.log_helpers import assert_fully_readable, batch_positions, fill, open_log

SEG0 = "00000000000000000000"


class FullDisk:
    """Replaces ``os.pwrite``/``os.ftruncate``: while armed, writes get only ``free`` more bytes in all
    (short write, then ENOSPC, as Linux does), and truncation fails with EIO if ``truncate_fails``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.free: int | None = None
        self.truncate_fails = False
        self.short_writes = 0
        real_pwrite, real_ftruncate = os.pwrite, os.ftruncate

        def pwrite(fd: int, data: bytes, position: int) -> int:
            if self.free is None:
                return real_pwrite(fd, data, position)
            if self.free == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = real_pwrite(fd, bytes(data[: self.free]), position)
            self.free -= n
            self.short_writes += n < len(data)
            return n

        def ftruncate(fd: int, size: int) -> None:
            if self.truncate_fails:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real_ftruncate(fd, size)

        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "ftruncate", ftruncate)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    yield FullDisk(monkeypatch)


def active_log_file(log: PartitionLog) -> Path:
    return log.directory / f"{log.segment_base_offsets()[-1]:020d}.log"


def big_batch(tag: str) -> bytes:
    return make_batch(make_values(10, 100, tag=tag))


def test_short_write_is_cut_back_and_next_append_follows_last_good_batch(tmp_path: Path, disk: FullDisk) -> None:
    log = open_log(tmp_path, recover=False)
    fill(log, 20)
    path = active_log_file(log)
    good_size, end = path.stat().st_size, log.log_end_offset
    disk.free = 300  # less than the batch: the first pwrite is short, the retry of the rest gets ENOSPC
    with pytest.raises(StorageError, match="No space left on device"):
        log.append(big_batch("lost"))
    assert disk.short_writes == 1
    assert path.stat().st_size == good_size  # rolled back to the logical size
    assert log.log_end_offset == end and log.size_bytes() == good_size
    disk.free = None
    small = make_batch([b"next"])  # shorter than the failed batch: would leave its tail behind if not cut
    assert log.append(small).base_offset == end
    assert path.stat().st_size == good_size + len(small)
    assert batch_positions(path)[-1][:2] == (good_size, end)
    # crash and recover: nothing to cut, every offset readable
    reopened = open_log(tmp_path, recover=True)
    assert reopened.log_end_offset == end + 1
    assert path.stat().st_size == good_size + len(small)
    assert_fully_readable(reopened)
    reopened.close()
    log.close()


def torn_append(tmp_path: Path, disk: FullDisk, batches: int, **config: int) -> tuple[PartitionLog, Path, int, int]:
    """A log whose last append hit a full disk and could not even be cut back: ``(log, active .log file,
    its good size, log end offset)``; the disk has room again, truncation still fails."""
    log = open_log(tmp_path, recover=False, **config)
    fill(log, batches)
    path = active_log_file(log)
    good_size, end = path.stat().st_size, log.log_end_offset
    disk.free, disk.truncate_fails = 300, True
    with pytest.raises(StorageError):
        log.append(big_batch("lost"))
    disk.free = None
    return log, path, good_size, end


def test_failed_cut_is_retried_before_the_next_write(tmp_path: Path, disk: FullDisk) -> None:
    log, path, good_size, end = torn_append(tmp_path, disk, 20)
    assert path.stat().st_size == good_size + 300  # could not be cut yet
    with pytest.raises(StorageError, match="cannot truncate"):  # still cannot cut: write nothing after it
        log.append(make_batch([b"refused"]))
    assert path.stat().st_size == good_size + 300 and log.log_end_offset == end
    disk.truncate_fails = False
    small = make_batch([b"next"])
    assert log.append(small).base_offset == end
    assert path.stat().st_size == good_size + len(small)
    log.close()


def test_roll_cuts_a_failed_append_left_in_the_old_segment(tmp_path: Path, disk: FullDisk) -> None:
    log, path, good_size, end = torn_append(tmp_path, disk, 10, segment_bytes=3000)
    disk.truncate_fails = False
    large = make_batch(make_values(12, 150, tag="roll"))
    assert good_size + len(large) > 3000  # so this append rolls
    assert log.append(large).base_offset == end
    assert log.segment_base_offsets()[-1] == end
    assert path.stat().st_size == good_size  # the rolled segment ends exactly where the next one begins
    log.close()


def test_roll_cuts_bytes_past_the_logical_size(tmp_path: Path) -> None:
    """Deactivation cuts the file to its logical size whatever left the bytes there."""
    log = open_log(tmp_path, recover=False, segment_bytes=3000)
    fill(log, 10)
    path = active_log_file(log)
    good_size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(big_batch("stray")[:200])
    log.append(make_batch(make_values(12, 150, tag="roll")))
    assert len(log.segment_base_offsets()) == 2
    assert path.stat().st_size == good_size
    log.close()


def test_index_write_failure_rolls_back_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path, recover=False, index_interval_bytes=0)
    fill(log, 5)
    path = active_log_file(log)
    good_size, end = path.stat().st_size, log.log_end_offset
    index_file = log.directory / f"{SEG0}.index"
    entries = index_file.stat().st_size
    real_write = OffsetIndex._write_entry

    def failing(self: OffsetIndex, data: bytes, count: int) -> None:
        real_write(self, data[:3], count)  # a partial entry, as a short write leaves it
        raise StorageError(f"cannot write index {self.path}: No space left on device")

    monkeypatch.setattr(OffsetIndex, "_write_entry", failing)
    with pytest.raises(StorageError):
        log.append(big_batch("lost"))
    assert path.stat().st_size == good_size and index_file.stat().st_size == entries
    monkeypatch.undo()
    assert log.append(big_batch("kept")).base_offset == end
    reopened = open_log(tmp_path, recover=False, index_interval_bytes=0)  # trusted load: indexes are sane
    assert reopened.log_end_offset == end + 10
    assert_fully_readable(reopened)
    reopened.close()
    log.close()


@pytest.mark.parametrize("recover", [True, False])
def test_torn_tail_of_a_middle_segment_keeps_later_segments(
    tmp_path: Path, recover: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The full-disk sequence on disk: a failed append's partial batch stayed in a segment that then rolled.
    The segment ends at the next one's base offset once cut, so later segments continue the valid prefix
    and are all kept (with or without a clean shutdown: the trusted load finds the tail too)."""
    log = open_log(tmp_path, recover=False, segment_bytes=2000)
    fill(log, 60)
    bases, end = log.segment_base_offsets(), log.log_end_offset
    assert len(bases) >= 4
    log.close()
    victim = tmp_path / "t-0" / f"{bases[1]:020d}.log"
    good_size = victim.stat().st_size
    with open(victim, "ab") as f:
        f.write(make_batch(make_values(5, 50), base_offset=bases[2])[:150])
    with caplog.at_level(logging.WARNING):
        reopened = open_log(tmp_path, recover=recover, segment_bytes=2000)
    assert reopened.segment_base_offsets() == bases
    assert reopened.log_end_offset == end
    assert victim.stat().st_size == good_size
    assert f"Found invalid messages in {victim} at byte offset {good_size}" in caplog.text
    assert "are lost" not in caplog.text
    assert_fully_readable(reopened)
    reopened.close()


def test_whole_unacknowledged_batch_reaching_next_base_is_cut(tmp_path: Path) -> None:
    """A batch that was fully written but whose append failed afterwards, left in a segment that then rolled:
    its offsets were given again to the next segment, so it is cut, and reads see the acknowledged copy."""
    log = open_log(tmp_path, recover=False, segment_bytes=2000)
    fill(log, 60)
    bases, end = log.segment_base_offsets(), log.log_end_offset
    log.close()
    victim = tmp_path / "t-0" / f"{bases[1]:020d}.log"
    good_size = victim.stat().st_size
    with open(victim, "ab") as f:
        f.write(make_batch([b"never acknowledged"], base_offset=bases[2]))
    reopened = open_log(tmp_path, recover=True, segment_bytes=2000)
    assert reopened.segment_base_offsets() == bases
    assert victim.stat().st_size == good_size
    assert reopened.log_end_offset == end
    assert_fully_readable(reopened)
    reopened.close()
