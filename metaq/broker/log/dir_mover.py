"""Moving a partition's log to another log directory while it is written (AlterReplicaLogDirs,
docs/log-dirs.md): Kafka's ``ReplicaAlterLogDirsThread``, local.

    mover = LogDirMover(logs, side_files=("leader-epoch-checkpoint",))
    mover.start()                       # on the broker's event loop
    logs.create_future("t", 0, Path("/d2")); mover.kick()

Each future log (:meth:`metaq.broker.log.log_manager.LogManager.create_future`) is filled with the current log's
batches as they are (offsets, leader epochs, producer state kept: ``PartitionLog.append_replica``), a chunk
at a time, then follows the current log's tail. The step that finds it caught up swaps it in at once
(:meth:`LogManager.swap_future`). Everything runs on the event loop, the thread that appends: between the
check "same log end offset" and the swap no produce can run, so nothing acknowledged is left behind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from metaq.broker.log.log_dirs import is_dir_failure
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import MetaqError, OffsetOutOfRangeError
from metaq.protocol.batches import valid_prefix

__all__ = ["LogDirMover"]

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
"""Copied per step: a step blocks the event loop while it reads and writes this much (a few ms)."""
IDLE_S = 0.05
"""Pause between passes once every future log has caught up with what was there (it then follows the tail)."""

POLL_S = 0.2
"""How often a mover with nothing to do looks for new future logs."""

TopicPartition = tuple[str, int]


class LogDirMover:
    """Fills future logs from current ones and swaps them in; one asyncio task on the broker's loop."""

    def __init__(self, logs: LogManager, *, side_files: Sequence[str] = (), chunk_bytes: int = CHUNK_BYTES) -> None:
        """``side_files``: per-partition files kept by other components (the leader epoch checkpoint) that
        the moved log must take along."""
        self._logs = logs
        self._side_files = tuple(side_files)
        self._chunk_bytes = chunk_bytes
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.moved = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="metaq-broker-log-dir-mover")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def kick(self) -> None:
        """Event loop: a future log was created."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            futures = self._logs.futures()
            if not futures:  # AlterReplicaLogDirs creates them without a reference to the mover: polled
                try:
                    await asyncio.wait_for(self._wake.wait(), POLL_S)
                except TimeoutError:
                    pass
                self._wake.clear()
                continue
            progressed = False
            for key, future in futures.items():
                try:
                    progressed |= self.step(key, future)
                except Exception:
                    logger.exception("moving %s-%d failed unexpectedly: the move is given up", *key)
                    self._logs.abandon_future(*key)
            if progressed:
                await asyncio.sleep(0)  # let requests run between chunks
            else:
                try:
                    await asyncio.wait_for(self._wake.wait(), IDLE_S)
                except TimeoutError:
                    pass
                self._wake.clear()

    def step(self, key: TopicPartition, future: PartitionLog) -> bool:
        """Copy one chunk into ``future`` or, if it is caught up, swap it in; True if anything changed."""
        current = self._logs.get(*key)
        if current is None or self._logs.future(*key) is not future:
            self._logs.abandon_future(*key)
            return False
        if future.log_end_offset == current.log_end_offset and (
                future.log_end_offset > future.log_start_offset or current.log_start_offset == future.log_start_offset):
            self._swap(key)
            return True
        data = self._read(key, current, future)
        if data is None:
            return False
        length, headers = valid_prefix(data)
        if not headers:
            return False
        if future.log_start_offset == future.log_end_offset and headers[0].base_offset != future.log_end_offset:
            future.truncate_fully_and_start_at(headers[0].base_offset)  # the current log does not start at 0
        try:
            future.append_replica(data[:length])
        except (MetaqError, OSError) as e:
            self._failed(key, future, e)
            return False
        return True

    def _read(self, key: TopicPartition, current: PartitionLog, future: PartitionLog) -> bytes | None:
        empty = future.log_start_offset == future.log_end_offset
        offset = current.log_start_offset if empty else future.log_end_offset
        try:
            piece = current.read(offset, self._chunk_bytes)
            if piece is None:
                if empty and current.log_end_offset == current.log_start_offset:
                    future.truncate_fully_and_start_at(current.log_start_offset)  # an empty log elsewhere
                return None
            return piece.read_bytes()
        except OffsetOutOfRangeError:
            # retention removed what had not been copied yet: start the copy again from the new start
            logger.info("%s-%d: the current log moved its start past the copy: copying again from %d", *key,
                        current.log_start_offset)
            future.truncate_fully_and_start_at(current.log_start_offset)
            return None
        except (MetaqError, OSError) as e:
            if not self._logs.handle_error(*key, e):
                logger.error("%s-%d: reading the current log for the move failed: %s (move given up)", *key, e)
                self._logs.abandon_future(*key)
            return None

    def _failed(self, key: TopicPartition, future: PartitionLog, error: BaseException) -> None:
        """Writing the future log failed: its directory went offline if the error is hard, else the move is
        given up; the current log is untouched either way."""
        target = future.directory.parent
        if is_dir_failure(error):
            self._logs.fail_dir(target, error)
        else:
            logger.error("%s-%d: writing the future log in %s failed: %s (move given up)", *key, target, error)
        self._logs.abandon_future(*key)

    def _swap(self, key: TopicPartition) -> None:
        try:
            self._logs.swap_future(*key, side_files=self._side_files)
        except (MetaqError, OSError) as e:
            # the files are closed: a directory that cannot take a rename is failing
            logger.error("%s-%d: swapping in the moved log failed: %s", *key, e)
            if not self._logs.handle_error(*key, e):
                raise
            return
        self.moved += 1
