"""A broker-coordinated member's commits: OffsetCommit with its generation and member id, retried on coordinator
and connection errors; partitions the coordinator refuses as no longer this member's are revoked, never retried.
Part of :class:`~metaq.consumer.coordination.GroupMember`.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping

from kafka.protocol.consumer import OffsetCommitRequest

from metaq.client.offsets_channel import OffsetsChannel, commit_codes, look_again
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.group_member_state import (
    NO_GENERATION,
    NO_MEMBER_ID,
    REFUSED_COMMIT_CODES,
    Generation,
    MemberStates,
    _raise_for,
)
from metaq.consumer.offset_store import CommitResult, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import BrokerConnectionError, CoordinatorError, ErrorCode, MetaqError, ProtocolError
from metaq.metrics.consumer import ConsumerMetrics

log = logging.getLogger(__name__)

CommitListener = Callable[[float, CommitResult], None]
"""Called after each OffsetCommit with when it started and what was committed or refused (``lost``)."""


class GroupCommits(MemberStates):
    """OffsetCommit of the consumed offsets, for :class:`~metaq.consumer.coordination.GroupMember`."""

    _config: ConsumerConfig
    _instance_id: str | None
    _member_id: str
    _metrics: ConsumerMetrics | None
    _commit_listener: CommitListener | None
    _commit_lock: threading.Lock
    _closing: threading.Event
    _offsets_channel: OffsetsChannel
    _committed: dict[TopicPartition, int]
    registry: dict[TopicPartition, PartitionTopicInfo]

    @abstractmethod
    def request_rejoin(self, reason: str) -> None: ...

    @abstractmethod
    def _lose(self, generation: Generation, reason: str, *, rejoin: bool = True) -> None: ...

    def commit(self, infos: Iterable[PartitionTopicInfo] | None = None, *, include_revoked: bool = False) -> None:
        """OffsetCommit of the consumed offsets (changed since the last commit) with this generation; partitions
        the coordinator refuses as no longer ours are revoked and not retried."""
        with self._commit_lock:
            generation = self.generation_info
            if generation is NO_GENERATION:
                return
            chosen = list(self.registry.values()) if infos is None else list(infos)
            offsets = {info.key: info.get_consumed_offset() for info in chosen
                       if (include_revoked or not info.revoked) and info.generation == generation.generation_id}
            offsets = {key: o for key, o in offsets.items() if o >= 0 and self._committed.get(key) != o}
            if not offsets:
                return
            started = time.monotonic()
            try:
                refused = self._commit(generation, offsets)
            except MetaqError:
                if self._metrics is not None:
                    self._metrics.committed(time.monotonic() - started, ok=False)
                raise
            if self._metrics is not None:
                self._metrics.committed(time.monotonic() - started, ok=True, fenced=len(refused))
            if self._commit_listener is not None:
                done = {key: o for key, o in offsets.items() if key not in refused}
                self._commit_listener(started, CommitResult(done, set(refused)))
        if refused:
            code = min(refused.values())
            log.warning("consumer %s: the coordinator refused the commit of %s (%s): not ours any more",
                        self._consumer_id, sorted(refused), ErrorCode(code).name)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("a commit found the group rebalancing")
            else:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self._member_id = NO_MEMBER_ID
                self._lose(generation, f"commit answered {ErrorCode(code).name}",
                           rejoin=code != ErrorCode.FENCED_INSTANCE_ID)

    def _commit(self, generation: Generation, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Retried on coordinator and connection errors (offsets.commit.max.retries, offsets.channel.backoff.ms);
        returns the partitions refused with a code of REFUSED_COMMIT_CODES."""
        topics = sorted({t for t, _ in offsets})
        fields = {
            "group_id": self._group, "generation_id_or_member_epoch": generation.generation_id,
            "member_id": generation.member_id, "group_instance_id": self._instance_id, "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_metadata": "", "commit_timestamp": -1,
                 "committed_leader_epoch": -1}
                for (t, p), o in sorted(offsets.items()) if t == topic]} for topic in topics]}
        attempts = self._config.offsets_commit_max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = self._offsets_channel.send(OffsetCommitRequest, fields)
                codes = commit_codes(response, self._group, offsets)
            except (BrokerConnectionError, ProtocolError) as e:
                self._offsets_channel.drop()
                error: MetaqError = e
            else:
                refused = {key: code for key, code in codes.items() if code in REFUSED_COMMIT_CODES}
                retry = {key: code for key, code in codes.items() if look_again(code)}
                others = {key: code for key, code in codes.items()
                          if code and key not in refused and key not in retry}
                self._committed.update({key: offsets[key] for key, code in codes.items() if not code})
                if others:
                    key, code = min(others.items())
                    _raise_for(code, f"committing {key[0]}-{key[1]} of group {self._group}")
                if not retry:
                    return refused
                self._offsets_channel.drop()
                error = CoordinatorError(min(retry.values()), f"committing offsets of group {self._group}")
            if attempt == attempts:
                raise error
            log.info("consumer %s: commit attempt %d failed (%s); retrying", self._consumer_id, attempt, error)
            self._closing.wait(self._config.offsets_channel_backoff_ms / 1000.0)
        raise AssertionError("unreachable")
