"""The broker-wide bound on open segment files (metaq/broker/log/open_files.py): LRU eviction, lazy reopening,
and pins (a holder of a descriptor keeps it open through an eviction)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from metaq.broker.log.open_files import (
    FILES_PER_SEGMENT,
    MIN_SEGMENTS,
    SEGMENT_FILES,
    FileBudget,
    OpenSegments,
    SegmentFile,
)
from metaq.broker.log.partition_log import PartitionLog
from tests.broker import decode
from tests.broker.log_helpers import assert_fully_readable, fill, open_log


class Owner:
    def __init__(self, name: str) -> None:
        self.name = name
        self.released = 0

    def release_files(self) -> None:
        self.released += 1


def test_lru_evicts_least_recently_used_beyond_capacity() -> None:
    cache = OpenSegments(MIN_SEGMENTS)
    owners = [Owner(str(i)) for i in range(MIN_SEGMENTS + 3)]
    for owner in owners[:MIN_SEGMENTS]:
        cache.touch(owner)
    cache.touch(owners[0])  # used again: now the most recent
    for owner in owners[MIN_SEGMENTS:]:
        cache.touch(owner)
    assert len(cache) == MIN_SEGMENTS
    assert [o.released for o in owners[:4]] == [0, 1, 1, 1]  # 1..3 went, 0 was used again
    assert owners[0] in cache and owners[1] not in cache
    assert cache.evictions == 3


def test_forget_and_resize() -> None:
    cache = OpenSegments(MIN_SEGMENTS * 2)
    owners = [Owner(str(i)) for i in range(MIN_SEGMENTS * 2)]
    for owner in owners:
        cache.touch(owner)
    cache.forget(owners[0])
    assert owners[0] not in cache and owners[0].released == 0  # it closed its files itself
    cache.resize(1)  # never below the minimum
    assert cache.capacity == MIN_SEGMENTS and len(cache) == MIN_SEGMENTS
    assert [o.released for o in owners[1:]] == [1] * (MIN_SEGMENTS - 1) + [0] * MIN_SEGMENTS


def test_budget_shares_the_limit() -> None:
    budget = FileBudget(1024)
    assert budget.reserve + budget.segments * FILES_PER_SEGMENT + budget.connections <= 1024
    assert budget.segments >= MIN_SEGMENTS and budget.connections > 100
    assert FileBudget(20_000).segments * FILES_PER_SEGMENT <= 10_000


def test_segment_file_closes_when_last_holder_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    held = SegmentFile(path, "r")
    fd = held.fileno()
    alias = held
    del held
    os.fstat(fd)  # still open: ``alias`` holds it
    del alias
    with pytest.raises(OSError):
        os.fstat(fd)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_cache() -> Iterator[OpenSegments]:
    capacity = SEGMENT_FILES.capacity
    SEGMENT_FILES.resize(MIN_SEGMENTS)
    try:
        yield SEGMENT_FILES
    finally:
        SEGMENT_FILES.resize(capacity)


def _many_segment_logs(tmp_path: Path, logs: int) -> list[PartitionLog]:
    opened = []
    for i in range(logs):
        log = open_log(tmp_path / str(i), recover=False, segment_bytes=400, index_interval_bytes=50)
        fill(log, 30, random.Random(i))
        opened.append(log)
    return opened


def test_many_segments_hold_a_bounded_number_of_descriptors(tmp_path: Path, small_cache: OpenSegments) -> None:
    before = _open_fds()
    logs = _many_segment_logs(tmp_path, 6)
    try:
        segments = sum(log.segment_count() for log in logs)
        assert segments > 4 * MIN_SEGMENTS
        for log in logs:
            log.flush()
            assert_fully_readable(log)  # every segment read again: reopened on demand
        assert len(small_cache) <= MIN_SEGMENTS
        assert _open_fds() - before <= MIN_SEGMENTS * FILES_PER_SEGMENT
    finally:
        for log in logs:
            log.close()
    assert _open_fds() <= before


def test_restart_after_crash_opens_one_segment_at_a_time(tmp_path: Path, small_cache: OpenSegments) -> None:
    log = _many_segment_logs(tmp_path, 1)[0]
    end, segments = log.log_end_offset, log.segment_count()
    log.flush()
    log.close()
    before = _open_fds()
    recovered = open_log(tmp_path / "0", recover=True, segment_bytes=400, index_interval_bytes=50)
    try:
        assert (recovered.log_end_offset, recovered.segment_count()) == (end, segments)
        assert _open_fds() - before <= MIN_SEGMENTS * FILES_PER_SEGMENT
        recovered.flush()  # every recovered segment is dirty: fsynced one at a time, reopened as needed
        assert _open_fds() - before <= MIN_SEGMENTS * FILES_PER_SEGMENT
        assert_fully_readable(recovered)
    finally:
        recovered.close()


def test_a_slice_being_sent_survives_the_eviction_of_its_segment(tmp_path: Path, small_cache: OpenSegments) -> None:
    logs = _many_segment_logs(tmp_path, 3)
    try:
        first = logs[0]
        piece = first.read(0, 1 << 20)
        assert piece is not None
        expected = piece.read_bytes()
        segment = first._segments[0]
        assert segment.has_open_files
        for log in logs[1:]:  # every other segment used since: the first one is evicted
            assert_fully_readable(log)
        assert not segment.has_open_files
        assert piece.read_bytes() == expected  # the slice's own reference kept its descriptor open
        with open(os.devnull, "wb") as sink:
            assert os.sendfile(sink.fileno(), piece.file.fileno(), piece.position, piece.size) == piece.size
        assert decode(piece.read_bytes())[0][0] == 0
        assert first.read(0, 1 << 20) is not None and segment.has_open_files  # reopened on use
    finally:
        for log in logs:
            log.close()


def test_appends_continue_after_the_active_segment_is_evicted(tmp_path: Path, small_cache: OpenSegments) -> None:
    logs = _many_segment_logs(tmp_path, 3)
    try:
        first = logs[0]
        active = first._segments[-1]
        for log in logs[1:]:
            assert_fully_readable(log)
        assert not active.has_open_files
        fill(first, 5, random.Random(99))  # the write descriptor and indexes are reopened
        first.flush()
        assert_fully_readable(first)
    finally:
        for log in logs:
            log.close()


def test_listing_segment_times_opens_nothing(tmp_path: Path, small_cache: OpenSegments) -> None:
    """ListOffsets v0 and retention ask every segment for its mtime: a closed segment answers from a stat."""
    logs = _many_segment_logs(tmp_path, 3)
    try:
        first = logs[0]
        for log in logs[1:]:
            assert_fully_readable(log)
        closed = [segment for segment in first._segments if not segment.has_open_files]
        assert len(closed) > 1
        evictions = small_cache.evictions
        times = first.segment_offsets_and_times()
        assert len(times) == first.segment_count() and all(t > 0 for _, t in times)
        assert not any(segment.has_open_files for segment in closed)
        assert small_cache.evictions == evictions
    finally:
        for log in logs:
            log.close()
