"""The log of one topic-partition: an ordered list of segments in ``<log.dir>/<topic>-<partition>/``.

Threads: append, read, roll, retention and close run on one thread (the broker's event loop). ``flush()``
may run concurrently on a worker thread. The two meet only under ``_lock``, held briefly: a flush captures
the dirty segments' descriptors and the end offset under it, fsyncs *outside* it, then advances the
recovery point. Segments being fsynced are "pinned" so their descriptors are not closed meanwhile; an
append publishes its new state (size, end offset) under the lock only after the bytes are written, so a
captured end offset never runs ahead of the data a flush covers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from metaq.broker.log.cleaner.keys import require_keys
from metaq.broker.log.cleaner.swap import fault_point, finish_swap, recover_swaps
from metaq.broker.log.config import LogConfig
from metaq.broker.log.open_files import SegmentFile
from metaq.broker.log.producer_state import CompletedTxn, ProducerStateManager
from metaq.broker.log.segment import (
    DELETED_SUFFIX,
    LOG_SUFFIX,
    FetchSlice,
    LogSegment,
    TimestampOffset,
    segment_file_name,
)
from metaq.broker.log.txn_index import AbortedTxn, TxnIndex
from metaq.broker.log.validator import decompressed_limit, validate_records
from metaq.errors import MessageSizeTooLargeError, OffsetOutOfRangeError, RecordListTooLargeError, StorageError
from metaq.fileio import fsync_dir
from metaq.protocol.batches import (
    BatchHeader,
    Buffer,
    assign_offsets,
    log_append_time,
    set_leader_epoch,
    validate_batches,
)
from metaq.protocol.control import build_marker, marker_is_abort

__all__ = ["AppendResult", "FetchSlice", "PartitionLog"]

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX,)  # .cleaned and .swap: recover_swaps()


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed: offsets ``base_offset..last_offset`` and the log start at that time."""

    base_offset: int
    last_offset: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False
    """An idempotent producer's resend of a batch already in the log: nothing was appended, the offsets are
    the original's (see :mod:`metaq.broker.log.producer_state`)."""
    log_append_time: int = -1
    """The time the batches were given on a LogAppendTime topic (a Produce v2+ answer carries it), else -1."""


class PartitionLog:
    """Append-only, segmented log of one partition. Use :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[LogSegment],
        recovery_point: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self.log_start_offset = segments[0].base_offset
        self.log_end_offset = segments[-1].next_offset
        self.recovery_point = max(self.log_start_offset, min(recovery_point, self.log_end_offset))
        """Offset below which every byte is fsynced."""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._first_unflushed_ms: int | None = None
        self._dir_dirty = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self.producer_state = ProducerStateManager(directory, f"{topic}-{partition}", config.producer_id_expiration_ms)
        self.txn_index = TxnIndex(directory, f"{topic}-{partition}")

    # ---------------------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recover: bool,
        recovery_point: int = 0,
    ) -> PartitionLog:
        """Open (creating if missing) the log in ``directory``.

        ``recover``: the last shutdown was not clean, so segments from the one holding ``recovery_point``
        onward are validated batch by batch, each truncated at its first invalid batch (see
        :func:`_load_segments` for why later segments are kept), and their indexes rebuilt. Either way
        leftovers of interrupted operations are cleaned and indexes that fail a sanity check are rebuilt."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            bases = _clean_directory(directory)
            segments = _load_segments(directory, bases, config, recover=recover, recovery_point=recovery_point)
        except OSError as e:
            raise StorageError(f"cannot load log {directory}: {e}") from e
        if not segments:
            segments.append(LogSegment.create(directory, max(0, recovery_point), config))
        log = cls(directory, topic, partition, config, segments, recovery_point)
        if not recover:
            log.recovery_point = log.log_end_offset  # a clean shutdown flushed everything
        try:
            log.txn_index.load(log._bases, log.log_start_offset)
            log.load_producer_state()
        except BaseException:
            log._close_files()
            raise
        logger.debug(
            "Loaded log %s-%d: %d segments, offsets %d..%d, recovery point %d",
            topic,
            partition,
            len(segments),
            log.log_start_offset,
            log.log_end_offset,
            log.recovery_point,
        )
        return log

    # ---------------------------------------------------------------------------------------- writing

    def append(self, records: Buffer, *, now_ms: int | None = None, leader_epoch: int | None = None,
               from_coordinator: bool = False) -> AppendResult:
        """Validate the batches of a produce request, assign offsets and write them to the active segment.

        Nothing of an invalid request is written: CorruptRecordError or one of its subclasses
        (UnsupportedMessageFormatError, UnsupportedCompressionError, InvalidRecordError: see
        :mod:`metaq.broker.log.validator`), MessageSizeTooLargeError for a batch above ``max_message_bytes``
        (or a compressed batch that expands too much), its subclass RecordListTooLargeError for records larger
        than a segment.
        ``from_coordinator``: a group coordinator's transactional batch (no sequence checks, see
        :meth:`ProducerStateManager.check_client_append`)."""
        self._check_open()
        headers = validate_batches(records)
        self._check_sizes(headers, len(records))
        validate_records(records, headers, decompressed_limit(self.config.max_message_bytes))
        if self.config.compact:
            require_keys(records, f"{self.topic}-{self.partition}")
        now = _now_ms() if now_ms is None else now_ms
        first_offset = self.log_end_offset
        duplicate, updates = self.producer_state.check_client_append(headers, first_offset,
                                                                     from_coordinator=from_coordinator)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, self.log_start_offset, 0, True)
        data = bytearray(records)
        if leader_epoch is not None:  # a replicated partition's leader stamps its epoch (KIP-101)
            set_leader_epoch(data, headers, leader_epoch)
        next_offset = assign_offsets(data, headers, first_offset)
        if self.config.log_append_time:
            headers = log_append_time(data, headers, now)
        result = self._write(data, headers, first_offset, next_offset, now)
        self.producer_state.apply(updates, next_offset)
        if self.config.log_append_time:
            result = dataclasses.replace(result, log_append_time=now)
        return result

    def append_replica(self, records: Buffer, *, now_ms: int | None = None) -> list[BatchHeader]:
        """Append batches fetched from the partition's leader as they are: the leader's offsets and leader
        epochs are kept; returns their headers. They must start exactly at the log end offset and follow
        each other (StorageError otherwise: the follower's position and the leader's answer disagree)."""
        self._check_open()
        headers = validate_batches(records)
        expected = self.log_end_offset
        runs: list[tuple[int, int]] = []  # (first batch, end) of each run of batches without an offset gap
        for i, header in enumerate(headers):
            if header.base_offset < expected:
                raise StorageError(f"{self.topic}-{self.partition}: a replicated batch at offset "
                                   f"{header.base_offset} does not continue the log at {expected}")
            if header.base_offset > expected or not runs:  # a gap: the leader's cleaner removed offsets
                runs.append((i, i + 1))
            else:
                runs[-1] = (runs[-1][0], i + 1)
            expected = header.next_offset
        now = _now_ms() if now_ms is None else now_ms
        view = memoryview(records)
        spans: dict[int, tuple[int, int]] = {}  # base offset -> the batch's bytes in ``records``
        position = 0
        for header in headers:
            spans[header.base_offset] = (position, position + header.size)
            position += header.size
        for first, stop in runs:
            run = headers[first:stop]
            start, end = spans[run[0].base_offset][0], spans[run[-1].base_offset][1]
            self._write(bytearray(view[start:end]), run, run[0].base_offset, run[-1].next_offset, now)

        def is_abort(header: BatchHeader) -> bool | None:
            start, end = spans[header.base_offset]
            return marker_is_abort(bytes(view[start:end]))

        # so that this replica deduplicates and knows the open transactions once it leads
        self._index_aborts(self.producer_state.replicated(headers, is_abort))
        return headers

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, *,
                      leader_epoch: int | None = None, now_ms: int | None = None) -> AppendResult:
        """Write a transaction's commit or abort marker (a control batch, metaq/protocol/control.py) and end
        the producer's transaction here; an abort goes into the aborted-transaction index. Raises
        InvalidProducerEpochError / TransactionCoordinatorFencedError for a stale marker (Kafka's checks)."""
        self._check_open()
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = _now_ms() if now_ms is None else now_ms
        data = bytearray(build_marker(producer_id, producer_epoch, commit, coordinator_epoch, now))
        headers = validate_batches(data)
        if leader_epoch is not None:
            set_leader_epoch(data, headers, leader_epoch)
        first_offset = self.log_end_offset
        next_offset = assign_offsets(data, headers, first_offset)
        result = self._write(data, headers, first_offset, next_offset, now)
        done = self.producer_state.end_txn(producer_id, producer_epoch, coordinator_epoch, first_offset,
                                           not commit, now)
        self._index_aborts([done] if done is not None else [])
        return result

    def _index_aborts(self, completed: list[CompletedTxn]) -> None:
        """Aborted transactions into the ``.txnindex`` of the active segment (Kafka's updateTxnIndex)."""
        for txn in completed:
            if txn.aborted:
                unstable = self.producer_state.first_unstable_offset()
                self.txn_index.append(self._bases[-1], AbortedTxn(
                    txn.first_offset, txn.producer_id, txn.last_offset,
                    txn.last_offset + 1 if unstable is None else unstable))

    def last_stable_offset(self, high_watermark: int) -> int:
        """What read_committed consumers may read up to: the first offset of the oldest open transaction,
        at most the high watermark (Kafka's UnifiedLog.lastStableOffset)."""
        unstable = self.producer_state.first_unstable_offset()
        return high_watermark if unstable is None else min(unstable, high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in ``start..end-1`` (a read_committed Fetch's answer)."""
        return self.txn_index.overlapping(start, end)

    def _marker_of(self, header: BatchHeader) -> bool | None:
        """Whether the control batch at ``header`` (in the log) is an abort marker (replay at load)."""
        piece = self.read(header.base_offset, header.size)
        if piece is None:
            return None
        data = piece.read_bytes()
        return marker_is_abort(data) if len(data) >= header.size else None

    def _write(self, data: bytearray, headers: list[BatchHeader], first_offset: int, next_offset: int,
               now: int) -> AppendResult:
        segment = self._segments[-1]
        reason = segment.should_roll(len(data), next_offset - 1, now)
        if reason:
            segment = self._roll(reason)
        pending = segment.append(data, headers, first_offset, now)
        with self._lock:
            segment.commit(pending)
            self.log_end_offset = next_offset
            if self._first_unflushed_ms is None:
                self._first_unflushed_ms = now
        return AppendResult(
            base_offset=first_offset,
            last_offset=next_offset - 1,
            log_start_offset=self.log_start_offset,
            record_count=sum(header.record_count for header in headers),
        )

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or after ``offset`` (whole batches: a batch holding ``offset`` goes too) and
        return the new log end offset. A follower does this before fetching from a new leader whose log
        diverges from its own (KIP-101); never below the log start offset."""
        self._check_open()
        offset = max(offset, self.log_start_offset)
        if offset >= self.log_end_offset:
            return self.log_end_offset
        with self._lock:
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                doomed = self._segments.pop()
                self._bases.pop()
                _remove_quietly(doomed)
                self._dir_dirty = True
            segment = self._segments[-1]
            try:
                segment.truncate_to(offset)
            except OSError as e:
                raise StorageError(f"cannot truncate {self.topic}-{self.partition} to {offset}: {e}") from e
            self.log_end_offset = segment.next_offset
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.txn_index.truncate_to(self.log_end_offset)
        logger.info("Truncated log %s-%d to offset %d", self.topic, self.partition, self.log_end_offset)
        self._rebuild_producer_state(_now_ms())  # batches of the cut tail must not count as written
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart empty at ``offset``: a follower whose log ends below the leader's
        log start (retention or DeleteRecords on the leader) continues from there, as Kafka's
        ``truncateFullyAndStartAt``."""
        self._check_open()
        with self._lock:
            old, self._segments, self._bases = self._segments, [], []
        for segment in old:
            _remove_quietly(segment)
        new = LogSegment.create(self.directory, offset, self.config)
        with self._lock:
            self._segments, self._bases = [new], [offset]
            self.log_start_offset = self.log_end_offset = self.recovery_point = offset
            self._dir_dirty = True
        self.producer_state.clear(offset)
        self.producer_state.delete_snapshots(above=-1)
        logger.warning("Log %s-%d emptied and restarted at offset %d", self.topic, self.partition, offset)

    def _check_sizes(self, headers: list[BatchHeader], total: int) -> None:
        limit = self.config.max_message_bytes
        for header in headers:
            if header.size > limit:
                raise MessageSizeTooLargeError(
                    f"{self.topic}-{self.partition}: a batch of {header.size} bytes exceeds the maximum of"
                    f" {limit} bytes (message.max.bytes)"
                )
        if total > self.config.segment_bytes:  # Kafka's UnifiedLog.append: RecordBatchTooLargeException
            raise RecordListTooLargeError(
                f"{self.topic}-{self.partition}: {total} bytes of records exceed the segment size"
                f" {self.config.segment_bytes} (log.segment.bytes)"
            )

    def _roll(self, reason: str) -> LogSegment:
        """Start a new active segment at the log end offset."""
        old = self._segments[-1]
        old.deactivate()  # first: if it fails (it cuts a failed append's bytes), nothing was created
        if self.producer_state.map_end_offset == self.log_end_offset:
            self.producer_state.take_snapshot()  # the state at the new segment's base offset, as Kafka
        new = LogSegment.create(self.directory, self.log_end_offset, self.config)
        with self._lock:
            old.dirty = True  # the final time index entry
            self._segments.append(new)
            self._bases.append(new.base_offset)
            self._dir_dirty = True
        logger.info(
            "Rolled log %s-%d (%s): new segment at offset %d",
            self.topic,
            self.partition,
            reason,
            new.base_offset,
        )
        return new

    # ---------------------------------------------------------------------------------------- flushing

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

    # ---------------------------------------------------------------------------------------- reading

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchSlice | None:
        """Bytes to answer a fetch at ``offset``: whole batches from the one holding ``offset``, at most
        ``max_bytes`` (the last batch may be cut; a first batch larger than ``max_bytes`` is returned whole),
        all from one segment. None at the log end (or at ``max_offset``, a consumer's high watermark, past
        which nothing is returned); OffsetOutOfRangeError outside the log."""
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}"
                f" (log start {self.log_start_offset}, log end {self.log_end_offset})"
            )
        if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
            return None
        segments = self._segments
        try:
            for i in range(max(0, bisect_right(self._bases, offset) - 1), len(segments)):
                found = segments[i].read(offset, max_bytes, max_offset)
                if found is not None:
                    return found
        except OSError as e:
            raise StorageError(f"cannot read {self.topic}-{self.partition} at offset {offset}: {e}") from e
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        """The offset and timestamp of the first record whose timestamp is >= ``timestamp_ms``, or None.

        The special ListOffsets values -1 (latest) and -2 (earliest) are the caller's business."""
        self._check_open()
        try:
            for segment in list(self._segments):
                if segment.max_timestamp >= timestamp_ms:
                    found = segment.find_offset_for_timestamp(timestamp_ms)
                    if found is not None:
                        # not below DeleteRecords' start
                        return TimestampOffset(max(found.offset, self.log_start_offset), found.timestamp)
        except OSError as e:
            raise StorageError(f"cannot search {self.topic}-{self.partition} by timestamp: {e}") from e
        return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """The offset and timestamp of the first record with the largest timestamp in the log (ListOffsets
        ``-3``, KIP-734), or None for an empty log: the exact record, even inside a compressed batch."""
        self._check_open()
        largest = max((segment.max_timestamp for segment in list(self._segments)), default=-1)
        return None if largest < 0 else self.offset_for_timestamp(largest)

    # ---------------------------------------------------------------------------------------- retention

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

    def update_config(self, config: LogConfig) -> None:
        """A topic config change: retention uses it at its next run, the active segment's roll check at
        the next append (segments read their config when they decide to roll)."""
        with self._lock:
            self.config = config
            for segment in self._segments:
                segment.config = config

    def roll(self, reason: str) -> None:
        """Start a new segment now (unless the active one is empty): a compacting writer starts its rewrite
        in a fresh segment so that everything before it can later be deleted whole."""
        self._check_open()
        if self._segments[-1].size:
            self._roll(reason)

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
        now = _now_ms()
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
            _remove_quietly(segment)

    # ---------------------------------------------------------------------------------------- producer state

    def load_producer_state(self, now_ms: int | None = None) -> None:
        """At open: the newest snapshot plus a replay of the batches after it (Kafka's loadProducerState);
        snapshot files that are neither the newest nor at a segment base are removed."""
        self._rebuild_producer_state(_now_ms() if now_ms is None else now_ms)
        offsets = self.producer_state.snapshot_offsets()
        bases = set(self._bases)
        for offset in offsets[:-1]:
            if offset not in bases:
                self.producer_state.snapshot_path(offset).unlink(missing_ok=True)

    def _rebuild_producer_state(self, now_ms: int) -> None:
        start = self.producer_state.load_snapshot(self._bases[0], self.log_end_offset, now_ms)
        replayed = 0
        try:
            for i in range(max(0, bisect_right(self._bases, start) - 1), len(self._segments)):
                headers = [h for h in self._segments[i].headers_from(start) if h.last_offset >= start]
                replayed += len(headers)
                self._index_aborts(self.producer_state.replicated(headers, self._marker_of))
        except OSError as e:
            raise StorageError(f"cannot read {self.topic}-{self.partition} to rebuild producer state: {e}") from e
        self.producer_state.map_end_offset = self.log_end_offset
        if replayed:
            logger.info("Producer state of %s-%d: snapshot at %d, %d batches replayed, %d producers",
                        self.topic, self.partition, start, replayed, len(self.producer_state.producers))

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; return how many."""
        return self.producer_state.remove_expired(now_ms)

    # ---------------------------------------------------------------------------------------- misc

    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def segment_count(self) -> int:
        return len(self._segments)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    def segment_offsets_and_times(self) -> list[tuple[int, int]]:
        """(first offset at or after the log start, last modified ms) of each segment, oldest first: what
        ListOffsets v0 answers from (metaq/broker/handlers/list_offsets.py)."""
        with self._lock:
            segments = list(self._segments)
        return [(max(segment.base_offset, self.log_start_offset), segment.last_modified_ms())
                for segment in segments]

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.topic}-{self.partition} is closed")

    def close(self) -> None:
        """Index the active segment's largest timestamp, fsync what is dirty, close every file. Segments
        waiting for deletion are removed now."""
        if self._closed:
            return
        active = self._segments[-1]
        entries = len(active.time_index)
        active.time_index.maybe_append(active.max_timestamp, active.offset_of_max_timestamp)
        if len(active.time_index) != entries:
            with self._lock:
                active.dirty = True
        try:
            self.flush()
            if self.producer_state.map_end_offset == self.log_end_offset:
                self.producer_state.take_snapshot()  # a clean restart needs no replay
        finally:
            self._close_files()

    def abandon(self) -> None:
        """Close every file without flushing or snapshotting: the log's directory failed
        (metaq/broker/log/log_dirs.py), so nothing more is written to it."""
        if not self._closed:
            self._close_files()

    def _close_files(self) -> None:
        with self._flush_lock, self._lock:
            self._closed = True
            segments = list(self._segments)
            pending, self._pending_deletes = self._pending_deletes, []
        for segment in segments:
            segment.close()
        for _, segment in pending:
            _remove_quietly(segment)

    def delete(self) -> None:
        """Close without flushing and remove the whole partition directory (the partition is gone)."""
        if not self._closed:
            self._close_files()
        # Rename first: a crash mid-removal leaves a "-delete" directory that the next start removes,
        # never a half-deleted log that would be loaded again.
        doomed = self.directory.with_name(delete_dir_name(self.topic, self.partition))
        try:
            self.directory.rename(doomed)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StorageError(f"cannot delete log {self.directory}: {e.strerror}") from e
        shutil.rmtree(doomed, ignore_errors=True)
        logger.info("Deleted log %s-%d (%s)", self.topic, self.partition, self.directory)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition},"
            f" offsets {self.log_start_offset}..{self.log_end_offset}, {len(self._segments)} segments)"
        )


DELETE_DIR_SUFFIX = "-delete"
MAX_FILE_NAME = 255  # bytes of one path component on the file systems Kafka runs on (NAME_MAX)


def delete_dir_name(topic: str, partition: int) -> str:
    """The name a deleted partition's directory is renamed to before removal, as Kafka's
    ``LocalLog.logDirNameWithSuffixCappedLength`` makes it: ``<topic>-<partition>.<uuid>-delete``, the topic cut so
    the name keeps within 255 bytes (a legal 249-character topic would otherwise fail the rename)."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[:MAX_FILE_NAME - len(suffix)] + suffix


def _fsync_all(files: list[SegmentFile]) -> None:
    """fsync ``files``, held meanwhile (an eviction by the open-files cache cannot close them under us)."""
    for file in files:
        os.fsync(file.fileno())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _remove_quietly(segment: LogSegment) -> None:
    try:
        segment.remove()
    except OSError as e:
        logger.warning("Cannot remove deleted segment %s: %s", segment.log_path, e)


def _clean_directory(directory: Path) -> list[int]:
    """Startup housekeeping; return the sorted base offsets of the segments (``.log`` files).

    Completes or rolls back interrupted cleanings (``.swap``, ``.cleaned``: metaq/broker/log/cleaner/swap.py),
    removes leftovers of interrupted deletes (``.deleted``) and index files without a ``.log``. Other files
    are left alone."""
    recover_swaps(directory)
    logs: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.name.endswith(_LEFTOVER_SUFFIXES):
            logger.info("Removing leftover file %s", path)
            path.unlink(missing_ok=True)
            continue
        match = _SEGMENT_FILE.match(entry.name)
        if match is None:
            if entry.name.endswith(LOG_SUFFIX):
                logger.warning("Ignoring %s: not a segment file name", path)
            continue
        base = int(match.group(1))
        if match.group(2) == LOG_SUFFIX:
            logs.add(base)
        else:
            indexes.append((base, path))
    for base, path in indexes:
        if base not in logs:
            logger.warning("Removing index %s: it has no %s", path, segment_file_name(base, LOG_SUFFIX))
            path.unlink(missing_ok=True)
    return sorted(logs)


def _load_segments(
    directory: Path, bases: list[int], config: LogConfig, *, recover: bool, recovery_point: int
) -> list[LogSegment]:
    """Open every segment; recover those from the one holding ``recovery_point`` if ``recover``.

    Each segment is cut at its own first invalid batch, and a cut never deletes later segments. The rule
    rests on one invariant: a segment is rolled at the log end offset, so its base offset is exactly where
    the previous segment's acknowledged data ends. Hence, for segment ``i`` followed by segment ``i+1``:

    * a batch of segment ``i`` reaching ``base(i+1)`` was never acknowledged (an append that failed after
      writing, e.g. on a full disk, before the log rolled): it is invalid and cut like a torn tail;
    * if segment ``i``, once cut, ends exactly at ``base(i+1)``, what was cut was never acknowledged either
      (a torn failed append), and the later segments continue the valid prefix: nothing was lost;
    * if it ends below ``base(i+1)``, acknowledged offsets in between are gone (unflushed data lost in a
      power failure, or corruption). That is logged as an error, but the later segments, whose batches are
      validated on their own, are still kept: Kafka deletes them because a replica can refill them; a
      single copy cannot, and deleting them would lose more acknowledged data and hand their offsets to new
      messages that consumers who already read those offsets would silently skip. The log keeps a gap,
      which fetches step over (a read in it is answered from the next batch, as after compaction).
    """
    first_to_recover = max(0, bisect_right(bases, recovery_point) - 1) if recover else len(bases)
    segments: list[LogSegment] = []
    try:
        for i, base in enumerate(bases):
            end_limit = bases[i + 1] if i + 1 < len(bases) else None
            segment, _ = LogSegment.load(directory, base, config, recover=i >= first_to_recover, end_limit=end_limit)
            segments.append(segment)
            if end_limit is not None and segment.next_offset < end_limit and not config.compact:
                logger.error(
                    "Offsets %d..%d of %s are lost: segment %s ends there, but the next segment starts at %d;"
                    " keeping the later segments",
                    segment.next_offset,
                    end_limit - 1,
                    directory,
                    segment.log_path.name,
                    end_limit,
                )
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments
