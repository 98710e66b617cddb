"""``offsets.storage=kafka``: offsets in ``__consumer_offsets`` over the offsets channel, fenced in ZooKeeper.

    store = KafkaOffsetStore(layout, config)           # what default_offset_store picks for storage=kafka
    store.take_ownership([("clicks", 0)])              # {("clicks", 0): 42}: max(zookeeper, kafka)
    store.commit({("clicks", 0): 57})                  # ZooKeeper (version-checked) first, then Kafka

The offsets channel (metaq.client.offsets_channel) is Kafka 0.8's ``channelToOffsetManager``. Attempts follow the
policies of metaq/retry.py: commits wait ``offsets.channel.backoff.ms`` and give up after
``offsets.commit.max.retries`` retries; fetches wait the same and give up at a deadline
(``metaq.offsets.fetch.timeout.ms``), so a rebalance is never blocked for ever by an unreachable coordinator (it
fails the attempt and the rebalancer retries).

Fencing. The broker cannot know which member of a ZooKeeper-coordinated group owns a partition (the
group has no protocol members, so every commit carries generation -1 and no member id), so the broker
alone cannot stop a member that lost a partition from committing it. The ZooKeeper fence therefore
stays (the ZooKeeper half *is* a ZooKeeperOffsetStore): ``take_ownership`` fences the offset nodes
(bumps their versions) and only then reads Kafka, returning ``max(zookeeper, kafka)``; ``commit`` first
does the version-checked ZooKeeper write and sends over the offsets channel only the partitions that
passed it (plus, for an unchanged offset whose Kafka copy lags, one that ZooKeeper still holds as is).
A zombie can thus only send to Kafka an offset that was in ZooKeeper under its fence, i.e. one the new
owner saw (or something older) when it fenced and read ``max(zk, kafka)``; so the position the group
resumes from never moves backwards. (A zombie's request delayed in flight can still make the *Kafka copy
alone* step back below the new owner's last commit until that owner's next commit; ZooKeeper holds the
newer value, and every reader in metaq takes the max.) Consequently ZooKeeper is always written:
``dual.commit.enabled=false`` is rejected by ConsumerConfig.

Migration keeps the group's place both ways: zookeeper -> kafka reads ``max`` (Kafka is empty at first)
and the first commit of each owned partition writes both stores, even if nothing was consumed; kafka ->
zookeeper finds ZooKeeper up to date because every commit under storage=kafka wrote it.

A Kafka write that still fails after its retries does not fail the commit: ZooKeeper already holds the
offset (and that is what fences and what ``max`` reads), so it is logged and the partition is re-sent at
the next commit (see :meth:`KafkaOffsetStore.unsynced`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import tenacity
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kazoo.protocol.states import WatchedEvent

from metaq.client.offsets_channel import (
    OffsetsChannel,
    check_code,
    commit_codes,
    commit_request,
    commit_version,
    fetched_offsets,
    look_again,
)
from metaq.client.versions import ApiKey
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import CommitResult, TopicPartition, ZooKeeperOffsetStore
from metaq.errors import (
    BrokerConnectionError,
    CoordinatorError,
    MetaqError,
    ProtocolError,
    UnsupportedVersionError,
)
from metaq.retry import RetryPolicy, offsets_commit, offsets_fetch
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

T = TypeVar("T")


class KafkaOffsetStore:
    """OffsetStore for ``offsets.storage=kafka``; see the module docstring for the fencing argument.

    The ZooKeeper half is a ZooKeeperOffsetStore (the fence, version-checked commits, unchanged offsets
    skipped, commits whose reply was lost resolved); this class adds the Kafka copy on top of it.
    """

    def __init__(self, layout: ZkLayout, config: ConsumerConfig) -> None:
        self._layout = layout
        self._group = config.group_id
        self._lock = threading.Lock()  # commits come from the committer and rebalance threads
        self._closing = threading.Event()
        self._zk = ZooKeeperOffsetStore(layout, config.group_id, auto_offset_reset=config.auto_offset_reset)
        self._channel = OffsetsChannel(layout, config.group_id, client_id=config.effective_client_id,
                                       socket_timeout_ms=config.offsets_channel_socket_timeout_ms,
                                       security=config.security(),
                                       broker_version_fallback=config.broker_version_fallback)
        self._zk_last: dict[TopicPartition, int | None] = {}  # in ZooKeeper under our fence, as far as we know
        self._kafka_last: dict[TopicPartition, int | None] = {}  # in Kafka, as far as we know
        self._commit_policy = offsets_commit(offsets_channel_backoff_ms=config.offsets_channel_backoff_ms,
                                             offsets_commit_max_retries=config.offsets_commit_max_retries)
        self._fetch_policy = offsets_fetch(offsets_channel_backoff_ms=config.offsets_channel_backoff_ms,
                                           deadline_ms=config.offsets_fetch_timeout_ms)

    def _before_retry(self, state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, CoordinatorError | BrokerConnectionError | ProtocolError):
            self._channel.drop()
        log.info("group %s: offsets channel attempt %d failed (%s); retrying in %.2fs", self._group,
                 state.attempt_number, error, state.upcoming_sleep)

    def _run(self, policy: RetryPolicy, attempt: Callable[[], T]) -> T:
        if self._closing.is_set():
            raise MetaqError(f"group {self._group}: the offset store is closed")
        # close() cuts a backoff short
        return policy.call(attempt, sleep=self._closing.wait, stop_event=self._closing,
                           before_sleep=self._before_retry)

    # -- OffsetStore -------------------------------------------------------------------------------

    def take_ownership(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Fence in ZooKeeper, then read Kafka: ``max(zookeeper, kafka)`` per partition."""
        wanted = list(partitions)
        with self._lock:
            zk = self._zk.take_ownership(wanted)
            try:
                kafka = self._run(self._fetch_policy, lambda: self._fetch(wanted)) if wanted else {}
            except MetaqError:
                self._zk.release(wanted)  # the rebalance attempt fails and claims (and fences) again
                raise
            result: dict[TopicPartition, int | None] = {}
            for key, zk_offset in zk.items():
                self._zk_last[key] = zk_offset
                self._kafka_last[key] = kafka.get(key)
                candidates = [o for o in (zk_offset, kafka.get(key)) if o is not None]
                result[key] = max(candidates) if candidates else None
            return result

    def commit(self, offsets: Mapping[TopicPartition, int]) -> CommitResult:
        """The version-checked ZooKeeper commit, then the partitions that passed it over the offsets channel.

        Also sent: owned partitions whose offset did not change (so ZooKeeper was not rewritten) but whose
        Kafka copy lags (just migrated, or an earlier Kafka write failed), if ZooKeeper still holds exactly
        that offset, i.e. nobody committed past it since.
        """
        with self._lock:
            result = self._zk.commit(offsets)
            for key in result.lost:
                self._forget(key)
            passed = {key: offsets[key] for key in result.committed}
            self._zk_last.update(passed)
            owned = self._zk.owned()
            for key, offset in offsets.items():
                if (key in owned and key not in passed and offset >= 0 and self._zk_last.get(key) == offset
                        and self._kafka_last.get(key) != offset):
                    node = self._layout.read_fenced_offset(self._group, *key)
                    if node is not None and node.offset == offset:
                        passed[key] = offset
            if passed:
                try:
                    self._run(self._commit_policy, lambda: self._commit_kafka(passed))
                except MetaqError as e:
                    log.warning("group %s: offsets of %d partitions are committed in ZooKeeper but not yet in "
                                "Kafka (re-sent at the next commit): %s", self._group, len(passed), e)
                else:
                    self._kafka_last.update(passed)
            return result

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            keys = list(partitions)
            self._zk.release(keys)
            for key in keys:
                self._forget(key)

    def owned(self) -> set[TopicPartition]:
        return self._zk.owned()

    def changed_behind(self, partitions: Iterable[TopicPartition],
                       watch: Callable[[WatchedEvent], None] | None = None) -> dict[TopicPartition, int | None]:
        """The ZooKeeper half decides (an operator's reset writes ZooKeeper and Kafka, a new owner fences
        ZooKeeper); the partitions it reports are forgotten here too."""
        with self._lock:
            changed = self._zk.changed_behind(partitions, watch)
            for key in changed:
                self._forget(key)
            return changed

    def close(self) -> None:
        self._closing.set()
        self._channel.close()  # interrupts a request blocked on the socket
        with self._lock:
            self._zk.close()
            self._zk_last.clear()
            self._kafka_last.clear()
            self._channel.close()  # again: a commit that held the lock may have reconnected meanwhile

    def unsynced(self) -> dict[TopicPartition, int]:
        """Owned partitions whose Kafka copy lags the offset last committed to ZooKeeper."""
        owned = self._zk.owned()
        with self._lock:
            return {key: zk for key, zk in self._zk_last.items()
                    if zk is not None and key in owned and self._kafka_last.get(key) != zk}

    @property
    def channel(self) -> OffsetsChannel:
        return self._channel

    def _forget(self, key: TopicPartition) -> None:
        self._zk_last.pop(key, None)
        self._kafka_last.pop(key, None)

    # -- the wire ----------------------------------------------------------------------------------

    def _commit_kafka(self, offsets: Mapping[TopicPartition, int]) -> None:
        """One OffsetCommit (v2, or v1/v0 for a Kafka 0.8.x coordinator); a partition error other than a
        coordinator error is not retried."""
        offered = self._channel.connection().broker_versions.get(ApiKey.OFFSET_COMMIT, (0, -1))
        try:
            version = commit_version(offered)
        except UnsupportedVersionError as e:
            raise UnsupportedVersionError(f"group {self._group}: {e}") from None
        response = self._channel.send(OffsetCommitRequest, commit_request(self._group, offsets, version))
        codes = commit_codes(response, self._group, offsets)
        for code in sorted(set(codes.values()), key=lambda c: not look_again(c)):  # coordinator errors first
            bad = sorted(k for k, c in codes.items() if c == code)
            check_code(code, f"committing offsets of group {self._group} for {bad[:5]}")

    def _fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """One OffsetFetch (v0..5; v0 reads ZooKeeper offsets on a Kafka 0.8.1 broker, whose OffsetCommit v0
        writes them there); partitions without a committed offset are left out."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        response = self._channel.send(OffsetFetchRequest, {
            "group_id": self._group,
            "topics": [{"name": t, "partition_indexes": sorted(ps)} for t, ps in sorted(by_topic.items())]})
        return fetched_offsets(response, f"fetching offsets of group {self._group}")
