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
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from metaq.broker.log.config import LogConfig
from metaq.broker.log.index import OffsetIndex, TimeIndex
from metaq.broker.log.open_files import SEGMENT_FILES, SegmentFile
from metaq.broker.log.segment_reads import SegmentReads
from metaq.broker.log.segment_recovery import INT32_MAX, NO_INDEX_ENTRIES, SegmentRecovery
from metaq.errors import StorageError
from metaq.protocol.batches import (
    BatchHeader,
)

__all__ = ["LogSegment", "segment_file_name"]

logger = logging.getLogger(__name__)


LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's naming: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}{suffix}"


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


class LogSegment(SegmentReads, SegmentRecovery):
    """A segment of a partition log. Create with :meth:`create` (new, empty) or :meth:`load`. Owns the segment's
    ``.log`` descriptors (read-only, and a write one while active; module docstring), its offset and time indexes,
    and what has been written: size, next offset, largest timestamp, whether a flush is due. Reading and recovery
    are the mixins :class:`SegmentReads` and :class:`SegmentRecovery`."""

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
            if problem is NO_INDEX_ENTRIES:
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
        if last_offset - self.base_offset > INT32_MAX:
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


