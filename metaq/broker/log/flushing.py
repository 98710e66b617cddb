"""Flushing a partition log (:class:`~metaq.broker.log.partition_log.PartitionLog`), the one operation that runs on a
worker thread while the event loop appends: the dirty segments' descriptors and the end offset are captured under the
log's lock, fsynced outside it (the segments pinned meanwhile), then the recovery point advances.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from metaq.broker.log.open_files import SegmentFile
from metaq.broker.log.segment import LogSegment
from metaq.errors import StorageError
from metaq.fileio import fsync_dir

logger = logging.getLogger(__name__)


def _fsync_all(files: list[SegmentFile]) -> None:
    """fsync ``files``, held meanwhile (an eviction by the open-files cache cannot close them under us)."""
    for file in files:
        os.fsync(file.fileno())


class LogFlushing:
    """What is not yet fsynced, and the flush that fsyncs it, for :class:`PartitionLog`."""

    log_end_offset: int
    recovery_point: int
    _first_unflushed_ms: int | None
    _segments: list[LogSegment]
    _flush_lock: threading.Lock
    _lock: threading.Lock
    _closed: bool
    _dir_dirty: bool
    directory: Path

    def unflushed_messages(self) -> int:
        """Offsets appended but not yet fsynced."""
        return self.log_end_offset - self.recovery_point

    def oldest_unflushed_ms(self) -> int | None:
        """When the oldest not-yet-flushed append happened (None if everything is flushed)."""
        return self._first_unflushed_ms

    def has_unflushed_rolled_segments(self) -> bool:
        """True if a segment that is no longer active still has unflushed data (Kafka flushes on roll)."""
        return any(segment.dirty for segment in self._segments[:-1])

    def flush(self) -> int:
        """fsync every dirty segment (log and indexes) and advance the recovery point; return it.

        Safe to call from a worker thread while the event loop appends and reads."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return self.recovery_point
                end = self.log_end_offset
                targets = [segment for segment in self._segments if segment.dirty]
                for segment in targets:
                    segment.dirty = False
                    segment.pinned = True
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                first_unflushed, self._first_unflushed_ms = self._first_unflushed_ms, None
            try:
                for segment in targets:  # one segment's files at a time (after recovery every segment is dirty)
                    _fsync_all(segment.flush_files())
                if dir_dirty:
                    fsync_dir(self.directory)
            except (OSError, StorageError) as e:
                self._flush_failed(targets, dir_dirty, first_unflushed)
                reason = e.strerror if isinstance(e, OSError) else str(e)
                raise StorageError(f"cannot flush log {self.directory}: {reason}") from e
            return self._flush_done(targets, end)

    def _flush_failed(self, targets: list[LogSegment], dir_dirty: bool, first_unflushed: int | None) -> None:
        with self._lock:
            for segment in targets:
                segment.dirty = True
                segment.pinned = False
            self._dir_dirty = self._dir_dirty or dir_dirty
            if first_unflushed is not None:
                current = self._first_unflushed_ms
                self._first_unflushed_ms = first_unflushed if current is None else min(current, first_unflushed)

    def _flush_done(self, targets: list[LogSegment], end: int) -> int:
        with self._lock:
            active = self._segments[-1]
            for segment in targets:
                segment.pinned = False
                if segment is not active and not segment.dirty:
                    segment.close_index_files()  # an inactive segment is never written again
            if end > self.recovery_point:
                self.recovery_point = end
            return self.recovery_point
