"""Deleting and replacing a partition log's segments (:class:`~metaq.broker.log.partition_log.PartitionLog`): retention
by time and size, DeleteRecords moving the log start offset, and the cleaner's swap of cleaned segments. A deleted
segment is renamed ``.deleted`` at once and removed later, so a fetch still holding its file finishes.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path

from metaq.broker.log.cleaner.swap import fault_point, finish_swap
from metaq.broker.log.config import LogConfig
from metaq.broker.log.producer_state import ProducerStateManager
from metaq.broker.log.segment import LogSegment
from metaq.broker.log.txn_index import TxnIndex
from metaq.errors import OffsetOutOfRangeError, StorageError
from metaq.fileio import fsync_dir

logger = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def remove_quietly(segment: LogSegment) -> None:
    try:
        segment.remove()
    except OSError as e:
        logger.warning("Cannot remove deleted segment %s: %s", segment.log_path, e)


class LogRetention:
    """Retention, DeleteRecords and segment replacement, for :class:`PartitionLog`."""

    config: LogConfig
    _segments: list[LogSegment]
    _lock: threading.Lock
    log_start_offset: int
    recovery_point: int
    _dir_dirty: bool
    _bases: list[int]
    topic: str
    partition: int
    producer_state: ProducerStateManager
    txn_index: TxnIndex
    _pending_deletes: list[tuple[int, LogSegment]]
    log_end_offset: int
    _closed: bool
    directory: Path

    @abstractmethod
    def _check_open(self) -> None: ...

    @abstractmethod
    def size_bytes(self) -> int: ...

    @abstractmethod
    def _roll(self, reason: str) -> LogSegment: ...

    def delete_old_segments(self, now_ms: int) -> int:
        """Apply retention by time and by size; return how many segments were scheduled for deletion.

        Deleted segments are renamed ``*.deleted`` and really removed on a later call, after
        ``segment_delete_delay_ms`` (readers may still be sending from them). If every segment expires, a new
        empty active segment is rolled first, so the log keeps its end offset."""
        self._check_open()
        self._remove_expired_deletes(now_ms)
        deleted = 0
        if not self.config.delete:  # cleanup.policy=compact: only the cleaner removes records
            return 0
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_prefix(
                lambda segment: now_ms - segment.largest_timestamp() > retention_ms, now_ms, "retention time"
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes() - self.config.retention_bytes

            def over_size(segment: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_prefix(over_size, now_ms, "retention size")
        return deleted

    def _delete_prefix(self, predicate: Callable[[LogSegment], bool], now_ms: int, why: str) -> int:
        """Delete the longest run of oldest segments matching ``predicate`` (never an empty last segment)."""
        doomed: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            if (i == len(self._segments) - 1 and segment.size == 0) or not predicate(segment):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(why)
        with self._lock:
            del self._segments[: len(doomed)]
            del self._bases[: len(doomed)]
            # a start moved by DeleteRecords may lie inside the new first segment
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self.recovery_point = max(self.recovery_point, self.log_start_offset)
            self._dir_dirty = True
        for segment in doomed:
            segment.mark_deleted()
            self._pending_deletes.append((now_ms + self.config.segment_delete_delay_ms, segment))
        # a snapshot goes with its segment (the in-memory state stays: producers are forgotten by expiry only)
        self.producer_state.delete_snapshots(below=self._bases[0])
        self.txn_index.remove_below(self.log_start_offset, self._bases)
        logger.info(
            "Deleted %d segment(s) of %s-%d by %s; log start offset is now %d",
            len(doomed),
            self.topic,
            self.partition,
            why,
            self.log_start_offset,
        )
        return len(doomed)

    def delete_records_before(self, offset: int, now_ms: int) -> int:
        """DeleteRecords: make ``offset`` (at most the log end) the log start offset, delete the segments
        wholly below it, and return the new start. Records below it are no longer served; the move is
        persisted by the caller (LogManager's log start offset checkpoint)."""
        self._check_open()
        if offset < 0 or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}"
                f" (log start {self.log_start_offset}, log end {self.log_end_offset})"
            )
        if offset > self.log_start_offset:
            with self._lock:
                self.log_start_offset = offset
            logger.info("Log start offset of %s-%d moved to %d (DeleteRecords)", self.topic, self.partition, offset)
        self.delete_segments_before(self.log_start_offset, now_ms, why="DeleteRecords")
        return self.log_start_offset

    def restore_log_start_offset(self, offset: int) -> None:
        """At load: a start moved by DeleteRecords before the restart (ignored if outside the log)."""
        if self.log_start_offset < offset <= self.log_end_offset:
            self.log_start_offset = offset
            self.recovery_point = max(self.recovery_point, offset)

    def delete_segments_before(self, offset: int, now_ms: int, why: str = "compaction") -> int:
        """Delete the oldest segments whose records all lie below ``offset`` (superseded by a rewrite)."""
        self._check_open()
        ends = {id(seg): (self._bases[i + 1] if i + 1 < len(self._bases) else self.log_end_offset)
                for i, seg in enumerate(self._segments)}
        return self._delete_prefix(lambda segment: ends[id(segment)] <= offset, now_ms, why)

    def inactive_segments(self) -> list[LogSegment]:
        """Every segment but the active one (what the log cleaner may rewrite)."""
        with self._lock:
            return self._segments[:-1]

    def replace_segments(self, old: list[LogSegment], base: int) -> bool:
        """Swap the cleaned segment ``base`` (its ``.swap`` files are durable) in for ``old``, consecutive inactive
        segments of this log; False (nothing changed) if they are no longer that (retention, truncation or a
        deletion got there first). Old segments are deleted after ``segment_delete_delay_ms``, as retention's
        (fetches may be sending from them). Steps and crash recovery: metaq/broker/log/cleaner/swap.py."""
        if self._closed:
            return False
        with self._lock:
            ids = [id(segment) for segment in self._segments[:-1]]
        try:
            first = ids.index(id(old[0]))
        except ValueError:
            return False
        if ids[first:first + len(old)] != [id(segment) for segment in old]:
            return False
        now = wall_clock_ms()
        for segment in old:
            segment.mark_deleted()
            self._pending_deletes.append((now + self.config.segment_delete_delay_ms, segment))
        fault_point("replace")
        finish_swap(self.directory, base)
        try:
            new = LogSegment.load(self.directory, base, self.config, recover=False)[0]
        except OSError as e:
            raise StorageError(f"cannot open the cleaned segment {base} of {self.topic}-{self.partition}: {e}") from e
        with self._lock:
            self._segments[first:first + len(old)] = [new]
            self._bases[first:first + len(old)] = [base]
            self._dir_dirty = True
        self.txn_index.segments_replaced(base, old[-1].next_offset, [segment.base_offset for segment in old])
        fsync_dir(self.directory)
        return True

    def _remove_expired_deletes(self, now_ms: int) -> None:
        """Really remove ``*.deleted`` segments whose delay passed (not while a flush holds them)."""
        keep: list[tuple[int, LogSegment]] = []
        expired: list[tuple[int, LogSegment]] = []
        with self._lock:
            for due, segment in self._pending_deletes:
                (expired if due <= now_ms and not segment.pinned else keep).append((due, segment))
            self._pending_deletes = keep
        for _, segment in expired:
            remove_quietly(segment)
