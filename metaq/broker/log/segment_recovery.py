"""Opening and recovering one log segment (:class:`~metaq.broker.log.segment.LogSegment`): a segment of a clean
shutdown is trusted (its indexes are checked, not rebuilt); otherwise every batch of the ``.log`` is validated, the
indexes rebuilt from them, and the file cut at the first batch that is torn or corrupt.
"""

from __future__ import annotations

import logging
import os
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path

from metaq.broker.log.config import LogConfig
from metaq.broker.log.index import OffsetIndex, TimeIndex
from metaq.broker.log.open_files import SegmentFile
from metaq.protocol.batches import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    batch_problem,
    iter_valid_batches,
    total_size_at,
)

logger = logging.getLogger(__name__)


INT32_MAX = 2**31 - 1


_SCAN_CHUNK = 1 << 20
"""Bytes read at a time when validating a whole .log (recovery)."""


NO_INDEX_ENTRIES = "the offset index is empty although the log is larger than the index interval"


class _FileScanner:
    """Iterate the valid batches of a ``.log`` byte range, reading large chunks.

    After iteration, ``valid_end`` is the end of the last valid batch and ``problem`` says why scanning
    stopped early (None if the range was valid up to ``end``). Batches must not go backwards in offset,
    must fit the segment's int32 relative offsets, and must end below ``end_limit`` (the next segment's base
    offset) if given."""

    def __init__(self, file: SegmentFile, start: int, end: int, base_offset: int, end_limit: int | None = None) -> None:
        self._file = file  # held, so that an eviction during the scan does not close it
        self._fd = file.fileno()
        self._end = end
        self._base_offset = base_offset
        self._end_limit = end_limit
        self.valid_end = start
        self.problem: str | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        position = self.valid_end
        expected = self._base_offset
        want = _SCAN_CHUNK
        while position < self._end:
            buf = os.pread(self._fd, min(want, self._end - position), position)
            if not buf:
                self.problem = "the file ended early"
                return
            consumed = 0
            for relative, header in iter_valid_batches(buf):
                if header.base_offset < expected or header.last_offset - self._base_offset > INT32_MAX:
                    self.problem = (
                        f"batch at byte {position + relative}: offset {header.base_offset} is out of order"
                        f" (expected >= {expected})"
                    )
                    return
                if self._end_limit is not None and header.last_offset >= self._end_limit:
                    self.problem = (
                        f"batch at byte {position + relative}: offsets {header.base_offset}..{header.last_offset}"
                        f" reach the next segment's base offset {self._end_limit} (left by a failed append)"
                    )
                    return
                yield position + relative, header
                expected = header.next_offset
                consumed = relative + header.size
                self.valid_end = position + consumed
            reached_end = position + len(buf) >= self._end
            position += consumed
            if consumed == len(buf):
                want = _SCAN_CHUNK
                continue
            if not reached_end:
                if consumed:
                    want = _SCAN_CHUNK  # re-read from the first batch that did not fit in this chunk
                    continue
                total = total_size_at(buf)
                if total is not None and total > len(buf) and position + total <= self._end:
                    want = total  # one batch larger than the chunk: read it whole
                    continue
            self.problem = batch_problem(buf, consumed) or "invalid batch"
            return


class SegmentRecovery:
    """Loading a segment's state from its files and recovering a segment after an unclean shutdown, for
    :class:`LogSegment`."""

    base_offset: int
    size: int
    next_offset: int
    _bytes_since_index: int
    roll_base_ms: int | None
    time_index: TimeIndex
    index: OffsetIndex
    max_timestamp: int
    offset_of_max_timestamp: int
    config: LogConfig
    dirty: bool
    log_path: Path

    @abstractmethod
    def _file_size(self) -> int: ...

    @property
    @abstractmethod
    def file(self) -> SegmentFile: ...

    @abstractmethod
    def _track_timestamp(self, timestamp: int, offset: int) -> None: ...

    @abstractmethod
    def _mtime_ms(self) -> int: ...

    @abstractmethod
    def _truncate_log(self, size: int) -> None: ...

    def _load_trusted(self, end_limit: int | None) -> str | None:
        """Load indexes and the tail; return why the segment must be recovered instead, or None."""
        log_size = self._file_size()
        problem = self._load_indexes(log_size)
        if problem:
            return problem
        start = self.index.last_entry[1]
        indexed_max = self.time_index.last_entry
        if indexed_max is not None:
            self.max_timestamp, self.offset_of_max_timestamp = indexed_max
        scanner = _FileScanner(self.file, start, log_size, self.base_offset, end_limit)
        next_offset = self.base_offset
        for _, header in scanner:
            self._track_timestamp(header.max_timestamp, header.last_offset)
            next_offset = header.next_offset
        if scanner.problem:
            return f"invalid data at byte {scanner.valid_end}: {scanner.problem}"
        if self.index.last_entry[0] >= next_offset and len(self.index):
            return f"offset index entry {self.index.last_entry[0]} is beyond the log end {next_offset}"
        last_time = self.time_index.last_entry
        if last_time is not None and last_time[1] >= next_offset:
            return f"time index entry for offset {last_time[1]} is beyond the log end {next_offset}"
        self.size = log_size
        self.next_offset = next_offset
        self._bytes_since_index = log_size - start
        self.roll_base_ms = self._mtime_ms() if log_size else None
        return None

    def _load_indexes(self, log_size: int) -> str | None:
        problem = self.index.load(log_size)
        if problem == "missing" and log_size == 0:
            self.index.create()
            problem = None
        if problem:
            return f"offset index {self.index.path.name}: {problem}"
        problem = self.time_index.load()
        if problem == "missing" and log_size == 0:
            self.time_index.create()
            problem = None
        if problem:
            return f"time index {self.time_index.path.name}: {problem}"
        if not len(self.index) and log_size > self.config.index_interval_bytes + BATCH_HEADER_SIZE:
            return NO_INDEX_ENTRIES
        return None

    def recover(self, end_limit: int | None = None) -> int:
        """Validate every batch (size, magic, CRC, offset order, offsets below ``end_limit``), rebuild both
        indexes, and truncate the ``.log`` at the first invalid batch. Returns the number of bytes cut off."""
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        log_size = self._file_size()
        interval = self.config.index_interval_bytes
        scanner = _FileScanner(self.file, 0, log_size, self.base_offset, end_limit)
        next_offset = self.base_offset
        last_index_position = 0
        for position, header in scanner:
            self._track_timestamp(header.max_timestamp, header.last_offset)
            if position - last_index_position > interval:
                self.index.append(header.last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                last_index_position = position
            next_offset = header.next_offset
        valid = scanner.valid_end
        truncated = log_size - valid
        if truncated:
            logger.warning(
                "Found invalid messages in %s at byte offset %d (%s); truncating %d bytes",
                self.log_path,
                valid,
                scanner.problem,
                truncated,
            )
            self._truncate_log(valid)
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.size = valid
        self.next_offset = next_offset
        self._bytes_since_index = valid - last_index_position
        self.roll_base_ms = self._mtime_ms() if valid else None
        self.dirty = True  # rebuilt indexes (and a truncation) are not on stable storage yet
        return truncated
