"""Cleaning one log, as Kafka's ``Cleaner.doClean`` (docs/compaction.md).

1. Build the offset map (key -> offset of its latest record) over the dirty section, from the first dirty offset
   up to the first uncleanable offset (the active segment, the last stable offset -- the high watermark or the
   first offset of an open transaction, whichever is lower -- or the first segment younger than
   ``min.compaction.lag.ms``), stopping early when the map is full: that pass then cleans up to the last mapped
   offset and the next pass continues from there. Records from that end on are kept as they are.
2. Rewrite every segment below that end, in groups of consecutive segments that fit in one segment, into one
   ``.cleaned`` segment keeping a record only if no later record of its key was mapped, dropping keyless records,
   records of aborted transactions, tombstones and transaction markers whose delete horizon has passed
   (:mod:`.rewrite`, :mod:`.transactions`).
3. Swap each cleaned segment in (:mod:`.swap`, :meth:`PartitionLog.replace_segments`), with a ``.txnindex`` of
   the aborts whose marker it keeps.

The heavy work (reading, filtering, writing, fsync) runs on the cleaner thread; what touches the log's segment
list runs on the broker's event loop through ``on_loop``, like every other change of a log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from metaq.broker.log.cleaner.offset_map import OffsetMap
from metaq.broker.log.cleaner.rewrite import delete_horizon, filter_batch, keys_of, with_delete_horizon
from metaq.broker.log.cleaner.swap import CLEANED_SUFFIX, fault_point, remove_cleaned, swap_in
from metaq.broker.log.cleaner.throttle import UNTHROTTLED, IoThrottle
from metaq.broker.log.cleaner.txn_tracker import TxnTracker
from metaq.broker.log.index import OffsetIndex, TimeIndex
from metaq.broker.log.txn_index import TXN_INDEX_SUFFIX, write_entries
from metaq.protocol.batches import BatchHeader, read_header
from metaq.protocol.control import marker_is_abort
from metaq.protocol.record_types import Record

if TYPE_CHECKING:
    from metaq.broker.log.config import LogConfig
    from metaq.broker.log.partition_log import PartitionLog
    from metaq.broker.log.segment import LogSegment
    from metaq.broker.log.txn_index import AbortedTxn

__all__ = ["CleanResult", "Cleaner", "HighWatermark", "LogSnapshot", "OnLoop", "log_end_offset"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class OnLoop(Protocol):
    """Runs a function on the broker's event loop and returns its result (waiting for it)."""

    def __call__(self, fn: Callable[[], T]) -> T: ...


HighWatermark = Callable[["PartitionLog"], int]
"""The high watermark of a log, called on the event loop (the replication manager owns it: the broker passes
``BrokerContext.high_watermark``)."""


def log_end_offset(log: PartitionLog) -> int:
    """The high watermark of a log nobody replicates: its log end (tests and bench)."""
    return log.log_end_offset

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class LogSnapshot:
    """What the cleaner reads of a log, captured on the event loop: its inactive segments, config, the last
    offset of each producer's last batch (those batches are kept even when emptied), its last stable offset
    (nothing from there on may be cleaned: not yet replicated, or part of an open transaction), its aborted
    transactions, and the (producer id, epoch) of producers it tracks with no batch left, only markers (their
    last marker carries the epoch that fences them: kept, as Kafka's ``RETAIN_EMPTY`` of such a marker)."""

    segments: list[LogSegment]
    config: LogConfig
    log_start_offset: int
    producer_last_offsets: frozenset[int]
    stable_offset: int
    aborted: tuple[AbortedTxn, ...] = ()
    marker_only_producers: frozenset[tuple[int, int]] = frozenset()


@dataclass
class CleanResult:
    """One cleaning of one log: the dirty range it covered and what it did."""

    first_dirty: int
    end_offset: int
    """The next first dirty offset (what the cleaner checkpoint records)."""
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    segments_replaced: int = 0
    next_horizon_ms: int | None = None
    """The earliest delete horizon of a tombstone left in the log: the log is worth cleaning again then."""
    aborted: bool = False
    touched: list[int] = field(default_factory=list)


def snapshot(log: PartitionLog, high_watermark: int) -> LogSnapshot:
    """On the event loop: what :meth:`Cleaner.clean` needs of ``log``, whose high watermark is given."""
    producers = log.producer_state.producers.values()
    last_offsets = frozenset(entry.batches[-1].last_offset for entry in producers if entry.batches)
    marker_only = frozenset((entry.producer_id, entry.epoch) for entry in producers if not entry.batches)
    return LogSnapshot(log.inactive_segments(), log.config, log.log_start_offset, last_offsets,
                       log.last_stable_offset(high_watermark),
                       tuple(log.aborted_transactions(log.log_start_offset, log.log_end_offset)), marker_only)


def first_uncleanable_offset(view: LogSnapshot, now_ms: int) -> int:
    """Where cleaning must stop: the last stable offset (at most the high watermark), or the first segment that
    is active or holds records younger than ``min.compaction.lag.ms``, whichever is lower (Kafka's
    ``LogCleanerManager.cleanableOffsets``, docs/compaction.md)."""
    lag = view.config.min_compaction_lag_ms
    for segment in view.segments:
        if lag > 0 and now_ms - segment.largest_timestamp() < lag:
            return min(segment.base_offset, view.stable_offset)
    end = view.segments[-1].next_offset if view.segments else view.log_start_offset
    return min(end, view.stable_offset)


class Cleaner:
    """Cleans logs one at a time with one offset map (one per cleaner thread); every batch read or written is
    counted by ``throttle`` (shared by the threads), which may sleep."""

    def __init__(self, offset_map: OffsetMap, on_loop: OnLoop, high_watermark: HighWatermark,
                 throttle: IoThrottle | None = None) -> None:
        self.offset_map = offset_map
        self._on_loop = on_loop
        self._high_watermark = high_watermark
        self.throttle = throttle if throttle is not None else IoThrottle(UNTHROTTLED)

    def clean(self, log: PartitionLog, first_dirty: int, now_ms: int) -> CleanResult:
        """One pass over ``log`` from ``first_dirty``; see the module doc."""
        view: LogSnapshot = self._on_loop(lambda: snapshot(log, self._high_watermark(log)))
        first_dirty = max(first_dirty, view.log_start_offset)
        upper = first_uncleanable_offset(view, now_ms)
        end = self._build_offset_map(view, first_dirty, upper)
        result = CleanResult(first_dirty, end)
        groups = _group_segments([s for s in view.segments if s.base_offset < end], view.config)
        txns = TxnTracker(view.aborted)  # one walk from the log start over every group, as Kafka's doClean
        for group in groups:
            if not self._clean_group(log, view, group, _Pass(end, now_ms, txns), result):
                result.aborted = True
                break
        logger.info("Cleaned %s-%d offsets %d..%d: %d of %d records kept, %d -> %d bytes in %d segment(s)%s",
                    log.topic, log.partition, first_dirty, end, result.records_kept, result.records_read,
                    result.bytes_read, result.bytes_written, result.segments_replaced,
                    " (aborted: the log changed)" if result.aborted else "")
        return result

    def _build_offset_map(self, view: LogSnapshot, start: int, upper: int) -> int:
        """Map keys of the dirty range ``[start, upper)``; return the end of what was mapped."""
        offset_map = self.offset_map
        offset_map.clear()
        throttle = self.throttle
        txns = TxnTracker(view.aborted, start)
        end = start
        for segment in view.segments:
            if segment.next_offset <= start or segment.base_offset >= upper:
                continue
            for header, raw in _batches(segment):
                throttle.observe(len(raw))  # as Kafka's buildOffsetMap: the bytes read count
                if header.last_offset < start:
                    continue
                if header.base_offset >= upper:
                    return end
                if header.is_control:
                    txns.on_marker(header, marker_is_abort(raw))
                    continue
                if txns.on_data(header):  # an aborted transaction's records supersede nothing
                    end = max(end, header.next_offset)
                    continue
                for offset, key, _ in keys_of(raw):
                    if offset < start or key is None:
                        continue
                    if not offset_map.put(key, offset):
                        logger.info("Offset map full (%d keys): this pass cleans up to offset %d",
                                    offset_map.size, end)
                        return end
                    end = offset + 1
                end = max(end, header.next_offset)
        return max(end, min(upper, start))

    def _clean_group(self, log: PartitionLog, view: LogSnapshot, group: list[LogSegment], cleaning: _Pass,
                     result: CleanResult) -> bool:
        offset_map = self.offset_map
        end, now_ms = cleaning.end, cleaning.now_ms
        horizon_ms = now_ms + view.config.delete_retention_ms

        def keep(header: BatchHeader, record: Record) -> bool:
            offset, _, key, value, _ = record
            if offset >= end:
                return True  # beyond what this pass mapped
            if key is None:
                return False  # keyless records have no place in a compacted log (Kafka drops them too)
            if offset < offset_map.get(key):
                return False
            if value is None:
                horizon = delete_horizon(header)
                return horizon is None or now_ms < horizon
            return True

        base = group[0].base_offset
        directory = log.directory
        writer = _CleanedWriter(directory, base, view.config, self.throttle)
        kept_markers: set[int] = set()
        try:
            for segment in group:
                for header, raw in _batches(segment):
                    result.bytes_read += len(raw)
                    self.throttle.observe(len(raw))
                    if header.is_control:
                        marker = _clean_marker(view, cleaning, header, raw, horizon_ms)
                        if marker:
                            writer.write(header, marker)
                            kept_markers.add(header.base_offset)
                            _note_horizon(result, marker)
                        continue
                    aborted = header.base_offset < end and cleaning.txns.on_data(header)
                    filtered = filter_batch(raw, header, _drop_all if aborted else keep,
                                            retain_empty=header.producer_id >= 0
                                            and header.last_offset in view.producer_last_offsets,
                                            new_horizon_ms=horizon_ms)
                    result.records_read += filtered.kept + filtered.dropped
                    result.records_kept += filtered.kept
                    if filtered.data:
                        writer.write(header, filtered.data)
                        _note_horizon(result, filtered.data)
            writer.finish(max(segment.last_modified_ms() for segment in group),
                          [txn for txn in view.aborted if txn.last_offset in kept_markers])
        except BaseException:
            writer.abandon()
            raise
        result.bytes_written += writer.size
        fault_point("cleaned")
        swap_in(directory, base)
        fault_point("swap")
        replaced: bool = self._on_loop(lambda: log.replace_segments(group, base))
        if not replaced:
            remove_cleaned(directory, base)
            return False
        result.segments_replaced += len(group)
        result.touched.append(base)
        return True


@dataclass(frozen=True)
class _Pass:
    """One cleaning of a log: the end of what was mapped, the time it runs at, its walk over transactions."""

    end: int
    now_ms: int
    txns: TxnTracker


def _drop_all(header: BatchHeader, record: Record) -> bool:
    return False  # an aborted transaction's record


def _clean_marker(view: LogSnapshot, cleaning: _Pass, header: BatchHeader, raw: bytes, horizon_ms: int) -> bytes:
    """What to write for a transaction marker (empty: nothing), as Kafka's ``cleanInto``: a marker whose
    transaction has no batch left in this walk gets a delete horizon, and goes once that has passed; one beyond
    the mapped range, or the last word of a producer with no batch left, stays as it is."""
    if header.base_offset >= cleaning.end:
        return raw
    may_go = cleaning.txns.on_marker(header, marker_is_abort(raw))
    if not may_go or (header.producer_id, header.producer_epoch) in view.marker_only_producers:
        return raw
    horizon = delete_horizon(header)
    if horizon is None:
        return with_delete_horizon(raw, header, horizon_ms)
    return b"" if cleaning.now_ms >= horizon else raw


def _note_horizon(result: CleanResult, data: bytes) -> None:
    """The log is worth cleaning again when the earliest delete horizon it keeps passes."""
    horizon = delete_horizon(read_header(data))
    if horizon is not None and (result.next_horizon_ms is None or horizon < result.next_horizon_ms):
        result.next_horizon_ms = horizon


def _batches(segment: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """Each batch of an inactive segment with its bytes."""
    file = segment.file  # held for the whole pass: the open-files cache may drop the segment's reference
    for position, header in segment.batch_positions():
        yield header, os.pread(file.fileno(), header.size, position)


def _group_segments(segments: list[LogSegment], config: LogConfig) -> list[list[LogSegment]]:
    """Consecutive segments whose total size fits one segment (and whose offsets fit its int32 relative
    offsets) are cleaned into one, as Kafka's ``groupSegmentsBySize``; a group is at least one segment."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            if (sum(s.size for s in group) + segment.size <= config.segment_bytes
                    and segment.next_offset - 1 - group[0].base_offset <= _INT32_MAX):
                group.append(segment)
                continue
        groups.append([segment])
    return groups


class _CleanedWriter:
    """Writes ``<base>.log.cleaned`` and its two indexes, as a segment's append and recovery index them."""

    def __init__(self, directory: Path, base: int, config: LogConfig, throttle: IoThrottle) -> None:
        name = f"{base:020d}"
        self._throttle = throttle
        self.path = directory / f"{name}.log{CLEANED_SUFFIX}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.index = OffsetIndex(directory / f"{name}.index{CLEANED_SUFFIX}", base, config.index_max_bytes)
        self.time_index = TimeIndex(directory / f"{name}.timeindex{CLEANED_SUFFIX}", base,
                                    config.index_max_bytes)
        self.txn_index_path = directory / f"{name}{TXN_INDEX_SUFFIX}{CLEANED_SUFFIX}"
        self.index.create()
        self.time_index.create()
        self._interval = config.index_interval_bytes
        self._last_indexed = 0
        self.size = 0
        self._max_ts, self._offset_of_max = -1, base

    def write(self, header: BatchHeader, data: bytes) -> None:
        stored = read_header(data)  # the rewritten header: its max timestamp may differ from the original's
        position = self.size
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], position + written)
        self.size += len(data)
        self._throttle.observe(len(data))
        if stored.max_timestamp > self._max_ts:
            self._max_ts, self._offset_of_max = stored.max_timestamp, header.last_offset
        if position - self._last_indexed > self._interval:
            self.index.append(header.last_offset, position)
            self.time_index.maybe_append(self._max_ts, self._offset_of_max)
            self._last_indexed = position

    def finish(self, mtime_ms: int, aborts: list[AbortedTxn]) -> None:
        """The final time index entry, the aborted-transaction index of the markers kept (``aborts``, written
        even when empty: it replaces the first old segment's), fsync everything, and the replaced segments'
        last modified time (what time-based retention of a ``compact,delete`` log and ListOffsets v0 go by, as
        Kafka)."""
        self.time_index.maybe_append(self._max_ts, self._offset_of_max)
        write_entries(self.txn_index_path, aborts)
        txn_fd = os.open(self.txn_index_path, os.O_RDONLY)
        try:
            os.fsync(txn_fd)
        finally:
            os.close(txn_fd)
        os.fsync(self._fd)
        for index in (self.index, self.time_index):
            os.fsync(index.handle().fileno())
        os.close(self._fd)
        self.index.close_file()
        self.time_index.close_file()
        os.utime(self.path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))

    def abandon(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
        self.index.delete()
        self.time_index.delete()
        self.path.unlink(missing_ok=True)
        self.txn_index_path.unlink(missing_ok=True)
