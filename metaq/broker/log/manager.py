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

import errno
import fcntl
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from metaq.broker.log.checkpoint import read_checkpoint, write_checkpoint
from metaq.broker.log.config import LogConfig
from metaq.broker.log.log_dirs import (
    DELETE_DIR_SUFFIX,
    LogDirDescription,
    LogDirOfflineError,
    ReplicaDescription,
    choose_log_dir,
    delete_dir_name,
    future_dir_name,
    is_dir_failure,
    parse_future_dir_name,
    volume_bytes,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.partition_metadata import read_topic_id, write_topic_id
from metaq.errors import MetaqError, StorageError, TopicError
from metaq.fileio import atomic_write, fsync_dir

__all__ = ["CLEAN_SHUTDOWN_FILE", "LOCK_FILE", "RECOVERY_POINT_CHECKPOINT", "LogManager", "parse_log_dir_name"]

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"  # offsets moved by DeleteRecords (as Kafka)
LOCK_FILE = ".lock"

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

TopicPartition = tuple[str, int]


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``"my.topic-name-3"`` -> ``("my.topic-name", 3)``: topics may contain '-', so split on the last one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        return None
    return topic, int(partition)


def _check_topic_partition(topic: str, partition: int) -> None:
    # The name becomes a directory: refuse anything that could escape the log dir or clash with our files.
    if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
        raise TopicError(f"illegal topic name {topic!r}: use 1-249 of [a-zA-Z0-9._-]")
    if partition < 0:
        raise TopicError(f"illegal partition {partition} for topic {topic!r}")


class LogManager:
    """Opens, creates, flushes, checkpoints, retains and closes partition logs.

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

    def load(self) -> None:
        """Lock every directory, then open every log, recovering them unless the last shutdown was clean.

        A directory that cannot be created, locked or read (an I/O error) is offline for this run, the others
        are loaded (Kafka's ``LogManager.createAndValidateLogDirs``, ``lockLogDirs`` and ``loadLogs``,
        docs/log-dirs.md); :meth:`claim_assigned` then decides about the partitions that may be in it.
        StorageError (and nothing touched) if another process holds a directory's lock or if no directory is
        left (Kafka halts: "none of the specified log dirs ... can be created or validated")."""
        try:
            for log_dir in self.log_dirs:
                try:
                    self._lock_fds.append(_lock_dir(log_dir))
                except OSError as e:
                    self._fail_at_start(log_dir, e)
            for log_dir in self.online_dirs():
                try:
                    self._load_dir(log_dir)
                except (OSError, StorageError) as e:
                    if not _io_failure(e):
                        raise
                    self._fail_at_start(log_dir, e)
            if not self.online_dirs():
                raise StorageError(f"none of the log directories {', '.join(map(str, self.log_dirs))} can be "
                                   f"created or read: " + "; ".join(f"{d}: {e}" for d, e in self._start_failures))
            self._resolve_found_futures()
        except BaseException:
            for log in self._logs.values():  # opened before the failure: nobody else will close them
                _try(log.close, f"close {log.topic}-{log.partition}")
            self._logs.clear()
            self._dir_of.clear()
            self.release_locks()
            raise

    def _fail_at_start(self, log_dir: Path, error: BaseException) -> None:
        """``log_dir`` failed while loading: the logs opened from it are closed and it is offline."""
        for key in [k for k, d in self._dir_of.items() if d == log_dir]:
            _try(self._logs.pop(key).close, f"close {key[0]}-{key[1]}")
            del self._dir_of[key]
        self._found_futures = [f for f in self._found_futures if f[1] != log_dir]
        self._offline_dirs.append(log_dir)
        self._start_failures.append((log_dir, error))
        logger.error("Log directory %s failed at start-up (%s): offline until the broker restarts with it "
                     "repaired", log_dir, error)

    def claim_assigned(self, assigned: Iterable[TopicPartition]) -> list[TopicPartition]:
        """With a directory that failed at start-up: each of ``assigned`` (the partitions ZooKeeper assigns to
        this broker at start-up) without a log in an online directory may have its log in the failed one, so it
        is offline here, never created empty in its place (Kafka's ``getOrCreateLog`` refuses a log that is not
        new while a directory is offline; a partition assigned later is new and is created). Returns those."""
        if not self._start_failures:
            return []
        where = self._start_failures[0][0]
        unknown = sorted(k for k in set(assigned) if k not in self._logs and k not in self._offline)
        for key in unknown:
            self._offline[key] = where
        if unknown:
            logger.error("%d partitions assigned to this broker have no log in its online directories and may be "
                         "in the failed %s: offline here: %s%s", len(unknown),
                         ", ".join(str(d) for d, _ in self._start_failures),
                         ", ".join(f"{t}-{p}" for t, p in unknown[:20]), " ..." if len(unknown) > 20 else "")
        return unknown

    def release_locks(self) -> None:
        """Let another process use the directories (done by :meth:`shutdown`; or as a crash would)."""
        fds, self._lock_fds = self._lock_fds, []
        for fd in fds:
            os.close(fd)  # closing the only descriptor of the open file releases its flock

    def _load_dir(self, log_dir: Path) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        points = {} if clean else self._read_recovery_points(log_dir)
        starts = _read_checkpoint_or_warn(
            log_dir / LOG_START_OFFSET_CHECKPOINT, "log start offsets fall back to the first segments"
        )
        loaded = 0
        for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                logger.info("Removing partially deleted log %s", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            future = parse_future_dir_name(entry.name)
            if future is not None:
                self._found_futures.append((future, log_dir, Path(entry.path)))
                continue
            parsed = parse_log_dir_name(entry.name)
            if parsed is None:
                logger.warning("Ignoring directory %s: not a <topic>-<partition> log", entry.path)
                continue
            if parsed in self._logs:
                raise StorageError(f"duplicate log for {parsed[0]}-{parsed[1]}: {self._dir_of[parsed] / entry.name} "
                                   f"and {entry.path}")
            self._logs[parsed] = PartitionLog.open(
                Path(entry.path),
                parsed[0],
                parsed[1],
                self.config_for(parsed[0]),
                recover=not clean,
                recovery_point=points.get(parsed, 0),
            )
            if parsed in starts:
                self._logs[parsed].restore_log_start_offset(starts[parsed])
            self._dir_of[parsed] = log_dir
            loaded += 1
        if clean:
            marker.unlink()
        logger.info("Loaded %d logs from %s (%s shutdown)", loaded, log_dir, "clean" if clean else "unclean")

    def _resolve_found_futures(self) -> None:
        """A future log left by a move the broker did not finish: dropped if the partition's current log is
        there (the move is given up; the operator runs it again), else it is the move's result, interrupted
        between retiring the old log and renaming the future one (:meth:`swap_future`), and it is loaded."""
        found, self._found_futures = self._found_futures, []
        for key, log_dir, path in found:
            if key in self._logs:
                logger.warning("Removing %s: an unfinished move of %s-%d to %s (run it again)", path, *key, log_dir)
                shutil.rmtree(path, ignore_errors=True)
                continue
            target = log_dir / f"{key[0]}-{key[1]}"
            logger.warning("Completing the interrupted move of %s-%d: %s becomes %s", *key, path, target)
            path.rename(target)
            fsync_dir(log_dir)
            self._logs[key] = PartitionLog.open(target, key[0], key[1], self.config_for(key[0]), recover=True)
            self._dir_of[key] = log_dir

    @staticmethod
    def _read_recovery_points(log_dir: Path) -> dict[TopicPartition, int]:
        return _read_checkpoint_or_warn(
            log_dir / RECOVERY_POINT_CHECKPOINT, f"recovering every log of {log_dir} from its start"
        )

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
            _try(log.abandon, f"close {key[0]}-{key[1]}")
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

    def set_preferred_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Where the partition's log goes when it is created here (AlterReplicaLogDirs before it exists)."""
        self._preferred[(topic, partition)] = log_dir

    def future(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.get((topic, partition))

    def futures(self) -> dict[TopicPartition, PartitionLog]:
        return dict(self._futures)

    def create_future(self, topic: str, partition: int, log_dir: Path) -> PartitionLog:
        """An empty future log of the partition in ``log_dir`` (replacing one being built elsewhere)."""
        key = (topic, partition)
        existing = self._future_dir_of.get(key)
        if existing == log_dir:
            return self._futures[key]
        if existing is not None:
            self.abandon_future(topic, partition)
        log = PartitionLog.open(log_dir / future_dir_name(topic, partition), topic, partition,
                                self.config_for(topic), recover=False)
        self._futures[key] = log
        self._future_dir_of[key] = log_dir
        logger.info("Moving %s-%d from %s to %s: future log %s created", topic, partition, self._dir_of.get(key),
                    log_dir, log.directory)
        return log

    def abandon_future(self, topic: str, partition: int) -> None:
        """Give up a move: the future log is removed, the current one stays."""
        key = (topic, partition)
        log = self._futures.pop(key, None)
        self._future_dir_of.pop(key, None)
        if log is not None:
            _try(log.delete, f"delete the future log {log.directory}")
            logger.info("Move of %s-%d abandoned", topic, partition)

    def swap_future(self, topic: str, partition: int, side_files: Sequence[str] = ()) -> PartitionLog:
        """Replace the current log with its caught-up future log (same log end offset), which the caller
        guarantees by calling this on the thread that appends (nothing is appended meanwhile). Both are
        flushed and closed; ``side_files`` (the leader epoch checkpoint, ``partition.metadata``) are copied;
        the current directory is renamed to ``-delete`` and only then the future one to the real name (a
        crash between the two leaves the complete future log, which :meth:`load` promotes), as Kafka's
        ``LogManager.replaceCurrentWithFutureLog``. Returns the reopened log in its new directory."""
        key = (topic, partition)
        future, current = self._futures[key], self._logs[key]
        if future.log_end_offset != current.log_end_offset:
            raise StorageError(f"{topic}-{partition}: the future log ends at {future.log_end_offset}, the current "
                               f"one at {current.log_end_offset}: not caught up")
        old_dir, new_dir = self._dir_of[key], self._future_dir_of[key]
        start = current.log_start_offset
        current.close()
        future.close()
        for name in side_files:
            source = current.directory / name
            if source.exists():
                shutil.copy2(source, future.directory / name)
        doomed = current.directory.with_name(delete_dir_name(topic, partition))
        current.directory.rename(doomed)
        fsync_dir(old_dir)
        target = new_dir / f"{topic}-{partition}"
        future.directory.rename(target)
        fsync_dir(new_dir)
        del self._futures[key], self._future_dir_of[key]
        log = PartitionLog.open(target, topic, partition, self.config_for(topic), recover=False)
        if start > log.log_start_offset:
            log.restore_log_start_offset(start)
        self._logs[key] = log
        self._dir_of[key] = new_dir
        self._topic_ids.pop(key, None)
        shutil.rmtree(doomed, ignore_errors=True)
        self.checkpoint_recovery_points()
        logger.info("Moved %s-%d from %s to %s at log end offset %d", topic, partition, old_dir, new_dir,
                    log.log_end_offset)
        return log

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
            failed |= not _try(log.flush, f"flush {log.topic}-{log.partition}")
        failed |= not _try(self.checkpoint_recovery_points, "write recovery points")
        for log in self._logs.values():
            failed |= not _try(log.close, f"close {log.topic}-{log.partition}")
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


def _lock_dir(log_dir: Path) -> int:
    """Create ``log_dir`` if needed and take an exclusive, non-blocking ``flock`` on its ``.lock`` file; return
    the descriptor holding it. The kernel drops the lock when the process dies, so a crash never leaves a
    stale lock. OSError if the directory cannot be created or locked (it is then offline), StorageError if
    another process holds the lock (the broker must not start)."""
    path = log_dir / LOCK_FILE
    log_dir.mkdir(parents=True, exist_ok=True)
    if not os.access(log_dir, os.R_OK | os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"{log_dir} is not a readable and writable log directory")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        os.close(fd)
        raise StorageError(
            f"log directory {log_dir} is in use by another process (it holds the lock on {path})"
        ) from e
    except OSError:
        os.close(fd)
        raise
    return fd


def _io_failure(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised from, an OSError (the directory is unusable, not its data corrupt)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return True
        current = current.__cause__ or current.__context__
    return False


def _read_checkpoint_or_warn(path: Path, consequence: str) -> dict[TopicPartition, int]:
    try:
        return read_checkpoint(path)
    except StorageError as e:
        logger.warning("%s; %s", e, consequence)
        return {}


def _try(action: Callable[[], object], what: str) -> bool:
    """Run ``action()``; log and swallow a storage failure so shutdown goes on with the other logs."""
    try:
        action()
    except (MetaqError, OSError) as e:
        logger.error("Cannot %s: %s", what, e)
        return False
    return True
