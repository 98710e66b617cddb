"""Fetcher threads: Kafka 0.8's ConsumerFetcherThread, started by its ConsumerFetcherManager
(:class:`~metaq.consumer.fetcher_manager.FetcherManager`).

    manager = FetcherManager(config, layout, consumer_id="etl_host-1-abc")
    manager.start_connections(registry.values())   # after a rebalance claimed the partitions
    ...                                             # chunks arrive in each PartitionTopicInfo's stream queue
    manager.stop_connections()                      # before the next rebalance: joins every thread
    manager.close()

``start_connections`` reads each partition's leader from ZooKeeper and gives the partition to the runner for
(leader broker, fetcher id), fetcher id = ``abs(31 * hash(topic) + partition) % num.consumer.fetchers`` in Java
int arithmetic, as Kafka does. One :class:`FetchRequestRunner` thread per pair, named
``<consumer id>-fetcher-<fetcher id>-broker-<broker id>``, sends one Fetch request for all its partitions,
decodes each partition's records and hands them to ``info.enqueue`` (which blocks while the stream's queue is
full: the back-pressure). Partitions without a leader go to the :class:`LeaderFinder` thread.

Per partition, what a runner does with the broker's answer:

- records: enqueued as one chunk (records below the fetch offset are left out);
- OFFSET_OUT_OF_RANGE, or no offset yet (-1): ListOffsets as ``auto.offset.reset`` says, then
  ``info.reset_offsets``;
- NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE: handed to the leader finder;
- a first batch larger than ``fetch.message.max.bytes``: a MessageSizeTooLargeError chunk, and the partition
  is no longer fetched (the application sees the error when it reaches that offset);
- a corrupt batch or another error code: logged, and the partition is retried after a backoff.

A refused TLS certificate or SASL login (an AuthenticationError) is not retried: the runner stops fetching its
partitions and each stream raises the error, as for an oversized batch.

Connection errors close the connection and back off (exponential with jitter, capped at one second); after
:data:`HANDOFF_AFTER_FAILURES` in a row the partitions go to the leader finder, which sends them back to a
runner once ZooKeeper names a live leader. A runner never dies from an exception. Every blocking wait is
bounded, and :meth:`~metaq.consumer.fetcher_manager.FetcherManager.stop_connections` closes the connections
to interrupt reads, so it returns within its timeout; afterwards no fetcher thread touches any PartitionTopicInfo.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from kafka.protocol.consumer import FetchRequest

from metaq.client.cluster import Leader, list_offsets_answers, send_list_offsets
from metaq.client.connection import BrokerConnection
from metaq.client.settings import ConnectionSettings
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.fetch_chunks import _batch_groups, _decodable_prefix
from metaq.consumer.leader_finder import TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import (
    AuthenticationError,
    BrokerConnectionError,
    CorruptRecordError,
    ErrorCode,
    MessageSizeTooLargeError,
    MetaqError,
    ProtocolError,
    for_code,
)
from metaq.metrics.consumer import ConsumerMetrics
from metaq.protocol.control import aborted_ranges, in_ranges
from metaq.protocol.messages import ApiResponse
from metaq.protocol.record_types import Record
from metaq.protocol.records import decode_records
from metaq.retry import fetcher as fetcher_policy

log = logging.getLogger(__name__)

__all__ = ["FetchRequestRunner", "connection_settings"]

HANDOFF_AFTER_FAILURES = 3
"""Consecutive connection failures after which a runner gives its partitions to the leader finder."""
BACKOFF_MAX_S = 1.0
"""Cap of the retry backoff after errors."""
CONNECT_TIMEOUT_MAX_MS = 5000
"""Cap of the TCP connect timeout: close() cannot interrupt a connect, so this bounds stop_connections."""
CHUNK_RECORDS = 20000
"""Most records a chunk holds (unless one batch has more). ``fetch.message.max.bytes`` bounds the compressed
bytes of a fetch, which can hold far more records than that: such a fetch is decoded and enqueued a group of
batches at a time, so that each chunk is read while still in the CPU caches and the decoded records wait in
the stream's bounded queue rather than all at once in memory (docs/architecture.md, "Consumer CPU and the
garbage collector"). An uncompressed 1 MiB fetch of 100-byte values holds about 7,500 records: one chunk."""
MIN_RESPONSE_BYTES = 104857600
"""Smallest response a runner accepts: fetch.max.bytes can be exceeded by a whole oversized batch (KIP-74)."""

_EARLIEST = -2
_LATEST = -1
_IDLE_WAIT_S = 0.5  # a runner without partitions; add() and shutdown() wake it earlier
_MIN_BACKOFF_S = 0.01  # refresh.leader.backoff.ms=0 must not make a failing runner spin


def connection_settings(config: ConsumerConfig) -> ConnectionSettings:
    """How the consumer's connections are made: client.id, socket.timeout.ms, and responses as large as a
    Fetch can be."""
    return ConnectionSettings(
        client_id=config.effective_client_id, request_timeout_ms=config.socket_timeout_ms,
        connect_timeout_ms=min(config.socket_timeout_ms, CONNECT_TIMEOUT_MAX_MS),
        max_response_bytes=max(MIN_RESPONSE_BYTES, config.fetch_max_bytes + config.fetch_message_max_bytes),
        security=config.security(), broker_version_fallback=config.broker_version_fallback)


class _Owner(Protocol):
    """What a runner needs from its manager (a seam for tests)."""

    def leader_lost(self, infos: list[PartitionTopicInfo]) -> None: ...

    def record_error(self, key: TopicPartition | None, error: BaseException) -> None: ...

    def clear_error(self, key: TopicPartition) -> None: ...



class FetchRequestRunner(threading.Thread):
    """One fetcher thread: Fetch requests to one broker for a changing set of partitions (module docstring)."""

    def __init__(self, owner: _Owner, config: ConsumerConfig, leader: Leader, fetcher: int, *,
                 consumer_id: str, settings: ConnectionSettings | None = None,
                 metrics: ConsumerMetrics | None = None) -> None:
        super().__init__(name=f"{consumer_id}-fetcher-{fetcher}-broker-{leader.broker_id}", daemon=True)
        self._owner = owner
        self._config = config
        self._metrics = metrics
        self._settings = settings if settings is not None else connection_settings(config)
        self.broker_id = leader.broker_id
        self.fetcher_id = fetcher
        self._address = (leader.host, leader.port)
        self._lock = threading.Lock()  # guards _partitions, _address and _conn against other threads
        self._partitions: dict[TopicPartition, PartitionTopicInfo] = {}
        self._paused_until: dict[TopicPartition, float] = {}  # only touched by this thread
        self._conn: BrokerConnection | None = None
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self._backoff = fetcher_policy(refresh_leader_backoff_ms=config.refresh_leader_backoff_ms, max_s=BACKOFF_MAX_S,
                                       min_s=_MIN_BACKOFF_S)
        self._failures = 0  # consecutive failed requests; reset by a good response
        self._rotation = 0  # start index of the partition order, so that no partition starves

    # -- called from other threads -------------------------------------------------------------------

    def add(self, info: PartitionTopicInfo) -> None:
        with self._lock:
            self._partitions[info.key] = info
        self._wakeup.set()

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._partitions)

    def move_to(self, host: str, port: int) -> None:
        """The broker re-registered at another address: reconnect there."""
        with self._lock:
            if self._address == (host, port):
                return
            self._address = (host, port)
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def shutdown(self) -> None:
        """Ask the thread to stop and interrupt a blocked read by closing the connection. Join it to wait."""
        self._stopped.set()
        self._wakeup.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close()

    # -- the thread --------------------------------------------------------------------------------

    def run(self) -> None:
        log.debug("%s started for %s:%d", self.name, *self._address)
        while not self._stopped.is_set():
            try:
                self._run_once()
            except Exception as e:  # a runner must never die: log, back off, go on
                log.exception("%s: unexpected error; retrying after a backoff", self.name)
                self._owner.record_error(None, e)
                self._close_connection()
                self._failures += 1
                self._sleep(self._backoff.delay(self._failures))
        self._close_connection()
        log.debug("%s stopped", self.name)

    def _run_once(self) -> None:
        infos = self._fetchable()
        if not infos:
            self._wait_for_work()
            return
        try:
            conn = self._connection()
            unresolved = [info for info in infos if info.get_fetch_offset() < 0]
            if unresolved:
                self._reset_offsets(conn, unresolved, reason="no committed offset")
                infos = [info for info in self._fetchable() if info.get_fetch_offset() >= 0]
                if not infos:
                    return
            offsets, response = self._fetch(conn, infos)
            self._failures = 0
            if self._metrics is not None:
                self._metrics.fetch_request(self.broker_id)
            self._handle_response(conn, offsets, response)
        except (BrokerConnectionError, ProtocolError) as e:
            if self._metrics is not None:
                self._metrics.fetch_error(type(e).__name__)
            self._connection_failed(e)
        except AuthenticationError as e:  # the same settings fail the same way: stop, the streams raise it
            self._close_connection()
            log.error("%s: %s; no longer fetching %d partitions", self.name, e, len(infos))
            for info in infos:
                self._owner.record_error(info.key, e)
                self._remove(info)
                self._offer_error(info, e)

    def _fetchable(self) -> list[PartitionTopicInfo]:
        """Owned partitions not in an error backoff; revoked ones are dropped for good."""
        now = time.monotonic()
        with self._lock:
            for key in [k for k, info in self._partitions.items() if info.revoked]:
                del self._partitions[key]
            infos = list(self._partitions.values())
        paused = self._paused_until
        if paused:
            for key in [k for k, until in paused.items() if until <= now]:
                del paused[key]
            infos = [info for info in infos if info.key not in paused]
        return infos

    def _wait_for_work(self) -> None:
        """Nothing to fetch: sleep until a partition is added or a paused one may be retried."""
        timeout = _IDLE_WAIT_S
        if self._paused_until:
            timeout = max(0.0, min(min(self._paused_until.values()) - time.monotonic(), timeout))
        self._wakeup.wait(timeout)
        self._wakeup.clear()  # a lost signal only delays the next look by one wait

    def _connection(self) -> BrokerConnection:
        with self._lock:
            conn = self._conn
            if conn is None:
                conn = self._conn = self._settings.new_connection(*self._address)
        if not conn.is_connected:
            conn.connect()
            if self._stopped.is_set():  # shutdown() ran while we were connecting: do not start a fetch
                conn.close()
                raise BrokerConnectionError(f"{self.name} is stopping")
        return conn

    def _close_connection(self) -> None:
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close()

    def _sleep(self, seconds: float) -> None:
        self._stopped.wait(seconds)  # an Event, so that shutdown() cuts the backoff short

    # -- requests ----------------------------------------------------------------------------------

    def _fetch(self, conn: BrokerConnection, infos: list[PartitionTopicInfo]
               ) -> tuple[dict[TopicPartition, int], ApiResponse]:
        """One Fetch request for ``infos``; returns the offsets asked for and the decoded response."""
        config = self._config
        self._rotation = (self._rotation + 1) % len(infos)
        ordered = infos[self._rotation:] + infos[:self._rotation]
        offsets: dict[TopicPartition, int] = {}
        topics: dict[str, list[dict[str, int]]] = {}
        max_bytes = config.fetch_message_max_bytes
        for info in ordered:
            offset = info.get_fetch_offset()
            offsets[info.key] = offset
            topics.setdefault(info.topic, []).append(
                {"partition": info.partition, "fetch_offset": offset, "partition_max_bytes": max_bytes})
        fields = {
            "replica_id": -1,
            "max_wait_ms": config.fetch_wait_max_ms,
            "min_bytes": config.fetch_min_bytes,
            "max_bytes": config.fetch_max_bytes,
            "isolation_level": self._isolation_level,
            "topics": [{"topic": topic, "partitions": parts} for topic, parts in topics.items()],
        }
        return offsets, conn.send(FetchRequest, fields)

    @property
    def _isolation_level(self) -> int:
        """Fetch's and ListOffsets' isolation_level: 1 for read_committed (docs/transactions.md)."""
        return 1 if self._config.isolation_level == "read_committed" else 0

    def _handle_response(self, conn: BrokerConnection, offsets: dict[TopicPartition, int],
                         response: ApiResponse) -> None:
        top_error = getattr(response, "error_code", 0)
        if top_error:  # v7+: the request as a whole failed (fetch sessions); retry everything later
            error = for_code(top_error)(f"Fetch from broker {self.broker_id} failed with error {top_error}")
            log.warning("%s: %s", self.name, error)
            self._owner.record_error(None, error)
            self._pause(list(offsets))
            return
        out_of_range: list[PartitionTopicInfo] = []
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic, part.partition_index)
                fetch_offset = offsets.get(key)
                info = self._owned(key)
                if info is None or fetch_offset is None:
                    continue
                if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(info)
                elif part.error_code:
                    self._partition_error(info, fetch_offset, part.error_code)
                else:
                    # read_committed: lag against the last stable offset, as Kafka's consumer counts it
                    lso = getattr(part, "last_stable_offset", -1)  # Fetch v4+
                    info.log_end_offset = lso if self._isolation_level and lso >= 0 else part.high_watermark
                    if part.records:
                        self._deliver(info, fetch_offset, part.records,
                                      aborted_ranges(part.records, getattr(part, "aborted_transactions", None) or ())
                                      if self._isolation_level else ())
                if self._stopped.is_set():
                    return
        if out_of_range:
            for info in out_of_range:
                log.warning("%s: offset %d of %s-%d is out of range; resetting as auto.offset.reset=%s says",
                            self.name, offsets[info.key], info.topic, info.partition, self._config.auto_offset_reset)
            self._reset_offsets(conn, out_of_range, reason="offset out of range")

    def _reset_offsets(self, conn: BrokerConnection, infos: list[PartitionTopicInfo], *, reason: str) -> None:
        """ListOffsets (earliest for auto.offset.reset=smallest, else latest), then ``info.reset_offsets``."""
        timestamp = _EARLIEST if self._config.auto_offset_reset == "smallest" else _LATEST
        answers = list_offsets_answers(send_list_offsets(conn, [info.key for info in infos], timestamp,
                                                         self._isolation_level).result())
        by_key = {info.key: info for info in infos}
        for key, part in answers.items():
            info = by_key.pop(key, None)
            if info is None or info.revoked:
                continue
            if part.error_code:
                self._partition_error(info, info.get_fetch_offset(), part.error_code)
                continue
            old = info.get_fetch_offset()
            info.reset_offsets(part.offset)
            level = logging.WARNING if old >= 0 else logging.INFO
            log.log(level, "%s: %s for %s-%d: fetch offset %d -> %d (auto.offset.reset=%s)", self.name, reason,
                    info.topic, info.partition, old, part.offset, self._config.auto_offset_reset)
        if by_key:  # not answered: try again after a backoff rather than in a tight loop
            log.warning("%s: ListOffsets from broker %d did not answer for %s", self.name, self.broker_id,
                        sorted(by_key))
            self._pause(list(by_key))

    # -- per-partition outcomes --------------------------------------------------------------------

    def _deliver(self, info: PartitionTopicInfo, fetch_offset: int, data: bytes,
                 dropped: Sequence[tuple[int, int]] = ()) -> None:
        """Decode and enqueue a partition's records, :data:`CHUNK_RECORDS` at a time when there are more;
        records in the ``dropped`` offset ranges (aborted transactions, read_committed) are left out."""
        groups = _batch_groups(data, CHUNK_RECORDS)
        if len(groups) <= 1:
            self._deliver_part(info, fetch_offset, data, dropped)
            return
        offset: int | None = fetch_offset
        for start, end in groups:
            if offset is None or self._stopped.is_set():
                return
            offset = self._deliver_part(info, offset, data[start:end], dropped)

    def _deliver_part(self, info: PartitionTopicInfo, fetch_offset: int, data: bytes,
                      dropped: Sequence[tuple[int, int]] = ()) -> int | None:
        """Decode ``data`` and enqueue its records as one chunk; returns the partition's next fetch offset, or
        None if the partition went no further (revoked, stopped, an error)."""
        try:
            result = decode_records(data, fetch_offset)
        except CorruptRecordError as e:
            # Fetching again returns the same bytes: deliver the batches before the bad one, then stop this
            # partition and hand the error to its stream rather than retrying forever (a batch the broker
            # validated only fails here if it broke on disk).
            prefix = _decodable_prefix(data, fetch_offset)
            if prefix is None:
                error = CorruptRecordError(
                    f"{info.topic}-{info.partition}: the data fetched at offset {fetch_offset} from broker "
                    f"{self.broker_id} cannot be decoded: {e}")
                self._stop_partition(info, error)
                return None
            result = prefix  # the next fetch starts at the bad batch and stops the partition
        if dropped:
            result = result._replace(records=[r for r in result.records if not in_ranges(r[0], dropped)])
        size = result.first_batch_size
        if size is not None and size > self._config.fetch_message_max_bytes:
            self._too_large(info, fetch_offset, size)
            return None
        if result.records:
            if self._metrics is not None:
                self._metrics.fetched(info.topic, len(result.records), len(data))
            accepted = self._offer(info, fetch_offset, result.records)
            if accepted:
                self._owner.clear_error(info.key)
                return int(result.records[-1][0]) + 1
            if info.revoked:
                self._remove(info)
        elif result.next_offset is not None and result.next_offset > fetch_offset:
            if info.advance_fetched(fetch_offset, result.next_offset):
                return result.next_offset
        return None

    def _too_large(self, info: PartitionTopicInfo, fetch_offset: int, size: int) -> None:
        limit = self._config.fetch_message_max_bytes
        error = MessageSizeTooLargeError(
            f"{info.topic}-{info.partition}: the record batch at offset {fetch_offset} is {size} bytes, larger "
            f"than fetch.message.max.bytes ({limit}); set fetch.message.max.bytes to at least {size} to consume it")
        self._stop_partition(info, error)

    def _stop_partition(self, info: PartitionTopicInfo, error: MetaqError) -> None:
        """No longer fetch this partition; its stream raises ``error`` once it has the records before it."""
        log.error("%s: %s; no longer fetching this partition", self.name, error)
        self._owner.record_error(info.key, error)
        self._remove(info)
        self._offer_error(info, error)

    def _partition_error(self, info: PartitionTopicInfo, fetch_offset: int, code: int) -> None:
        cls = for_code(code)
        error = cls(f"{cls.message} ({code}) for {info.topic}-{info.partition} at offset {fetch_offset} "
                    f"from broker {self.broker_id}")
        if self._metrics is not None:
            self._metrics.fetch_error(cls.message)
        if cls.authorization:  # an ACL refuses it: fatal (the stream raises it), as Kafka's consumer does
            self._stop_partition(info, error)
            return
        self._owner.record_error(info.key, error)
        if cls.invalid_metadata:
            log.info("%s: %s; looking for the leader again", self.name, error)
            self._remove(info)
            self._owner.leader_lost([info])
        else:
            log.warning("%s: %s; retrying after a backoff", self.name, error)
            self._pause([info.key])

    def _connection_failed(self, error: MetaqError) -> None:
        self._close_connection()
        if self._stopped.is_set():
            return
        self._failures += 1
        self._owner.record_error(None, error)
        log.warning("%s: %s (failure %d in a row)", self.name, error, self._failures)
        if self._failures % HANDOFF_AFTER_FAILURES == 0:
            with self._lock:
                infos = list(self._partitions.values())
                self._partitions.clear()
            if infos:
                log.warning("%s: handing %d partitions to the leader finder after %d failures", self.name,
                            len(infos), self._failures)
                self._owner.leader_lost(infos)
        self._sleep(self._backoff.delay(self._failures))

    def _pause(self, keys: list[TopicPartition]) -> None:
        """Leave these partitions out of fetches for one backoff."""
        until = time.monotonic() + self._backoff.delay(1)
        for key in keys:
            self._paused_until[key] = until

    def _owned(self, key: TopicPartition) -> PartitionTopicInfo | None:
        with self._lock:
            info = self._partitions.get(key)
        return None if info is None or info.revoked else info

    def _remove(self, info: PartitionTopicInfo) -> None:
        with self._lock:
            if self._partitions.get(info.key) is info:
                del self._partitions[info.key]
        self._paused_until.pop(info.key, None)

    # -- handing chunks to the streams -------------------------------------------------------------

    def _offer(self, info: PartitionTopicInfo, fetch_offset: int, records: list[Record]) -> bool:
        """``info.enqueue``, blocking while the stream's queue is full but never past a stop request."""
        return info.enqueue(fetch_offset, records, stop=self._stopped)

    def _offer_error(self, info: PartitionTopicInfo, error: MetaqError) -> None:
        info.enqueue_error(error, stop=self._stopped)
