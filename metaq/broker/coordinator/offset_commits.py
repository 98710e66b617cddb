"""Committed offsets as :class:`~metaq.broker.coordinator.coordinator.GroupCoordinator` stores them: OffsetCommit and
TxnOffsetCommit appended to the group's ``__consumer_offsets`` partition (stamped with the leader epoch and answered
once the ISR has them, with ``offsets.commit.required.acks`` -1), a transaction's offsets made the group's at its
marker, and OffsetFetch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from metaq.broker.coordinator import group_state as g
from metaq.broker.coordinator.config import CoordinatorConfig
from metaq.broker.coordinator.group_state import Group
from metaq.broker.coordinator.offsets_partition import (
    LOADED,
    CommittedOffset,
    OffsetsPartition,
)
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
from metaq.broker.coordinator.replicated_append import COMMIT_TIMEOUT_S, Replication
from metaq.errors import ErrorCode, InvalidProducerEpochError, MessageSizeTooLargeError

log = logging.getLogger(__name__)


# a commit the ISR did not take (as Kafka's GroupMetadataManager maps them): the client finds the coordinator
_REPLICATION_ERRORS: dict[int, int] = {ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE}


class OffsetCommits:
    """OffsetCommit, TxnOffsetCommit, the end of a transaction's offsets and OffsetFetch, for
    :class:`GroupCoordinator`."""

    _loads: dict[int, asyncio.Task[None]]
    _partitions: dict[int, OffsetsPartition]
    _config: CoordinatorConfig
    _in_thread: Callable[..., Awaitable[Any]]
    replication: Replication | None
    notify: Callable[[tuple[str, int]], None]

    @abstractmethod
    def check(self, group_id: str) -> int: ...

    @abstractmethod
    async def _loaded(self, indexes: Collection[int]) -> None: ...

    @abstractmethod
    def _partition_of(self, group_id: str) -> OffsetsPartition: ...

    @abstractmethod
    def _member_error(self, group: Group | None, member_id: str, generation_id: int,
                      instance_id: str | None = None) -> int: ...

    @abstractmethod
    def _group(self, group_id: str, *, create: bool) -> Group | None: ...

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                             offsets: dict[tuple[str, int], tuple[int, str]], retention_ms: int = -1,
                             ) -> dict[tuple[str, int], int]:
        """Per topic-partition error codes. Appended to the log before the cache (and the answer)."""
        error = self.check(group_id) or self._commit_error(group_id, generation_id, member_id, instance_id)
        if error:
            return {tp: error for tp in offsets}
        return await self._store_commits(group_id, offsets, retention_ms)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 offsets: dict[tuple[str, int], tuple[int, str]]) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets appended to the group's offsets partition inside the producer's
        transaction, pending until its marker (:meth:`end_txn`; docs/transactions.md section 2)."""
        error = self.check(group_id)
        if error:
            return {tp: error for tp in offsets}
        return await self._store_commits(group_id, offsets, -1, (producer_id, producer_epoch))

    async def end_txn(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """The producer's marker was written to ``offsets_partition``: its pending offsets there become the
        groups' (commit) or are dropped (abort), as Kafka's onTransactionCompleted. A partition still
        loading is waited for (its replay may have ended before the marker); one not loaded here replays the
        marker when it is."""
        if offsets_partition in self._loads:
            await self._loaded([offsets_partition])
        part = self._partitions.get(offsets_partition)
        if part is not None and part.state == LOADED:
            groups = part.end_txn(producer_id, commit)
            if groups:
                log.debug("producer %d %s the offsets of groups %s", producer_id,
                          "committed" if commit else "aborted", groups)

    async def _store_commits(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str]],
                             retention_ms: int, producer: tuple[int, int] | None = None
                             ) -> dict[tuple[str, int], int]:
        now = int(time.time() * 1000)
        expire = now + retention_ms if retention_ms > 0 else -1
        errors = {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp, (_, md) in offsets.items()
                  if len((md or "").encode("utf-8")) > self._config.offset_metadata_max_bytes}
        commits = {tp: CommittedOffset(off, md or "", now, expire) for tp, (off, md) in offsets.items()
                   if tp not in errors}
        part = self._partition_of(group_id)
        try:
            part.leader_epoch = self._append_epoch(part.partition)
            if producer is None:
                part.append_commits(group_id, commits)
            else:
                part.append_txn_commits(producer[0], producer[1], group_id, commits)
            if self._config.flush_each_commit:
                await self._in_thread(part.log.flush)
        except MessageSizeTooLargeError as e:
            # as Kafka's GroupMetadataManager.storeOffsets maps MESSAGE_TOO_LARGE: a size error the client must
            # act on (commit fewer partitions at once), where KAFKA_STORAGE_ERROR would be retried for ever
            log.warning("group %s: an OffsetCommit of %d partitions is too large for %s: %s", group_id,
                        len(offsets), OFFSETS_TOPIC, e)
            return {tp: ErrorCode.INVALID_COMMIT_OFFSET_SIZE for tp in offsets}
        except InvalidProducerEpochError as e:
            log.warning("group %s: transactional offsets refused: %s", group_id, e)
            return {tp: ErrorCode.PRODUCER_FENCED for tp in offsets}
        except Exception as e:
            log.error("group %s: appending offsets to %s-%d failed: %s", group_id, OFFSETS_TOPIC, part.partition, e)
            return {tp: ErrorCode.KAFKA_STORAGE_ERROR for tp in offsets}
        error = await self._replicated(part)
        if error:
            return {tp: error for tp in offsets}
        return {tp: errors.get(tp, ErrorCode.NONE) for tp in offsets}

    def _append_epoch(self, index: int) -> int | None:
        return self.replication.append_epoch(OFFSETS_TOPIC, index) if self.replication is not None else None

    async def _replicated(self, part: OffsetsPartition) -> int:
        """After an append to a replicated offsets partition: wake the followers and, with
        offsets.commit.required.acks -1, wait until the ISR has it. 0 or the error to answer."""
        replication = self.replication
        if replication is None or not self._wake_followers(part):
            return ErrorCode.NONE
        if self._config.offsets_commit_required_acks != -1:
            return ErrorCode.NONE
        min_isr = await replication.min_insync_replicas(OFFSETS_TOPIC)
        code = await replication.wait_replicated(OFFSETS_TOPIC, part.partition, part.log.log_end_offset, min_isr,
                                                 COMMIT_TIMEOUT_S)
        if code:
            log.warning("a commit to %s-%d was not replicated: error %d", OFFSETS_TOPIC, part.partition, code)
        if not code:
            return ErrorCode.NONE
        return int(_REPLICATION_ERRORS.get(code, ErrorCode.NOT_COORDINATOR))

    def _wake_followers(self, part: OffsetsPartition) -> bool:
        """After an append: move the HW of a leader alone in its ISR, wake the followers' long polls.
        False if the partition is not replicated."""
        replication = self.replication
        if replication is None or not replication.replicated(OFFSETS_TOPIC, part.partition):
            return False
        replication.leader_appended(OFFSETS_TOPIC, part.partition)
        self.notify((OFFSETS_TOPIC, part.partition))
        return True

    def _commit_error(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        group = self._group(group_id, create=False)
        if generation_id < 0 and (group is None or group.is_(g.EMPTY)):
            return ErrorCode.NONE  # a commit from outside the group protocol (simple or ZooKeeper-coordinated consumer)
        error = self._member_error(group, member_id, generation_id, instance_id)
        if error:
            return error
        assert group is not None
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_(g.COMPLETING_REBALANCE) else ErrorCode.NONE

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[int, dict[tuple[str, int], CommittedOffset]]:
        error = self.check(group_id)
        if error:
            return error, {}
        return ErrorCode.NONE, self._partition_of(group_id).fetch(group_id, partitions)
