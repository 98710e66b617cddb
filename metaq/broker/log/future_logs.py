"""Future logs (docs/log-dirs.md): a partition that AlterReplicaLogDirs moves to another directory of this broker has a
future log there, filled by the mover (metaq/broker/log/dir_mover.py) while the current log keeps serving, until
:meth:`FutureLogs.swap_future` replaces the current log with it on the event loop. Part of
:class:`~metaq.broker.log.log_manager.LogManager`.
"""

from __future__ import annotations

import logging
import shutil
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path

from metaq.broker.log.config import LogConfig
from metaq.broker.log.loader import TopicPartition, attempt
from metaq.broker.log.log_dirs import (
    delete_dir_name,
    future_dir_name,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import StorageError
from metaq.fileio import fsync_dir

logger = logging.getLogger(__name__)


class FutureLogs:
    """The future logs of AlterReplicaLogDirs moves and the swap that ends a move, for :class:`LogManager`."""

    _preferred: dict[TopicPartition, Path]
    _futures: dict[TopicPartition, PartitionLog]
    _future_dir_of: dict[TopicPartition, Path]
    _dir_of: dict[TopicPartition, Path]
    _logs: dict[TopicPartition, PartitionLog]
    _topic_ids: dict[TopicPartition, str]

    @abstractmethod
    def config_for(self, topic: str) -> LogConfig: ...

    @abstractmethod
    def checkpoint_recovery_points(self) -> None: ...

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
            attempt(log.delete, f"delete the future log {log.directory}")
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
