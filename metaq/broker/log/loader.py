"""What a broker finds in its log directories when it starts: the names of a directory's files, the directory lock,
and opening every partition log (recovering them unless the last shutdown was clean). Part of
:class:`~metaq.broker.log.manager.LogManager`, which holds the state these methods fill.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path

from metaq.broker.log.checkpoint import read_checkpoint
from metaq.broker.log.config import LogConfig
from metaq.broker.log.log_dirs import parse_future_dir_name
from metaq.broker.log.partition_log import DELETE_DIR_SUFFIX, PartitionLog
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


class LogLoader:
    """Locks the log directories and opens the logs found in them (:meth:`load`), for :class:`LogManager`."""

    log_dirs: list[Path]
    config: LogConfig
    _logs: dict[TopicPartition, PartitionLog]
    _dir_of: dict[TopicPartition, Path]
    _lock_fds: list[int]
    _found_futures: list[tuple[TopicPartition, Path, Path]]

    @abstractmethod
    def config_for(self, topic: str) -> LogConfig: ...

    def load(self) -> None:
        """Lock every directory, then open every log, recovering them unless the last shutdown was clean.

        StorageError (and nothing touched) if another process holds a directory's lock."""
        try:
            for log_dir in self.log_dirs:
                self._lock_fds.append(_lock_dir(log_dir))
            for log_dir in self.log_dirs:
                self._load_dir(log_dir)
            self._resolve_found_futures()
        except BaseException:
            for log in self._logs.values():  # opened before the failure: nobody else will close them
                _try(log.close, f"close {log.topic}-{log.partition}")
            self._logs.clear()
            self._dir_of.clear()
            self.release_locks()
            raise

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


def _lock_dir(log_dir: Path) -> int:
    """Create ``log_dir`` if needed and take an exclusive, non-blocking ``flock`` on its ``.lock`` file; return
    the descriptor holding it. The kernel drops the lock when the process dies, so a crash never leaves a
    stale lock."""
    path = log_dir / LOCK_FILE
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StorageError(f"cannot use log directory {log_dir}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if isinstance(e, BlockingIOError):
            raise StorageError(
                f"log directory {log_dir} is in use by another process (it holds the lock on {path})"
            ) from e
        raise StorageError(f"cannot lock log directory {log_dir} ({path}): {e.strerror}") from e
    return fd


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
