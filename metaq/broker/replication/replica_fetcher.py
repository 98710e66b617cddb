"""A follower's replica fetcher: one thread per leader broker, named ``metaq-replica-fetcher-<leader id>``.

Before fetching from a new leader it truncates the log where it diverges from the leader's, asking the
leader with OffsetForLeaderEpoch (KIP-101). Then it sends ordinary Fetch requests through
:mod:`metaq.client` (with the inter-broker listener's TLS and SASL, as any client: see
:meth:`BrokerConfig.inter_broker_security`) with ``replica_id`` = this broker's id (the leader learns the
follower's LEO from the fetch offsets) and ``current_leader_epoch`` = the epoch it follows (a leader at
another epoch answers FENCED/UNKNOWN_LEADER_EPOCH instead of data). Complete batches are appended on the event loop by
:meth:`ReplicaManager.append_fetched`, which drops them if the role changed meanwhile. Errors back off for
``replica.fetch.backoff.ms`` (:func:`metaq.retry.replica_fetch`); the partition moves when the state node does.

The fetcher knows the manager only as a :class:`ReplicaHost` (this module does not import the manager): it
reads a :class:`FetchPosition` per partition and hands each answer back on the event loop, tagged with the
:class:`FetchSource` it was asked for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import NamedTuple, ParamSpec, Protocol

from kafka.protocol.consumer import FetchRequest, OffsetForLeaderEpochRequest

from metaq.broker.config import BrokerConfig
from metaq.broker.quota.replication import ReplicationQuota
from metaq.broker.quota.throttling import now_ms
from metaq.broker.replication.leader_epochs import EpochEnd
from metaq.client.connection import BrokerConnection
from metaq.client.settings import ConnectionSettings
from metaq.errors import ErrorCode, MetaqError, for_code
from metaq.protocol.batches import valid_prefix
from metaq.protocol.messages import ApiStruct, RequestFields
from metaq.retry import replica_fetch

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
APPEND_TIMEOUT_S = 30.0
IDLE_WAIT_S = 0.5  # a fetcher without partitions checks for a stop this often (add() wakes it at once)

P = ParamSpec("P")


class FetchPosition(NamedTuple):
    """Where a follower fetches one partition from (read by the fetcher thread, written nowhere)."""

    fetch_offset: int
    """Our log end offset."""
    leader_epoch: int
    """The leader epoch we follow (sent as ``current_leader_epoch``)."""
    truncate_epoch: int | None
    """While TRUNCATING: our latest leader epoch (-1: none known) to ask the leader the end of before
    fetching (KIP-101); None while FETCHING."""


class FetchSource(NamedTuple):
    """The role a request was made for: the manager drops an answer if the partition's role changed since."""

    key: TopicPartition
    leader: int
    leader_epoch: int


class ReplicaHost(Protocol):
    """What a replica fetcher needs from the replica manager (a seam: the manager owns the logs and the
    roles; every call below but the first four runs on the event loop through :meth:`ReplicaFetcher._on_loop`)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    def leader_address(self, broker_id: int) -> tuple[str, int] | None: ...

    def fetch_position(self, key: TopicPartition) -> FetchPosition | None: ...

    def truncate_follower(self, source: FetchSource, answer: EpochEnd) -> None: ...

    def append_fetched(self, source: FetchSource, records: bytes, leader_hw: int, leader_start: int = -1) -> None: ...

    def leader_out_of_range(self, source: FetchSource, leader_end: int, leader_start: int) -> None: ...

    def in_isr(self, key: TopicPartition, broker_id: int) -> bool: ...

    @property
    def follower_quota(self) -> ReplicationQuota | None: ...


class ReplicaFetcher(threading.Thread):
    """Fetches the partitions this broker follows from one leader broker (module docstring)."""

    def __init__(self, manager: ReplicaHost, config: BrokerConfig, leader: int) -> None:
        super().__init__(name=f"metaq-replica-fetcher-{leader}", daemon=True)
        self._manager = manager
        self._config = config
        self.leader = leader
        self._partitions: dict[TopicPartition, int] = {}  # -> leader epoch followed
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._changed = threading.Event()
        self._conn: BrokerConnection | None = None
        self._backoff = replica_fetch(replica_fetch_backoff_ms=config.replica_fetch_backoff_ms)
        # partitions the leader answered with an error, left out until then (monotonic s): one partition's
        # error ends a Fetch at once, which would otherwise spin the others' fetches (Kafka's delayPartitions)
        self._delayed: dict[TopicPartition, float] = {}
        # the inter-broker listener's protocol, as any client would speak it (TLS, SASL: BrokerConfig)
        self._settings = ConnectionSettings(
            client_id=f"metaq-replica-fetcher-{manager.broker_id}",
            request_timeout_ms=config.replica_fetch_wait_max_ms + 30000,
            max_response_bytes=max(104857600, 2 * config.replica_fetch_response_max_bytes),
            security=config.inter_broker_security())

    def add(self, key: TopicPartition, leader_epoch: int) -> None:
        with self._lock:
            self._partitions[key] = leader_epoch
            self._delayed.pop(key, None)  # a new leader epoch: fetch at once
        self._changed.set()

    def remove(self, key: TopicPartition) -> None:
        with self._lock:
            self._partitions.pop(key, None)

    def idle(self) -> bool:
        with self._lock:
            return not self._partitions

    def shutdown(self) -> None:
        self._stopped.set()
        self._changed.set()
        conn = self._conn
        if conn is not None:
            conn.close()

    def run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            with self._lock:
                partitions = dict(self._partitions)
            if not partitions:
                self._changed.wait(IDLE_WAIT_S)
                self._changed.clear()
                continue
            try:
                if not self._fetch_once(partitions):
                    self._stopped.wait(self._backoff.delay(1))
                failures = 0
            except (MetaqError, OSError) as e:
                failures += 1
                backoff = self._backoff.delay(failures)
                if not self._stopped.is_set():  # the first failure of a run loudly, the rest quietly
                    log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                            "replica fetch from broker %d failed (retrying every %.1fs): %s", self.leader, backoff, e)
                self._close()
                self._stopped.wait(backoff)
            except Exception:
                log.exception("replica fetcher for broker %d failed unexpectedly", self.leader)
                self._close()
                self._stopped.wait(self._backoff.delay(1))
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> BrokerConnection:
        if self._conn is None:
            address = self._manager.leader_address(self.leader)
            if address is None:
                raise MetaqError(f"broker {self.leader} is not registered")
            self._conn = self._settings.new_connection(address[0], address[1])
        self._conn.connect()
        return self._conn

    def _fetch_once(self, partitions: dict[TopicPartition, int]) -> bool:
        """One Fetch round; False if nothing could be fetched (back off)."""
        sources: dict[TopicPartition, FetchSource] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        truncating: dict[TopicPartition, tuple[FetchSource, int]] = {}
        now = time.monotonic()
        for key in [k for k, until in list(self._delayed.items()) if until <= now]:
            self._delayed.pop(key, None)
        for key, epoch in partitions.items():
            if key in self._delayed:
                continue
            position = self._manager.fetch_position(key)
            if position is None or position.leader_epoch != epoch:
                continue
            source = FetchSource(key, self.leader, epoch)
            if position.truncate_epoch is not None:
                truncating[key] = (source, position.truncate_epoch)
                continue
            if self._held_back(key):
                continue
            sources[key] = source
            topics.setdefault(key[0], []).append({
                "partition": key[1], "current_leader_epoch": epoch, "fetch_offset": position.fetch_offset,
                "log_start_offset": -1, "partition_max_bytes": self._config.replica_fetch_max_bytes})
        if truncating:
            self._truncate(truncating)
        if not sources:
            return bool(truncating)
        fields: RequestFields = {
            "replica_id": self._manager.broker_id,
            "max_wait_ms": self._config.replica_fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": self._config.replica_fetch_response_max_bytes,
            "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": parts} for topic, parts in topics.items()],
        }
        response = self._connection().send(FetchRequest, fields)
        ok = False
        for key, part in self._answers(response.responses, "partition_index", sources, "replica fetch"):
            if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                self._on_loop(self._manager.leader_out_of_range, sources[key], part.high_watermark,
                              part.log_start_offset)
            if part.error_code:
                self._delayed[key] = now + self._config.replica_fetch_backoff_ms / 1000.0
                continue
            ok = True
            records = bytes(part.records or b"")
            complete, _ = valid_prefix(records)
            self._count_throttled(key, complete)
            self._on_loop(self._manager.append_fetched, sources[key], records[:complete], part.high_watermark,
                          part.log_start_offset)
        return ok

    def _held_back(self, key: TopicPartition) -> bool:
        """The follower's replication throttle (docs/quotas.md): a throttled partition outside the ISR is not
        fetched while the throttled bytes are over ``follower.replication.throttled.rate``."""
        quota = self._manager.follower_quota
        return quota is not None and quota.bound is not None and quota.holds_back(
            key[0], key[1], self._manager.in_isr(key, self._manager.broker_id), now_ms())

    def _count_throttled(self, key: TopicPartition, size: int) -> None:
        """Bytes of a throttled partition count towards the follower's rate, in sync or not (as Kafka)."""
        quota = self._manager.follower_quota
        if quota is not None and size and quota.is_throttled(*key):
            quota.record(size, now_ms())

    def _answers(self, topics: Iterable[ApiStruct], index: str, wanted: Collection[TopicPartition],
                 what: str) -> Iterator[tuple[TopicPartition, ApiStruct]]:
        """(key, answer) of each partition of a response that was asked for; errors are logged here."""
        for topic in topics:
            for part in topic.partitions:
                key = (topic.topic, getattr(part, index))
                if key not in wanted:
                    continue
                if part.error_code:
                    log.info("%s of %s-%d from broker %d: %s", what, *key, self.leader,
                             for_code(part.error_code).message)
                yield key, part

    def _truncate(self, truncating: dict[TopicPartition, tuple[FetchSource, int]]) -> None:
        """KIP-101: ask the leader where our latest epoch ends (OffsetForLeaderEpoch) and truncate there."""
        asked: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), (source, latest) in truncating.items():
            if latest < 0:  # no epochs in our log: the manager falls back to the high watermark
                self._on_loop(self._manager.truncate_follower, source, EpochEnd(-1, -1))
                continue
            asked.setdefault(topic, []).append(
                {"partition": partition, "current_leader_epoch": source.leader_epoch, "leader_epoch": latest})
        if not asked:
            return
        response = self._connection().send(OffsetForLeaderEpochRequest, {
            "replica_id": self._manager.broker_id,
            "topics": [{"topic": topic, "partitions": parts} for topic, parts in asked.items()]})
        for key, part in self._answers(response.topics, "partition", truncating, "OffsetForLeaderEpoch"):
            if not part.error_code:
                self._on_loop(self._manager.truncate_follower, truncating[key][0],
                              EpochEnd(part.leader_epoch, part.end_offset))

    def _on_loop(self, fn: Callable[P, None], *args: P.args, **kwargs: P.kwargs) -> None:
        """Run ``fn(*args, **kwargs)`` on the broker's event loop (logs are single-threaded) and wait for it."""
        loop = self._manager.loop
        if loop is None or loop.is_closed():
            return

        async def call() -> None:
            fn(*args, **kwargs)

        asyncio.run_coroutine_threadsafe(call(), loop).result(APPEND_TIMEOUT_S)
