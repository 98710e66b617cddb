"""A follower's side of replication: where its fetcher thread fetches from, and what becomes of the leader's answers
(truncation to where the logs diverge, appending the fetched batches, a fetch offset out of the leader's range). Part
of :class:`~metaq.broker.replication.replica_manager.ReplicaManager`, which holds the roles.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from typing import NamedTuple

from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.metadata import MetadataWatcher
from metaq.broker.quota.replication import ReplicationQuota
from metaq.broker.replication.leader_epochs import EpochEnd, LeaderEpochCache
from metaq.broker.replication.replica_fetcher import FetchPosition, FetchSource
from metaq.broker.replication.roles import FETCHING, TRUNCATING, Following, Role, TopicPartition
from metaq.errors import MetaqError, StorageError
from metaq.protocol.batches import read_header

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)



class _Followed(NamedTuple):
    """What a fetcher's answer applies to: the replica's role, its log, and the leader it still follows."""

    role: Role
    plog: PartitionLog
    following: Following


class FollowerSide:
    """What the fetcher threads call on the event loop with the leaders' answers, for :class:`ReplicaManager`."""

    _metadata: MetadataWatcher
    _logs: LogManager
    _replicas: dict[TopicPartition, Role]
    _epochs: dict[TopicPartition, LeaderEpochCache]

    @abstractmethod
    def epoch_cache(self, key: TopicPartition, plog: PartitionLog) -> LeaderEpochCache: ...

    follower_quota: ReplicationQuota | None
    """The follower's replication throttle (metaq/broker/quota/replication.py), given to the manager's constructor."""

    def in_isr(self, key: TopicPartition, broker_id: int) -> bool:
        """Whether ``broker_id`` is in the partition's ISR (replication throttles spare in-sync replicas)."""
        meta = self._metadata.snapshot.partition(*key)
        return meta is not None and broker_id in meta.isr

    def fetch_position(self, key: TopicPartition) -> FetchPosition | None:
        """For a fetcher thread (any thread): where to fetch from, or None if not following."""
        role = self._replicas.get(key)
        plog = self._logs.get(*key)
        if role is None or plog is None:
            return None
        state, following = role.state, role.following
        if following is None:
            return None
        truncate_epoch = None
        if state == TRUNCATING:
            cache = self._epochs.get(key)
            truncate_epoch = cache.latest_epoch if cache is not None else -1
        return FetchPosition(plog.log_end_offset, following.leader_epoch, truncate_epoch)

    def _role_for(self, source: FetchSource) -> Role | None:
        """The role a fetcher's answer is for, if it did not change since the request was sent."""
        role = self._replicas.get(source.key)
        if role is None or role.following is None or not role.following.is_(source.leader, source.leader_epoch):
            return None
        return role

    def _followed(self, source: FetchSource) -> _Followed | None:
        """The role, log and followed leader a fetcher's answer is for; None if the role changed since the request
        was sent, or the log is gone (the answer is then dropped)."""
        role = self._role_for(source)
        plog = self._logs.get(*source.key)
        if role is None or role.following is None or plog is None:
            return None
        return _Followed(role, plog, role.following)

    def truncate_follower(self, source: FetchSource, answer: EpochEnd) -> None:
        """Event loop: the leader answered OffsetForLeaderEpoch for our latest epoch with ``answer``: cut our
        log where it stops agreeing with the leader's (KIP-101, with KIP-279's refinement when the leader
        knows only an older epoch), then fetch. Without epochs on either side, the high watermark is the
        fallback (what every ISR member had)."""
        key = source.key
        followed = self._followed(source)
        if followed is None:
            return
        role, plog, following = followed
        cache = self.epoch_cache(key, plog)
        epoch, end_offset = answer
        if epoch < 0 or end_offset < 0 or cache.latest_epoch < 0:
            target = following.hw
        elif epoch == cache.latest_epoch:
            target = end_offset
        else:
            target = min(end_offset, cache.end_offset_for(epoch, plog.log_end_offset).end_offset)
        if target < plog.log_end_offset:
            log.warning("%s-%d: truncating from %d to %d, where our log and leader %d's diverge (epoch %d)",
                        *key, plog.log_end_offset, target, source.leader, epoch)
            plog.truncate_to(target)
            cache.truncate_from_end(plog.log_end_offset)
            following.hw = min(following.hw, plog.log_end_offset)
        if role.is_(TRUNCATING):
            role.transition(FETCHING, following=following, why=f"from offset {plog.log_end_offset}")

    def append_fetched(self, source: FetchSource, records: bytes, leader_hw: int, leader_start: int = -1) -> None:
        """Event loop: batches a fetcher got from the leader; dropped if the role changed since the request
        was sent."""
        key = source.key
        role = self._role_for(source)
        if role is None or role.following is None:
            return
        if not role.is_(FETCHING):
            return  # a fetch sent before the truncation check was decided
        following = role.following
        plog = self._logs.get_or_create(*key)
        if records:
            first = read_header(records)
            if plog.log_start_offset == plog.log_end_offset and first.base_offset < plog.log_end_offset:
                # an empty log restarted inside the leader's first batch: start where that batch does (Kafka)
                plog.truncate_fully_and_start_at(first.base_offset)
                self.epoch_cache(key, plog).truncate_from_end(0)
            try:
                headers = plog.append_replica(records)
            except (MetaqError, OSError) as e:
                self._logs.handle_error(*key, e)  # a hard I/O error takes the log dir offline
                raise StorageError(f"{key[0]}-{key[1]}: appending batches from broker {source.leader} failed: "
                                   f"{e}") from e
            cache = self.epoch_cache(key, plog)
            for header in headers:
                cache.assign(header.partition_leader_epoch, header.base_offset)
        following.hw = max(following.hw, min(leader_hw, plog.log_end_offset))
        if plog.log_start_offset < leader_start <= plog.log_end_offset:  # the leader's DeleteRecords/retention
            self._logs.delete_records(*key, leader_start, wall_clock_ms())

    def leader_out_of_range(self, source: FetchSource, leader_end: int, leader_start: int) -> None:
        """Event loop: our fetch offset is outside the leader's log. Past its end: our tail was never
        replicated (never acknowledged with acks=all), cut it. Below its start (the leader's retention or
        DeleteRecords removed what we lack): restart our log empty at the leader's start."""
        key = source.key
        followed = self._followed(source)
        if followed is None:
            return
        plog, following = followed.plog, followed.following
        if 0 <= leader_end < plog.log_end_offset:
            log.warning("%s-%d: truncating from %d to the leader's log end %d", *key, plog.log_end_offset,
                        leader_end)
            plog.truncate_to(leader_end)
            self.epoch_cache(key, plog).truncate_from_end(plog.log_end_offset)
            following.hw = min(following.hw, plog.log_end_offset)
        elif plog.log_end_offset < leader_start:
            log.warning("%s-%d: our log ends at %d, below leader %d's log start %d: restarting it there", *key,
                        plog.log_end_offset, source.leader, leader_start)
            plog.truncate_fully_and_start_at(leader_start)
            self.epoch_cache(key, plog).truncate_from_end(0)
            following.hw = leader_start
