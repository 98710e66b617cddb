"""``offsets.storage=kafka``: offsets in ``__consumer_offsets`` over the offsets channel, fenced in ZooKeeper.

    store = KafkaOffsetStore(layout, config)           # what default_offset_store picks for storage=kafka
    store.take_ownership([("clicks", 0)])              # {("clicks", 0): 42}: max(zookeeper, kafka)
    store.commit({("clicks", 0): 57})                  # ZooKeeper (version-checked) first, then Kafka

The offsets channel is Kafka 0.8's ``channelToOffsetManager``: a coordinator lookup (FindCoordinator) sent
to a randomly chosen live broker from ``/brokers/ids``, then a connection to the coordinator it names. On
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or a connection error the channel
is dropped and the next attempt looks the coordinator up again. Attempts follow the policies of metaq/retry.py: commits
wait ``offsets.channel.backoff.ms`` and give up after ``offsets.commit.max.retries`` retries; fetches
wait the same and give up at a deadline (``metaq.offsets.fetch.timeout.ms``), so a rebalance is never
blocked for ever by an unreachable coordinator (it fails the attempt and the rebalancer retries).

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
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import tenacity
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kazoo.protocol.states import WatchedEvent

from metaq.client.cluster import broker_endpoint
from metaq.client.connection import BrokerConnection
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK, ApiKey
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import CommitResult, TopicPartition, ZooKeeperOffsetStore
from metaq.errors import (
    BrokerConnectionError,
    CoordinatorError,
    ErrorCode,
    MetaqError,
    ProtocolError,
    UnsupportedVersionError,
    for_code,
)
from metaq.protocol.messages import ApiRequest, ApiResponse, RequestFields
from metaq.retry import RetryPolicy, offsets_commit, offsets_fetch
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

COMMIT_VERSION = 2  # generation -1 / member "" / retention -1: a commit from outside the group protocol

T = TypeVar("T")


def look_again(code: int) -> bool:
    """Whether ``code`` says the coordinator moved, is loading or is unavailable (look it up again)."""
    return bool(code) and for_code(code).group_coordinator


def _check(code: int, context: str) -> None:
    if look_again(code):
        raise CoordinatorError(code, context)
    if code:
        cls = for_code(code)
        raise cls(f"{cls.message} ({code}) {context}")


def commit_request(group: str, offsets: Mapping[TopicPartition, int], version: int = COMMIT_VERSION) -> ApiRequest:
    """An OffsetCommit from outside the group protocol (generation -1, no member, no retention, no
    timestamp): v2, or v1 / v0 for a Kafka 0.8.2 / 0.8.1 coordinator (v0: stored in ZooKeeper by the
    broker). kafka-python leaves out the fields a version lacks."""
    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    request: ApiRequest = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            partition(partition_index=p, committed_offset=o, committed_metadata="", commit_timestamp=-1)
            for (t, p), o in sorted(offsets.items()) if t == topic])
            for topic in sorted({t for t, _ in offsets})])
    return request


def commit_version(broker_range: tuple[int, int]) -> int:
    """The OffsetCommit version to send a coordinator offering ``broker_range``: v2 (see
    :data:`COMMIT_VERSION`), or the highest it has below (Kafka 0.8.x); UnsupportedVersionError without."""
    low, high = broker_range
    version = min(COMMIT_VERSION, high)
    if version < low or version < 0:
        raise UnsupportedVersionError(f"the coordinator offers OffsetCommit v{low}..{high}, metaq sends "
                                      f"v0..{COMMIT_VERSION} from outside the group protocol")
    return version


def commit_codes(response: ApiResponse, group: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Error code per partition of an OffsetCommit answer; every partition sent must be answered."""
    codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
    missing = set(offsets) - set(codes)
    if missing:
        raise ProtocolError(f"OffsetCommit response for group {group} lacks {sorted(missing)}")
    return codes


def fetched_offsets(response: ApiResponse, context: str) -> dict[TopicPartition, int]:
    """Committed offsets of an OffsetFetch answer (group-level and partition errors raised; partitions
    without an offset left out)."""
    _check(getattr(response, "error_code", 0) or 0, context)  # v2+: group-level errors
    found: dict[TopicPartition, int] = {}
    for topic in response.topics:
        for part in topic.partitions:
            _check(part.error_code, f"{context} ({topic.name}-{part.partition_index})")
            if part.committed_offset >= 0:
                found[(topic.name, part.partition_index)] = part.committed_offset
    return found


class OffsetsChannel:
    """A blocking connection to one group's coordinator, (re)established on demand.

    Not thread-safe: the store serialises its use. :meth:`close` may be called from any thread and
    interrupts a blocked request.
    """

    def __init__(self, layout: ZkLayout, group: str, *, client_id: str, socket_timeout_ms: int,
                 security: SecurityConfig | None = None, broker_version_fallback: str = DEFAULT_FALLBACK) -> None:
        self._layout = layout
        self._group = group
        self._settings = ConnectionSettings(client_id=client_id, request_timeout_ms=socket_timeout_ms,
                                            connect_timeout_ms=socket_timeout_ms,
                                            broker_version_fallback=broker_version_fallback,
                                            security=security or SecurityConfig())
        self._conn: BrokerConnection | None = None
        self.coordinator: tuple[int, str, int] | None = None  # (node id, host, port) once found
        self.lookups = 0

    def connection(self) -> BrokerConnection:
        """The coordinator's connection: one coordinator lookup at a random live broker when there is none."""
        conn = self._conn
        if conn is not None and conn.is_connected:
            return conn
        self._conn = self._lookup()
        return self._conn

    def _connect(self, host: str, port: int) -> BrokerConnection:
        return self._settings.open(host, port)

    def _any_broker(self) -> BrokerConnection:
        """channelToAnyBroker: the live brokers in random order, the first that accepts a connection."""
        protocol = self._settings.security_protocol
        brokers = [a for a in (broker_endpoint(b, protocol) for b in self._layout.brokers().values()) if a]
        random.shuffle(brokers)
        errors = []
        for host, port in brokers:
            try:
                return self._connect(host, port)
            except BrokerConnectionError as e:
                errors.append(str(e))
        raise BrokerConnectionError(f"no live broker accepts a connection for the coordinator lookup of group "
                                    f"{self._group} ({len(brokers)} registered): {'; '.join(errors) or 'none'}")

    def _lookup(self) -> BrokerConnection:
        self.lookups += 1
        first = self._any_broker()
        query: BrokerConnection | None = first  # closed at the end unless it is the coordinator
        try:
            response = first.send(FindCoordinatorRequest, {"key": self._group, "key_type": 0})
            _check(response.error_code, f"from the coordinator lookup of group {self._group} at {first.address}")
            if response.node_id < 0 or not response.host or response.port <= 0:
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       f"for group {self._group}: no coordinator named")
            self.coordinator = (response.node_id, response.host, response.port)
            if (response.host, response.port) == (first.host, first.port):
                conn, query = first, None  # the random broker is the coordinator: keep its connection
            else:
                conn = self._connect(response.host, response.port)
        finally:
            if query is not None:
                query.close()
        log.info("group %s: offsets channel to coordinator %d at %s", self._group, response.node_id, conn.address)
        return conn

    def send(self, request_class: type[ApiMessage], request: RequestFields | ApiMessage) -> ApiResponse:
        """One request over the channel; any failure drops the channel (the next call looks up again)."""
        conn = self.connection()
        try:
            return conn.send(request_class, request)
        except (BrokerConnectionError, ProtocolError):
            self.drop()
            raise

    def api_version(self, api_key: int) -> int:
        return self.connection().api_version(api_key)

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    close = drop


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
            _check(code, f"committing offsets of group {self._group} for {bad[:5]}")

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
