"""What a broker finds in its log directories when it starts (:class:`~metaq.broker.log.log_manager.LogManager`): the
directory lock (an exclusive ``flock`` on ``.lock``, as Kafka), the names of a directory's files and checkpoints,
and every partition log opened, recovered unless the last shutdown was clean (``.kafka_cleanshutdown``). A
directory that cannot be created, locked or read is offline from the start; the broker does not start without any.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
from abc import abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path

from metaq.broker.log.checkpoint import read_checkpoint
from metaq.broker.log.config import LogConfig
from metaq.broker.log.log_dirs import (
    DELETE_DIR_SUFFIX,
    parse_future_dir_name,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import MetaqError, StorageError
from metaq.fileio import fsync_dir

logger = logging.getLogger(__name__)


CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"


LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"  # offsets moved by DeleteRecords (as Kafka)


LOCK_FILE = ".lock"


TopicPartition = tuple[str, int]


def parse_log_dir_name(name: str) -> TopicPartition | None:
    """``"my.topic-name-3"`` -> ``("my.topic-name", 3)``: topics may contain '-', so split on the last one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or not partition.isascii():
        return None
    return topic, int(partition)


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


def attempt(action: Callable[[], object], what: str) -> bool:
    """Run ``action()``; log and swallow a storage failure so shutdown goes on with the other logs."""
    try:
        action()
    except (MetaqError, OSError) as e:
        logger.error("Cannot %s: %s", what, e)
        return False
    return True


class LogLoader:
    """Locks the log directories and opens the logs found in them (:meth:`load`), for :class:`LogManager`."""

    log_dirs: list[Path]
    _logs: dict[TopicPartition, PartitionLog]
    _dir_of: dict[TopicPartition, Path]
    _lock_fds: list[int]
    _start_failures: list[tuple[Path, BaseException]]
    _found_futures: list[tuple[TopicPartition, Path, Path]]
    _offline_dirs: list[Path]
    _offline: dict[TopicPartition, Path]

    @abstractmethod
    def online_dirs(self) -> list[Path]: ...

    @abstractmethod
    def config_for(self, topic: str) -> LogConfig: ...

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
                attempt(log.close, f"close {log.topic}-{log.partition}")
            self._logs.clear()
            self._dir_of.clear()
            self.release_locks()
            raise

    def _fail_at_start(self, log_dir: Path, error: BaseException) -> None:
        """``log_dir`` failed while loading: the logs opened from it are closed and it is offline."""
        for key in [k for k, d in self._dir_of.items() if d == log_dir]:
            attempt(self._logs.pop(key).close, f"close {key[0]}-{key[1]}")
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
