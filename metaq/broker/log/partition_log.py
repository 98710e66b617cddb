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
import shutil
import threading
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from metaq.broker.log.cleaner.keys import require_keys
from metaq.broker.log.config import LogConfig
from metaq.broker.log.flushing import LogFlushing
from metaq.broker.log.log_dirs import delete_dir_name
from metaq.broker.log.partition_reads import LogReads
from metaq.broker.log.producer_state import CompletedTxn, ProducerStateManager
from metaq.broker.log.retention import LogRetention, remove_quietly, wall_clock_ms
from metaq.broker.log.segment import LogSegment
from metaq.broker.log.segment_loading import clean_directory, load_segments
from metaq.broker.log.txn_index import AbortedTxn, TxnIndex
from metaq.broker.log.validator import decompressed_limit, validate_records
from metaq.errors import MessageSizeTooLargeError, RecordListTooLargeError, StorageError
from metaq.protocol.batches import (
    BatchHeader,
    Buffer,
    assign_offsets,
    log_append_time,
    set_leader_epoch,
    validate_batches,
)
from metaq.protocol.control import build_marker, marker_is_abort

__all__ = ["AppendResult", "PartitionLog"]

logger = logging.getLogger(__name__)


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


class PartitionLog(LogRetention, LogFlushing, LogReads):
    """Append-only, segmented log of one partition. Use :meth:`open`. Owns its directory's segments (the last one
    active), the log start and end offsets and the recovery point, the partition's producer state and aborted
    transactions index, and the lock that is all a concurrent flush shares with the event loop (module
    docstring). Reads, flushing and retention are the mixins :class:`LogReads`, :class:`LogFlushing` and
    :class:`LogRetention`."""

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
        :func:`load_segments` for why later segments are kept), and their indexes rebuilt. Either way
        leftovers of interrupted operations are cleaned and indexes that fail a sanity check are rebuilt."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            bases = clean_directory(directory)
            segments = load_segments(directory, bases, config, recover=recover, recovery_point=recovery_point)
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
        now = wall_clock_ms() if now_ms is None else now_ms
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
        now = wall_clock_ms() if now_ms is None else now_ms
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
        now = wall_clock_ms() if now_ms is None else now_ms
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
                remove_quietly(doomed)
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
        self._rebuild_producer_state(wall_clock_ms())  # batches of the cut tail must not count as written
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart empty at ``offset``: a follower whose log ends below the leader's
        log start (retention or DeleteRecords on the leader) continues from there, as Kafka's
        ``truncateFullyAndStartAt``."""
        self._check_open()
        with self._lock:
            old, self._segments, self._bases = self._segments, [], []
        for segment in old:
            remove_quietly(segment)
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

    # ---------------------------------------------------------------------------------------- reading

    # ---------------------------------------------------------------------------------------- retention

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

    # ---------------------------------------------------------------------------------------- producer state

    def load_producer_state(self, now_ms: int | None = None) -> None:
        """At open: the newest snapshot plus a replay of the batches after it (Kafka's loadProducerState);
        snapshot files that are neither the newest nor at a segment base are removed."""
        self._rebuild_producer_state(wall_clock_ms() if now_ms is None else now_ms)
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
            remove_quietly(segment)

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


