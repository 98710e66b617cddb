"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

Threading model (see PartitionLog): the event-loop thread appends, reads, rolls and deletes; a flush
thread only fsyncs descriptors that the partition log hands it under its lock. So a segment keeps:

* ``file`` - a read-only file object on the ``.log``, opened on first use. Reads, FetchSlice/sendfile and
  fsync go through it (Linux fsyncs read-only descriptors).
* a write descriptor, opened only while the segment is active and closed when it rolls; writes are
  positional (``pwrite`` at the tracked size).

Every descriptor is opened lazily and counted in the broker-wide open-files cache
(metaq/broker/log/open_files.py), which may drop a segment's descriptors when others are used more recently.
Whoever uses a descriptor holds its :class:`SegmentFile` object meanwhile (a FetchSlice does, so does a flush
or a cleaner pass): it is closed only when the last holder lets go, and the segment reopens it on next use.
* ``size`` - bytes fully written. Readers never look past it, whatever the file length is.

An append that fails (a full disk cuts writes short) is rolled back at once: the ``.log`` is cut back to
``size`` and the index entries it added are dropped. Otherwise its bytes could outlive it - the next append
may be shorter, or the segment may roll - and recovery would stop at them as a torn tail. If even the cut
fails, the segment stays "torn" and is cut before anything else is written to it, and when it rolls.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from metaq.broker.log.config import LogConfig
from metaq.broker.log.index import OffsetIndex, TimeIndex
from metaq.broker.log.open_files import SEGMENT_FILES, SegmentFile
from metaq.errors import CorruptRecordError, StorageError
from metaq.protocol.batches import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    batch_problem,
    iter_valid_batches,
    read_header,
    total_size_at,
)
from metaq.protocol.records import decode_records

__all__ = ["FetchSlice", "LogSegment", "segment_file_name"]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 1 << 20
"""Bytes read at a time when validating a whole .log (recovery)."""
_HEADER_CHUNK = 16 << 10
"""Bytes read at a time when walking batch headers from an index entry (reads, timestamp lookups)."""

_NO_INDEX_ENTRIES = "the offset index is empty although the log is larger than the index interval"

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's naming: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}{suffix}"


class TimestampOffset(NamedTuple):
    """A record found by timestamp (ListOffsets): its offset and its own timestamp."""

    offset: int
    timestamp: int


@dataclass(frozen=True)
class FetchSlice:
    """A byte range of one segment's ``.log`` holding whole batches (the last one may be cut short).

    ``file`` is shared by every slice of the segment; the slice's reference keeps it open (whatever the
    open-files cache does) until the slice is dropped. A server may hand it to ``loop.sendfile``. Use explicit
    offsets on it (``os.pread``/``os.sendfile``): other users may move its file position."""

    file: io.FileIO
    position: int
    size: int
    first_offset: int
    """Base offset of the first batch in the slice (may be below the offset asked for)."""

    def read_bytes(self) -> bytes:
        """The slice's bytes, read without touching the shared file position."""
        return os.pread(self.file.fileno(), self.size, self.position)


@dataclass(frozen=True)
class PendingAppend:
    """What an append changes in a segment's state, applied by the partition log under its lock once the
    bytes are in the file (so a concurrent flush never sees state ahead of the data)."""

    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_index: int
    now_ms: int


class LogSegment:
    """A segment of a partition log. Create with :meth:`create` (new, empty) or :meth:`load`."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX), base_offset, config.index_max_bytes
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX), base_offset, config.index_max_bytes
        )
        self._file: SegmentFile | None = None
        self._write_file: SegmentFile | None = None
        self.index.on_open = self._opened
        self.time_index.on_open = self._opened
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.roll_base_ms: int | None = None
        """When the segment's age started counting (first append, or file mtime for a loaded segment)."""
        self.dirty = False
        """Written since the last flush captured it (guarded by the partition log's lock)."""
        self.pinned = False
        """A flush is fsyncing this segment's descriptors: do not close them (guarded by the lock)."""
        self._bytes_since_index = 0
        self._torn = False
        """The file may hold bytes of a failed append past ``size`` (cutting them failed): cut before writing."""

    # ----------------------------------------------------------------------------------------- creation

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig) -> LogSegment:
        """A new, empty segment with its three files on disk."""
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot create segment {path}: {e.strerror}") from e
        try:
            if os.fstat(fd).st_size:
                raise StorageError(f"cannot create segment {path}: a non-empty file is in the way")
        finally:
            os.close(fd)
        segment = cls(directory, base_offset, config)
        with segment._closed_on_error():
            segment.index.create()
            segment.time_index.create()
        return segment

    @classmethod
    def load(
        cls, directory: Path, base_offset: int, config: LogConfig, *, recover: bool, end_limit: int | None = None
    ) -> tuple[LogSegment, int]:
        """Open an existing segment; return it and the number of bytes recovery cut off its ``.log``.

        ``recover``: validate every batch and rebuild the indexes. Otherwise the indexes are trusted after a
        sanity check, and only the tail after the last index entry is read (for the end offset and largest
        timestamp); any problem falls back to full recovery of this segment.

        ``end_limit``: the next segment's base offset. This segment's offsets must stay below it: a batch
        reaching it was written by an append that failed before the log rolled, and is cut as invalid."""
        segment = cls(directory, base_offset, config)
        with segment._closed_on_error():
            if recover:
                return segment, segment.recover(end_limit)
            problem = segment._load_trusted(end_limit)
            if problem is None:
                return segment, 0
            if problem is _NO_INDEX_ENTRIES:
                # Legit for a segment of a few large batches; reading its tail means reading it all anyway.
                logger.debug("Rebuilding the indexes of %s: %s", segment.log_path, problem)
            else:
                logger.warning("Rebuilding the indexes of %s: %s", segment.log_path, problem)
            return segment, segment.recover(end_limit)

    @contextlib.contextmanager
    def _closed_on_error(self) -> Iterator[None]:
        """A segment that fails to load or be created is closed before the error propagates: its caller
        never gets it, so nobody else would close its files."""
        try:
            yield
        except BaseException:
            self.close()
            raise

    @property
    def file(self) -> SegmentFile:
        """The ``.log`` open for reading (opened now if the segment has none open); hold it while using it."""
        file = self._file
        if file is None:
            try:
                file = SegmentFile(self.log_path, "r")
            except OSError as e:
                raise StorageError(f"cannot open segment {self.log_path}: {e.strerror}") from e
            self._file = file
        SEGMENT_FILES.touch(self)
        return file

    def _opened(self) -> None:
        SEGMENT_FILES.touch(self)

    def release_files(self) -> None:
        """The open-files cache evicts this segment: drop its references to its descriptors. Each closes now,
        or when the last user holding it (a fetch being sent, a flush) lets go; the next use reopens it."""
        self._file = None
        self._write_file = None
        self.index.release_file()
        self.time_index.release_file()

    @property
    def has_open_files(self) -> bool:
        """Whether the segment itself holds a descriptor (tests, metrics)."""
        return (self._file is not None or self._write_file is not None or self.index.is_open
                or self.time_index.is_open)

    def _fstat(self) -> os.stat_result:
        file = self.file  # held across the call (see the module docstring)
        return os.fstat(file.fileno())

    def _file_size(self) -> int:
        return self._fstat().st_size

    def _mtime_ms(self) -> int:
        """The ``.log``'s mtime, without opening it if it is closed (retention and ListOffsets v0 ask every
        segment: that must not cycle the whole log through the open-files cache)."""
        file = self._file
        if file is None:
            try:
                return int(os.stat(self.log_path).st_mtime * 1000)
            except FileNotFoundError:  # renamed (deleted) meanwhile: the descriptor follows the file
                pass
        stat = os.fstat(file.fileno()) if file is not None else self._fstat()
        return int(stat.st_mtime * 1000)

    def last_modified_ms(self) -> int:
        """When the segment's log file was last written (ListOffsets v0 answers by it, as Kafka 0.8)."""
        return self._mtime_ms()

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
            return _NO_INDEX_ENTRIES
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

    def truncate_to(self, offset: int) -> None:
        """Drop every batch from the one holding ``offset`` on (a follower cutting a divergent tail, see
        metaq/broker/replication): the ``.log`` is cut there and the indexes rebuilt from what stays."""
        found = self._find_batch(offset, self.size)
        if found is None:
            return
        self._truncate_log(found[0])
        self.recover()

    def _truncate_log(self, size: int) -> None:
        writer = self._writer()
        try:
            os.ftruncate(writer.fileno(), size)
        except OSError as e:
            raise StorageError(f"cannot truncate {self.log_path}: {e.strerror}") from e

    def _track_timestamp(self, timestamp: int, offset: int) -> None:
        if timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = timestamp, offset

    # ------------------------------------------------------------------------------------------- writes

    def should_roll(self, append_size: int, last_offset: int, now_ms: int) -> str | None:
        """Why an append of ``append_size`` bytes ending at ``last_offset`` needs a new segment, or None."""
        if self.size == 0:
            return None
        if self.size + append_size > self.config.segment_bytes:
            return "size"
        if self.roll_base_ms is not None and now_ms - self.roll_base_ms > self.config.segment_ms:
            return "age"
        if self.index.is_full or self.time_index.is_full:
            return "index full"
        if last_offset - self.base_offset > _INT32_MAX:
            return "relative offset overflow"
        return None

    def _writer(self) -> SegmentFile:
        """The ``.log`` open for writing (opened now if needed); hold it while writing."""
        writer = self._write_file
        if writer is None:
            try:
                writer = SegmentFile(os.open(self.log_path, os.O_WRONLY), "w")
            except OSError as e:
                raise StorageError(f"cannot open {self.log_path} for writing: {e.strerror}") from e
            self._write_file = writer
        SEGMENT_FILES.touch(self)
        return writer

    def append(self, data: bytearray, headers: Sequence[BatchHeader], first_offset: int, now_ms: int) -> PendingAppend:
        """Write batches whose offsets were assigned from ``first_offset`` at the end of the segment, and
        their sparse index entries. The returned state must be applied with :meth:`commit`.

        On StorageError nothing of the append is left in the files (see the module docstring)."""
        if self._torn:
            self.trim_tail()
        position = self.size
        max_timestamp, offset_of_max = self.max_timestamp, self.offset_of_max_timestamp
        offset = first_offset
        for header in headers:
            last = offset + header.last_offset_delta
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, last
            offset = last + 1
        index_entries, time_entries = len(self.index), len(self.time_index)
        bytes_since_index = self._bytes_since_index
        try:
            self._write_at(data, position)
            if bytes_since_index > self.config.index_interval_bytes:
                self.index.append(offset - 1, position)
                self.time_index.maybe_append(max_timestamp, offset_of_max)
                bytes_since_index = 0
        except StorageError:
            self._roll_back(index_entries, time_entries)
            raise
        return PendingAppend(
            size=position + len(data),
            next_offset=offset,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max,
            bytes_since_index=bytes_since_index + len(data),
            now_ms=now_ms,
        )

    def commit(self, pending: PendingAppend) -> None:
        """Apply an append's state (caller holds the partition log's lock)."""
        self.size = pending.size
        self.next_offset = pending.next_offset
        self.max_timestamp = pending.max_timestamp
        self.offset_of_max_timestamp = pending.offset_of_max_timestamp
        self._bytes_since_index = pending.bytes_since_index
        if self.roll_base_ms is None:
            self.roll_base_ms = pending.now_ms
        self.dirty = True

    def _write_at(self, data: bytearray, position: int) -> None:
        writer = self._writer()
        fd = writer.fileno()
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], position + written)
        except OSError as e:
            raise StorageError(f"cannot write {self.log_path} at byte {position + written}: {e.strerror}") from e

    def _roll_back(self, index_entries: int, time_entries: int) -> None:
        """Undo a failed append: cut the ``.log`` back to ``size`` and drop the index entries it added. A
        failure here is logged, not raised (the append's own error is the one to report); the segment then
        stays torn and is cut before its next write."""
        self._torn = True
        undo: tuple[Callable[[], None], ...] = (
            lambda: self.index.truncate_to(index_entries),
            lambda: self.time_index.truncate_to(time_entries),
            self.trim_tail,
        )
        for step in undo:
            try:
                step()
            except StorageError as e:
                logger.error("Cannot roll back a failed append to %s: %s", self.log_path, e)

    def trim_tail(self) -> None:
        """Cut the ``.log`` to ``size`` if a failed append left bytes past it (StorageError if impossible)."""
        try:
            if self._torn or self._file_size() > self.size:
                os.ftruncate(self._writer().fileno(), self.size)
        except OSError as e:
            raise StorageError(f"cannot truncate {self.log_path} to {self.size} bytes: {e.strerror}") from e
        self._torn = False

    def deactivate(self) -> None:
        """The segment stops being the active one: cut any bytes of a failed append past ``size`` (so the
        rolled segment ends exactly where the next begins), add the final time index entry (so its largest
        timestamp is indexed) and close the write descriptor."""
        self.trim_tail()
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        writer, self._write_file = self._write_file, None
        if writer is not None:
            writer.close()

    def flush_files(self) -> list[SegmentFile]:
        """Descriptors a flush must fsync (captured under the partition log's lock), opened if the open-files
        cache closed them since the writes (fsync of any descriptor of a file flushes all its dirty pages).
        The flush holds them until its fsyncs are done, so an eviction meanwhile does not close them."""
        return [self.file, self.index.handle(), self.time_index.handle()]

    def close_index_files(self) -> None:
        """Release index descriptors of a segment that will not be written again (entries stay in memory)."""
        self.index.close_file()
        self.time_index.close_file()

    # -------------------------------------------------------------------------------------------- reads

    def _iter_headers(self, position: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Walk the (already validated) batch headers from ``position`` up to ``end``, reading in chunks."""
        file = self.file  # held for the whole walk: an eviction meanwhile must not close it under us
        fd = file.fileno()
        buf = b""
        buf_start = position
        while position < end:
            offset_in_buf = position - buf_start
            if offset_in_buf + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_HEADER_CHUNK, end - position), position)
                buf_start, offset_in_buf = position, 0
            try:
                header = read_header(buf, offset_in_buf)
            except CorruptRecordError as e:
                raise StorageError(f"{self.log_path}: corrupt batch header at byte {position}: {e}") from e
            if position + header.size > end:
                raise StorageError(f"{self.log_path}: batch at byte {position} runs past the segment end {end}")
            yield position, header
            position += header.size

    def batch_positions(self) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch up to the segment's size (the log cleaner reads these)."""
        return self._iter_headers(0, self.size)

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches from the one holding ``offset`` to the segment's end (producer state
        replay reads these 61-byte headers only, never the records)."""
        end = self.size
        found = self._find_batch(offset, end)
        if found is not None:
            for _, header in self._iter_headers(found[0], end):
                yield header

    def _find_batch(self, offset: int, end: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, start = self.index.lookup(offset)
        for position, header in self._iter_headers(start, end):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchSlice | None:
        """A slice starting at the batch holding ``offset``, at most ``max_bytes`` long (but always the whole
        first batch, KIP-74), or None if the segment has nothing at or after ``offset``. With ``max_offset``
        (a consumer's high watermark) the slice ends before the batch holding that offset."""
        end = self.size
        if max_offset is not None and max_offset < self.next_offset:
            bound = self._find_batch(max_offset, end)
            if bound is not None:
                end = bound[0]
        if offset >= self.next_offset or end == 0:
            return None
        found = self._find_batch(offset, end)
        if found is None or found[0] >= end:
            return None
        position, header = found
        size = min(max(max_bytes, header.size), end - position)
        return FetchSlice(self.file, position, size, header.base_offset)

    def find_offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The offset and timestamp of the first record with timestamp >= ``timestamp`` in this segment."""
        if self.max_timestamp < timestamp:
            return None
        end = self.size
        _, start = self.index.lookup(self.time_index.lookup(timestamp))
        for position, header in self._iter_headers(start, end):
            if header.max_timestamp >= timestamp:
                found = self._first_record_at_or_after(position, header, timestamp)
                if found is not None:
                    return found
        return None

    def _first_record_at_or_after(self, position: int, header: BatchHeader,
                                  timestamp: int) -> TimestampOffset | None:
        """Decode this one batch (decompressed if it is) to find the exact record, not the batch's first."""
        file = self.file
        data = os.pread(file.fileno(), header.size, position)
        try:
            records = decode_records(data).records
        except CorruptRecordError as e:
            # Stored batches were validated on append; only damage on disk gets here. The batch start is a
            # safe, slightly early answer.
            logger.warning(
                "Cannot decode batch at byte %d of %s (%s); answering its base offset",
                position,
                self.log_path,
                e,
            )
            return TimestampOffset(header.base_offset, header.max_timestamp)
        for offset, record_ts, *_ in records:
            if record_ts >= timestamp:
                return TimestampOffset(offset, record_ts)
        return None

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime if the segment has none (Kafka's retention rule)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self._mtime_ms()

    # -------------------------------------------------------------------------------------------- delete

    def mark_deleted(self) -> None:
        """Rename the files to ``*.deleted``; descriptors (and outstanding FetchSlices) stay valid."""
        deleted_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        try:
            self.log_path.rename(deleted_log)
        except FileNotFoundError:
            pass
        self.log_path = deleted_log
        for index in (self.index, self.time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def close(self) -> None:
        """Close every descriptor (idempotent), cutting the bytes of a failed append first if still there."""
        if self._torn:
            try:
                self.trim_tail()
            except StorageError as e:
                logger.error("%s; recovery will cut it at the next start", e)
        SEGMENT_FILES.forget(self)
        for file in (self._write_file, self._file):
            if file is not None:
                file.close()
        self._write_file = self._file = None
        self.close_index_files()

    def remove(self) -> None:
        """Close and unlink the files (normally after :meth:`mark_deleted` and the delete delay)."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index.delete()
        self.time_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size}, offsets={self.base_offset}..{self.next_offset})"


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
                if header.base_offset < expected or header.last_offset - self._base_offset > _INT32_MAX:
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
