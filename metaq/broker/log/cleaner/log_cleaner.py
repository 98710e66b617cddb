"""The log cleaner's threads and bookkeeping, as Kafka's ``LogCleaner`` and ``LogCleanerManager``.

``log.cleaner.threads`` named threads (``kafka-log-cleaner-thread-<n>``, Kafka's names) each own an offset map
of ``log.cleaner.dedupe.buffer.size / threads`` bytes. A thread repeatedly takes the dirtiest log that needs
cleaning, cleans it (:mod:`.cleaner`), and records where the dirty section now starts in the log directory's
``cleaner-offset-checkpoint``; with nothing to clean it sleeps ``log.cleaner.backoff.ms``.

A log needs cleaning when its policy includes ``compact`` and either its dirty ratio (dirty bytes over
cleanable bytes, both below the first uncleanable offset) exceeds ``min.cleanable.dirty.ratio``, or a dirty
record is older than ``max.compaction.lag.ms``, or a tombstone it keeps has reached its delete horizon.

Choosing and bookkeeping run on the broker's event loop (they read the LogManager's logs); only the cleaning
itself runs on the thread. A log is cleaned by one thread at a time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from metaq.broker.log.checkpoint import read_checkpoint, write_checkpoint
from metaq.broker.log.cleaner.cleaner import (
    Cleaner,
    CleanResult,
    HighWatermark,
    OnLoop,
    first_uncleanable_offset,
    snapshot,
)
from metaq.broker.log.cleaner.config import CleanerConfig
from metaq.broker.log.cleaner.offset_map import OffsetMap
from metaq.broker.log.cleaner.throttle import IoThrottle
from metaq.errors import MetaqError, StorageError
from metaq.metrics.broker import CleanerState

if TYPE_CHECKING:
    from metaq.broker.log.log_manager import LogManager
    from metaq.broker.log.partition_log import PartitionLog

__all__ = ["CLEANER_CHECKPOINT", "CleanerStats", "LogCleaner", "LogToClean", "loop_caller"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's state as the cleaner manager sees it."""

    key: TopicPartition
    first_dirty: int
    clean_bytes: int
    dirty_bytes: int
    needs_now: bool
    """A dirty record is older than max.compaction.lag.ms, or a tombstone's delete horizon passed."""
    compaction_delay_ms: int = 0
    """How long the first dirty segment has waited beyond ``max.compaction.lag.ms`` (Kafka's
    ``LogCleanerManager.maxCompactionDelay``; 0 when not overdue)."""

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass
class CleanerStats:
    """Totals since the start (the broker's metrics read these)."""

    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    failures: int = 0
    last_ratio: dict[TopicPartition, float] | None = None
    max_compaction_delay_ms: int = 0
    """The longest compaction delay of a log at the last choice of a log (Kafka's ``PreCleanStats``)."""


def loop_caller(loop: asyncio.AbstractEventLoop) -> OnLoop:
    """An :data:`OnLoop` running functions on ``loop`` (called from another thread)."""

    def on_loop(fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result()

    return on_loop


class LogCleaner:
    """Owns the cleaner threads of a broker; :meth:`start` after the logs are loaded, :meth:`stop` before
    they are shut down."""

    def __init__(self, logs: LogManager, config: CleanerConfig, on_loop: OnLoop,
                 high_watermark: HighWatermark) -> None:
        self.logs = logs
        self.config = config
        self._on_loop = on_loop
        self._high_watermark = high_watermark
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._in_progress: set[TopicPartition] = set()
        self._horizons: dict[TopicPartition, int] = {}
        self._failed_until: dict[TopicPartition, int] = {}
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self.stats = CleanerStats(last_ratio={})
        self.throttle = IoThrottle(config.io_max_bytes_per_second, sleep=self._stop.wait)

    def start(self) -> None:
        if not self.config.enable:
            logger.info("Log cleaner disabled (log.cleaner.enable=false): compacted topics are not cleaned")
            return
        for log_dir in self.logs.log_dirs:
            self._checkpoints[log_dir] = _read_or_empty(log_dir / CLEANER_CHECKPOINT)
        for number in range(self.config.threads):
            offset_map = OffsetMap(self.config.map_bytes_per_thread)
            cleaner = Cleaner(offset_map, self._on_loop, self._high_watermark, self.throttle)
            thread = threading.Thread(target=self._run, args=(cleaner,),
                                      name=f"kafka-log-cleaner-thread-{number}", daemon=True)
            self._threads.append(thread)
            thread.start()
        logger.info("Log cleaner started: %d thread(s), %d bytes of offset map each", self.config.threads,
                    self.config.map_bytes_per_thread)

    def state(self) -> CleanerState:
        """What the broker's metrics show (read by a scrape thread: copies only)."""
        stats = self.stats
        ratios = dict(stats.last_ratio or {})
        return CleanerState(stats.runs, stats.bytes_read, stats.bytes_written, stats.records_read - stats.records_kept,
                            stats.failures, tuple((t, p, r) for (t, p), r in sorted(ratios.items())),
                            stats.max_compaction_delay_ms / 1000)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the threads (a cleaning in progress finishes its current segment group first)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)
            if thread.is_alive():
                logger.warning("Cleaner thread %s did not stop within %.0f s", thread.name, timeout_s)
        self._threads.clear()

    # ------------------------------------------------------------------------------------------ thread

    def _run(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            try:
                picked = self._on_loop(self.grab_filthiest)
            except RuntimeError:  # the event loop is gone: the broker is stopping
                return
            except (MetaqError, OSError) as e:  # a log that cannot be measured (its files are going away)
                logger.warning("Choosing a log to clean failed: %s", e)
                self._stop.wait(self.config.backoff_ms / 1000)
                continue
            if picked is None:
                self._stop.wait(self.config.backoff_ms / 1000)
                continue
            log, todo = picked
            try:
                result = cleaner.clean(log, todo.first_dirty, _now_ms())
            except (MetaqError, OSError, ValueError) as e:  # ValueError: a file closed under us (log deleted)
                logger.warning("Cleaning %s-%d failed: %s", log.topic, log.partition, e)
                self._on_loop(functools.partial(self._failed, todo.key))
                continue
            except RuntimeError:
                return
            try:
                self._on_loop(functools.partial(self._done, log, todo, result))
            except RuntimeError:
                return

    # ------------------------------------------------------------------------------------------ on the loop

    def grab_filthiest(self) -> tuple[PartitionLog, LogToClean] | None:
        """The log to clean next, marked in progress (on the event loop)."""
        now = _now_ms()
        best: tuple[PartitionLog, LogToClean] | None = None
        max_delay_ms = 0
        for log in self.logs.logs():
            key = (log.topic, log.partition)
            if not log.config.compact or key in self._in_progress or self._failed_until.get(key, 0) > now:
                continue
            if self.logs.future(*key) is not None:  # being moved to another log dir: paused, as Kafka does
                continue
            todo = self.log_to_clean(log, now)
            assert self.stats.last_ratio is not None
            self.stats.last_ratio[key] = todo.ratio
            max_delay_ms = max(max_delay_ms, todo.compaction_delay_ms)
            eligible = ((todo.needs_now and (todo.dirty_bytes > 0 or key in self._horizons))
                        or todo.ratio > log.config.min_cleanable_dirty_ratio)
            if eligible and (best is None or todo.ratio > best[1].ratio or (todo.needs_now and not best[1].needs_now)):
                best = (log, todo)
        self.stats.max_compaction_delay_ms = max_delay_ms
        if best is not None:
            self._in_progress.add(best[1].key)
        return best

    def log_to_clean(self, log: PartitionLog, now_ms: int) -> LogToClean:
        """Clean and dirty bytes of ``log`` (by whole segments) and whether it must be cleaned now."""
        key = (log.topic, log.partition)
        checkpointed = self._checkpoints.get(log.directory.parent, {}).get(key)
        first_dirty = log.log_start_offset
        if checkpointed is not None and log.log_start_offset <= checkpointed <= log.log_end_offset:
            first_dirty = checkpointed  # else: reset to the log start, as Kafka does for a stale checkpoint
        view = snapshot(log, self._high_watermark(log))
        upper = first_uncleanable_offset(view, now_ms)
        clean = dirty = 0
        first_dirty_ts: int | None = None
        for segment in view.segments:
            if segment.next_offset <= first_dirty:
                clean += segment.size
            elif segment.base_offset < upper:
                dirty += segment.size
                if first_dirty_ts is None and segment.size:
                    first_dirty_ts = segment.largest_timestamp()
        lag = log.config.max_compaction_lag_ms
        delay = max(0, now_ms - lag - first_dirty_ts) if first_dirty_ts is not None else 0
        horizon = self._horizons.get(key)
        return LogToClean(key, first_dirty, clean, dirty,
                          needs_now=delay > 0 or (horizon is not None and now_ms >= horizon),
                          compaction_delay_ms=delay)

    def _done(self, log: PartitionLog, todo: LogToClean, result: CleanResult) -> None:
        self._in_progress.discard(todo.key)
        self.stats.runs += 1
        self.stats.bytes_read += result.bytes_read
        self.stats.bytes_written += result.bytes_written
        self.stats.records_read += result.records_read
        self.stats.records_kept += result.records_kept
        if result.aborted:
            return
        if result.next_horizon_ms is None:
            self._horizons.pop(todo.key, None)
        else:
            self._horizons[todo.key] = result.next_horizon_ms
        log_dir = log.directory.parent
        entries = self._checkpoints.setdefault(log_dir, {})
        entries[todo.key] = result.end_offset
        live = {(other.topic, other.partition) for other in self.logs.logs()}
        for stale in [key for key in entries if key not in live]:
            del entries[stale]
        try:
            write_checkpoint(log_dir / CLEANER_CHECKPOINT, entries)
        except (StorageError, OSError) as e:
            logger.warning("Cannot write %s: %s", log_dir / CLEANER_CHECKPOINT, e)

    def _failed(self, key: TopicPartition) -> None:
        self._in_progress.discard(key)
        self.stats.failures += 1
        self._failed_until[key] = _now_ms() + self.config.backoff_ms


def _read_or_empty(path: Path) -> dict[TopicPartition, int]:
    try:
        return read_checkpoint(path)
    except StorageError as e:
        logger.warning("%s; cleaning every compacted log of %s from its start", e, path.parent)
        return {}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
