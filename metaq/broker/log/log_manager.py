"""All partition logs of a broker, spread over one or more log directories.

Each log directory holds ``<topic>-<partition>/`` subdirectories, a ``recovery-point-offset-checkpoint``
(offset up to which each log is known to be fsynced) and, between a clean shutdown and the next start, a
``.kafka_cleanshutdown`` marker that lets the next start trust the files instead of validating them, and a
``.lock`` file that the broker using the directory holds an exclusive ``flock`` on (as Kafka does), so a
second broker pointed at the same directory refuses to start instead of writing into live files.

Several directories (docs/log-dirs.md): new partitions go to the online directory holding the fewest
(:func:`metaq.broker.log.log_dirs.choose_log_dir`); a directory whose I/O fails hard goes offline with its
partitions (:meth:`LogManager.fail_dir`); a partition moved by AlterReplicaLogDirs has a future log in the
target directory until :meth:`LogManager.swap_future` replaces the current one with it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from metaq.broker.log.checkpoint import write_checkpoint
from metaq.broker.log.config import LogConfig
from metaq.broker.log.future_logs import FutureLogs
from metaq.broker.log.loader import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogLoader,
    TopicPartition,
    attempt,
)
from metaq.broker.log.log_dirs import (
    LogDirDescription,
    LogDirOfflineError,
    ReplicaDescription,
    choose_log_dir,
    is_dir_failure,
    volume_bytes,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.partition_metadata import read_topic_id, write_topic_id
from metaq.errors import StorageError, TopicError
from metaq.fileio import atomic_write

__all__ = ["LogManager"]

logger = logging.getLogger(__name__)


_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def _check_topic_partition(topic: str, partition: int) -> None:
    # The name becomes a directory: refuse anything that could escape the log dir or clash with our files.
    if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
        raise TopicError(f"illegal topic name {topic!r}: use 1-249 of [a-zA-Z0-9._-]")
    if partition < 0:
        raise TopicError(f"illegal partition {partition} for topic {topic!r}")


class LogManager(LogLoader, FutureLogs):
    """Opens, creates, flushes, checkpoints, retains and closes partition logs. Owns every partition log of the
    broker and the directory each is in, the directories' locks and which of them are offline (with their
    partitions), the topics' log configs and ids, and the future logs of moves (:class:`FutureLogs`); opening the
    logs found at start-up is :class:`LogLoader`'s.

    Every method runs on one thread (the broker's event loop), except that the logs returned by
    :meth:`flush_due` may be flushed on a worker thread."""

    def __init__(self, log_dirs: Sequence[Path], config: LogConfig, *,
                 on_dir_failure: Callable[[Path], None] | None = None) -> None:
        if not log_dirs:
            raise StorageError("no log directory configured")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.config = config
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._lock_fds: list[int] = []
        self._topic_configs: dict[str, LogConfig] = {}
        self._topic_ids: dict[TopicPartition, str] = {}  # ids checked against partition.metadata
        self._mismatches: set[tuple[TopicPartition, str]] = set()  # (partition, ZooKeeper's id) logged
        self._offline_dirs: list[Path] = []
        self._offline: dict[TopicPartition, Path] = {}  # partitions of failed directories, until a restart
        self._futures: dict[TopicPartition, PartitionLog] = {}  # AlterReplicaLogDirs moves in progress
        self._future_dir_of: dict[TopicPartition, Path] = {}
        self._preferred: dict[TopicPartition, Path] = {}  # AlterReplicaLogDirs before the log exists here
        self._found_futures: list[tuple[TopicPartition, Path, Path]] = []  # (key, log dir, path) at load
        self._pending_failures: list[tuple[Path, BaseException]] = []  # appended by checkpoint threads
        self._start_failures: list[tuple[Path, BaseException]] = []  # directories that failed to load
        self.on_dir_failure = on_dir_failure
        """Called on the event loop once per directory that goes offline."""

    # ----------------------------------------------------------------------------------------- loading

    # ----------------------------------------------------------------------------------------- topic configs

    def config_for(self, topic: str) -> LogConfig:
        """The log config of ``topic``: the broker's, with the topic's overrides (``/config/topics/<t>``)."""
        return self._topic_configs.get(topic, self.config)

    def set_topic_config(self, topic: str, config: LogConfig) -> None:
        """Use ``config`` for ``topic``'s logs from now on (retention at its next run, segment size at the
        next append's roll check), and for logs of the topic created later."""
        if config == self.config:
            self._topic_configs.pop(topic, None)
        else:
            self._topic_configs[topic] = config
        for (log_topic, _), log in [*self._logs.items(), *self._futures.items()]:
            if log_topic == topic:
                log.update_config(config)

    def topic_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` that have a log here."""
        return sorted(p for t, p in self._logs if t == topic)

    def topics(self) -> set[str]:
        return {t for t, _ in self._logs}

    def delete_topic(self, topic: str) -> list[int]:
        """Remove every local log of ``topic`` (and its config); return the partitions removed."""
        removed = [p for p in self.topic_partitions(topic) if self.delete_log(topic, p)]
        self._topic_configs.pop(topic, None)
        if removed:
            self.checkpoint_log_start_offsets()  # a topic re-created later must not inherit its starts
        return removed

    # ----------------------------------------------------------------------------------------- access

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        """The log of ``topic``-``partition``, created if needed in the directory AlterReplicaLogDirs asked
        for, else in the online one holding the fewest logs. LogDirOfflineError if its directory failed."""
        log = self._logs.get((topic, partition))
        if log is not None:
            return log
        self._check_online(topic, partition)
        _check_topic_partition(topic, partition)
        preferred = self._preferred.pop((topic, partition), None)
        online = self.online_dirs()
        log_dir = preferred if preferred in online else choose_log_dir(online, self._partition_counts())
        log = PartitionLog.open(log_dir / f"{topic}-{partition}", topic, partition, self.config_for(topic),
                                recover=False)
        self._logs[(topic, partition)] = log
        self._dir_of[(topic, partition)] = log_dir
        logger.info("Created log %s-%d in %s", topic, partition, log_dir)
        return log

    def topic_id_matches(self, topic: str, partition: int, topic_id: str) -> bool:
        """Whether the log of ``topic``-``partition`` belongs to the topic with id ``topic_id``.

        The first time, the id is recorded in the log's ``partition.metadata``; a log recorded for another id
        is of an earlier topic of the same name (re-created, e.g. after ZooKeeper lost its data). It is
        refused, never deleted: that is left to an operator, told once by an error line."""
        key = (topic, partition)
        if self._topic_ids.get(key) == topic_id:
            return True
        log = self.get_or_create(topic, partition)
        found = read_topic_id(log.directory)
        if found is None:
            write_topic_id(log.directory, topic_id)
        elif found != topic_id:
            self._report_mismatch(key, log.directory, found, topic_id)
            return False
        self._topic_ids[key] = topic_id
        return True

    def _report_mismatch(self, key: TopicPartition, directory: Path, found: str, topic_id: str) -> None:
        """One error line per partition and ZooKeeper id: clients retry, the log must not fill up."""
        if (key, topic_id) in self._mismatches:
            return
        self._mismatches.add((key, topic_id))
        logger.error(
            "Refusing to serve %s-%d: log directory %s holds topic id %s but topic %s in ZooKeeper has id %s (the "
            "topic was deleted and re-created): stop the broker, delete or move that directory, and start it "
            "again to serve the partition from empty", key[0], key[1], directory, found, key[0], topic_id)

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    # ----------------------------------------------------------------------------------------- directories

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self._offline_dirs]

    def offline_dirs(self) -> list[Path]:
        return list(self._offline_dirs)

    def offline_partitions(self) -> list[TopicPartition]:
        """Partitions whose log is in a failed directory (offline here until a restart)."""
        return sorted(self._offline)

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._offline

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        """The directory holding the partition's current log (None if it has none here)."""
        key = (topic, partition)
        return self._dir_of.get(key) or self._offline.get(key)

    def _partition_counts(self) -> dict[Path, int]:
        counts: dict[Path, int] = {}
        for log_dir in [*self._dir_of.values(), *self._future_dir_of.values()]:
            counts[log_dir] = counts.get(log_dir, 0) + 1
        return counts

    def _check_online(self, topic: str, partition: int) -> None:
        where = self._offline.get((topic, partition))
        if where is not None:
            raise LogDirOfflineError(f"{topic}-{partition} is offline: its log directory {where} failed")

    def handle_error(self, topic: str, partition: int, error: BaseException) -> bool:
        """Called where an operation on a partition's log failed: a hard I/O error
        (:func:`metaq.broker.log.log_dirs.is_dir_failure`) takes the log's directory offline. True if so."""
        key = (topic, partition)
        log_dir = self._dir_of.get(key)
        if log_dir is None or not is_dir_failure(error):
            return False
        self.fail_dir(log_dir, error)
        return True

    def fail_dir(self, log_dir: Path, error: BaseException | str) -> None:
        """Take ``log_dir`` offline (Kafka's LogDirFailureChannel + ``LogManager.handleLogDirFailure``): its
        logs and future logs are closed without flushing and their partitions answer KAFKA_STORAGE_ERROR here
        until the broker restarts; :attr:`on_dir_failure` tells the broker, which reports it in ZooKeeper."""
        if log_dir in self._offline_dirs or log_dir not in self.log_dirs:
            return
        self._offline_dirs.append(log_dir)
        doomed = [key for key, d in self._dir_of.items() if d == log_dir]
        for key in doomed:
            log = self._logs.pop(key)
            self._dir_of.pop(key)
            self._topic_ids.pop(key, None)
            self._offline[key] = log_dir
            attempt(log.abandon, f"close {key[0]}-{key[1]}")
        for key in [k for k, d in self._future_dir_of.items() if d == log_dir]:
            self.abandon_future(*key)
        for key in [k for k in self._future_dir_of if k in self._offline]:
            self.abandon_future(*key)  # the current log went offline: its move cannot finish
        logger.error("Log directory %s failed (%s): %d partitions offline on this broker: %s%s", log_dir, error,
                     len(doomed), ", ".join(f"{t}-{p}" for t, p in sorted(doomed)[:20]),
                     "" if self.online_dirs() else "; no log directory is left online")
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir)

    def describe(self, high_watermark: Callable[[PartitionLog], int]) -> list[LogDirDescription]:
        """DescribeLogDirs: each directory with its current and future logs (an offline one with none).
        ``high_watermark`` gives a current log's HW (its offset lag is the log end minus that)."""
        result = []
        for log_dir in self.log_dirs:
            if log_dir in self._offline_dirs:
                result.append(LogDirDescription(log_dir, online=False))
                continue
            replicas = [ReplicaDescription(key[0], key[1], log.size_bytes(),
                                           max(0, log.log_end_offset - high_watermark(log)), False)
                        for key, log in sorted(self._logs.items()) if self._dir_of[key] == log_dir]
            for key, future in sorted(self._futures.items()):
                if self._future_dir_of[key] == log_dir:
                    current = self._logs.get(key)
                    lag = max(0, current.log_end_offset - future.log_end_offset) if current is not None else 0
                    replicas.append(ReplicaDescription(key[0], key[1], future.size_bytes(), lag, True))
            total, usable = volume_bytes(log_dir)
            result.append(LogDirDescription(log_dir, True, replicas, total, usable))
        return result

    # ----------------------------------------------------------------------------------------- future logs

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove a partition's log; False if there was none."""
        self.abandon_future(topic, partition)
        self._preferred.pop((topic, partition), None)
        log = self._logs.pop((topic, partition), None)
        self._dir_of.pop((topic, partition), None)
        self._topic_ids.pop((topic, partition), None)
        if log is None:
            return False
        log.delete()
        return True

    # ----------------------------------------------------------------------------------------- upkeep

    def flush_due(self, now_ms: int) -> list[PartitionLog]:
        """Logs that should be flushed now: too many unflushed messages, unflushed data older than
        ``flush_interval_ms``, or a rolled segment not flushed yet (Kafka flushes segments when they roll)."""
        due: list[PartitionLog] = []
        for log in self._logs.values():
            config = log.config  # the topic's flush.messages may override the broker's
            oldest = log.oldest_unflushed_ms()
            if (
                log.unflushed_messages() >= config.flush_interval_messages
                or (
                    config.flush_interval_ms is not None
                    and oldest is not None
                    and now_ms - oldest >= config.flush_interval_ms
                )
                or log.has_unflushed_rolled_segments()
            ):
                due.append(log)
        return due

    def checkpoint_recovery_points(self) -> None:
        """Atomically write each directory's recovery-point checkpoint (and the log start offsets)."""
        by_dir: dict[Path, dict[TopicPartition, int]] = {log_dir: {} for log_dir in self.online_dirs()}
        for key, log in self._logs.items():
            by_dir[self._dir_of[key]][key] = log.recovery_point
        for log_dir, points in by_dir.items():
            self._write_dir_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT, points)
        self.checkpoint_log_start_offsets()

    def _write_dir_checkpoint(self, log_dir: Path, name: str, entries: dict[TopicPartition, int]) -> None:
        """Write one directory's checkpoint. A hard I/O error is kept for :meth:`apply_dir_failures` instead of
        raised (checkpoints are written on a worker thread, and only the event loop may take a directory
        offline), so that the other directories' checkpoints are still written."""
        try:
            write_checkpoint(log_dir / name, entries)
        except (StorageError, OSError) as e:
            if not is_dir_failure(e):
                raise
            self._pending_failures.append((log_dir, e))

    def apply_dir_failures(self) -> None:
        """Event loop: take offline the directories whose checkpoint write failed hard."""
        pending, self._pending_failures = self._pending_failures, []
        for log_dir, error in pending:
            self.fail_dir(log_dir, error)

    def checkpoint_log_start_offsets(self) -> None:
        """Atomically write each directory's ``log-start-offset-checkpoint``: the logs whose start was moved
        inside their first segment (DeleteRecords), so that the move survives a restart."""
        by_dir: dict[Path, dict[TopicPartition, int]] = {log_dir: {} for log_dir in self.online_dirs()}
        for key, log in self._logs.items():
            if log.log_start_offset > log.segment_base_offsets()[0]:
                by_dir[self._dir_of[key]][key] = log.log_start_offset
        for log_dir, starts in by_dir.items():
            self._write_dir_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT, starts)

    def delete_records(self, topic: str, partition: int, offset: int, now_ms: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` and persist it; return the new start."""
        log = self._logs.get((topic, partition))
        if log is None:
            raise TopicError(f"no log for {topic}-{partition} on this broker")
        start = log.delete_records_before(offset, now_ms)
        self.checkpoint_log_start_offsets()
        return start

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; return the number of segments deleted."""
        return sum(log.delete_old_segments(now_ms) for log in self._logs.values())

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget idle idempotent producers in every log (``producer.id.expiration.ms``); return how many."""
        return sum(log.remove_expired_producers(now_ms) for log in self._logs.values())

    def shutdown(self) -> None:
        """Flush and checkpoint everything, close the logs, and mark each directory cleanly shut down (only
        if all of that succeeded: otherwise the next start recovers)."""
        failed = False
        for key in list(self._futures):  # an unfinished move is given up (docs/log-dirs.md)
            self.abandon_future(*key)
        for log in self._logs.values():
            failed |= not attempt(log.flush, f"flush {log.topic}-{log.partition}")
        failed |= not attempt(self.checkpoint_recovery_points, "write recovery points")
        for log in self._logs.values():
            failed |= not attempt(log.close, f"close {log.topic}-{log.partition}")
        self._logs.clear()
        self._dir_of.clear()
        if failed:
            logger.error("Shutdown was not clean; the next start will recover the logs")
            self.release_locks()
            return
        try:
            for log_dir in self.online_dirs():
                atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")
        finally:
            self.release_locks()  # only after the marker: no other broker may start before it is written
        logger.info("Log manager shut down cleanly")


