"""The producer's background thread: ready batches -> one ProduceRequest per leader broker -> futures.

Each loop the thread (named "metaq-producer-sender")

1. re-reads from ZooKeeper the topics whose metadata a failure made suspect,
2. asks the accumulator which partitions are ready and groups them by leader,
3. sends one ProduceRequest per broker (up to ``max.in.flight.requests.per.connection`` pipelined; to a
   broker before Kafka 0.11 the batches go as message sets v0/v1, metaq/producer/legacy.py),
4. waits on the brokers' sockets and a wakeup socket until a response, a new batch or a deadline.

A failed batch is retried as the :func:`metaq.retry.producer_send` policy says (retriable errors only,
exponential backoff, at most ``retries`` times) and otherwise fails its futures with the error: a
:class:`BrokerResponseError` for a code the broker answered, :class:`BrokerConnectionError` when it could not be
reached.
"""

from __future__ import annotations

import logging
import math
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kafka.protocol.producer import ProduceRequest

from metaq.client.connection import BrokerConnection
from metaq.client.in_flight import InFlightRequest
from metaq.client.versions import ApiKey
from metaq.errors import (
    AuthenticationError,
    BrokerConnectionError,
    BrokerResponseError,
    MetaqError,
    NotLeaderForPartitionError,
    ProtocolError,
    UnknownTopicError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
    for_code,
)
from metaq.producer.accumulator import ProducerBatch, RecordAccumulator, TopicPartition
from metaq.producer.config import ProducerConfig
from metaq.producer.idempotence import ProducerIdentity
from metaq.producer.legacy import (
    FIRST_BATCH_PRODUCE_VERSION,
    HeadersUnsupportedError,
    message_set_from_batch,
    produce_magic,
)
from metaq.producer.metadata import ClusterMetadata, Leader
from metaq.protocol.messages import ApiResponse, RequestFields
from metaq.retry import producer_send

log = logging.getLogger(__name__)

THREAD_NAME = "metaq-producer-sender"
_IDLE_POLL = 1.0  # seconds; bounds how stale the "stopping" flag can get if a wakeup is lost


@dataclass
class _Request:
    handle: InFlightRequest
    batches: dict[TopicPartition, ProducerBatch]


ZSTD_MIN_PRODUCE_VERSION = 7
"""The first Produce version whose record sets may carry zstd batches (KIP-110)."""


@dataclass
class _Node:
    """A leader broker and our connection to it."""

    leader: Leader
    conn: BrokerConnection
    in_flight: deque[_Request] = field(default_factory=deque)
    registered_fd: int = -1


class Sender(threading.Thread):
    """The background I/O thread of one Producer."""

    def __init__(self, config: ProducerConfig, accumulator: RecordAccumulator, metadata: ClusterMetadata,
                 connection_factory: Callable[..., BrokerConnection] | None = None) -> None:
        super().__init__(name=THREAD_NAME, daemon=True)
        self._config = config
        self._acc = accumulator
        self._metadata = metadata
        self._connect = connection_factory
        self._policy = producer_send(retries=config.retries, retry_backoff_ms=config.retry_backoff_ms,
                                     retry_backoff_max_ms=config.retry_backoff_max_ms)
        self._identity = ProducerIdentity() if config.idempotent else None
        self._identity_retry_at = 0.0  # after a failed InitProducerId: when to ask again
        self._nodes: dict[int, _Node] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = False  # finish what is buffered, then exit
        self._forced = False  # fail what is left and exit now
        self.failure: BaseException | None = None  # set if the thread died of a bug

    # -- control (any thread) --------------------------------------------------------------------------------

    def wakeup(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):  # full: a wakeup is already pending; closed: shutting down
            pass

    def initiate_close(self) -> None:
        """Send everything still buffered, then stop."""
        self._stopping = True
        self.wakeup()

    def force_close(self) -> None:
        """Stop now: fail unsent batches and interrupt blocked socket calls."""
        self._stopping = self._forced = True
        self.wakeup()
        for node in list(self._nodes.values()):
            node.conn.close()  # thread-safe; interrupts a blocked send or read

    # -- the loop --------------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self._forced and not (self._stopping and self._idle()):
                self.run_once()
        except BaseException as e:
            self.failure = e
            log.exception("the producer's sender thread failed; failing every unsent record")
        finally:
            self._shutdown(self.failure or MetaqError("the producer was closed before the record was sent"))

    def _idle(self) -> bool:
        return not self._acc.has_incomplete() and not any(n.in_flight for n in self._nodes.values())

    def run_once(self) -> None:
        ready, next_check = self._acc.ready_partitions(time.monotonic())
        if ready:
            self._send_ready(ready)
        self._poll(self._poll_timeout(next_check))

    def _poll_timeout(self, next_check: float) -> float:
        deadline = next_check
        for node in self._nodes.values():
            if node.in_flight:
                deadline = min(deadline, node.in_flight[0].handle.deadline)
        if math.isinf(deadline):
            return _IDLE_POLL
        return min(max(deadline - time.monotonic(), 0.0), _IDLE_POLL)

    # -- metadata --------------------------------------------------------------------------------------------

    def _leader_of(self, tp: TopicPartition) -> Leader | BrokerResponseError:
        try:
            info = self._metadata.topic(tp.topic)
        except UnknownTopicError as e:
            return UnknownTopicOrPartitionError(str(e))
        except MetaqError as e:  # ZooKeeper trouble: keep the batch and try again later
            return NotLeaderForPartitionError(f"no metadata for {tp.topic}: {e}")
        leader = info.leaders.get(tp.partition)
        if leader is None:
            if tp.partition in info.partition_set:
                return NotLeaderForPartitionError(f"{tp.topic}-{tp.partition} has no live leader in ZooKeeper")
            return UnknownTopicOrPartitionError(f"{tp.topic} has no partition {tp.partition}")
        return leader

    # -- sending ---------------------------------------------------------------------------------------------

    def _send_ready(self, ready: list[TopicPartition]) -> None:
        """Send the ready partitions' batches, one request per leader at a time, while brokers have room."""
        pending = self._group_by_leader(ready)
        if pending and self._identity is not None and not self._identity.known:
            if not self._init_identity(next(iter(pending.values())), ready):
                return
        while pending:
            groups = [(leader, tps) for leader, tps in pending.values() if self._has_capacity(leader)]
            if not groups:
                return  # a response will wake the loop up
            drained = self._acc.drain([tps for _, tps in groups], self._config.max_request_size,
                                      time.monotonic())
            pending = {}
            for (leader, tps), batches in zip(groups, drained, strict=True):
                if not batches:
                    continue
                self._send_produce(leader, batches)
                sent = {batch.tp for batch in batches}
                left = [tp for tp in tps if tp not in sent]
                if left:  # did not fit in max.request.size: another request
                    pending[leader.broker_id] = (leader, left)

    def _init_identity(self, target: tuple[Leader, list[TopicPartition]], ready: list[TopicPartition]) -> bool:
        """Get a producer id from ``target``'s broker before the first (or after a failed) idempotent send;
        False if that must wait. A retriable error is retried after retry.backoff.ms; any other fails the ready
        batches with it, as Kafka's producer fails on a fatal InitProducerId error."""
        identity = self._identity
        assert identity is not None
        now = time.monotonic()
        if now < self._identity_retry_at:
            return False
        try:
            node = self._node(target[0])
            refusal = self._legacy_refusal(node)
            if refusal is not None:  # an old broker, and idempotence asked for
                self._fail_ready(ready, refusal)
                return False
            if self._identity is not identity:  # an old broker: idempotence is now off
                return True
            # on the produce connection: pipelined behind any request in flight there, whose responses the
            # wait reads and keeps for _read
            identity.init(node.conn, self._config.request_timeout_ms / 1000.0)
            return True
        except (BrokerConnectionError, ProtocolError, BrokerResponseError, AuthenticationError, TimeoutError) as e:
            if isinstance(e, AuthenticationError) or (isinstance(e, BrokerResponseError) and not e.retriable):
                log.error("InitProducerId failed: %s; failing the batches ready to send", e)
                self._fail_ready(ready, e)
            else:
                log.warning("InitProducerId failed, retrying in %d ms: %s", self._config.retry_backoff_ms, e)
                if isinstance(e, BrokerConnectionError):
                    self._metadata.invalidate(target[1][0].topic)
            self._identity_retry_at = now + self._config.retry_backoff_ms / 1000.0
            return False

    def _fail_ready(self, ready: list[TopicPartition], error: BaseException) -> None:
        for tp in ready:
            batch = self._acc.take(tp)
            if batch is not None:
                self._fail(batch, error)

    def _group_by_leader(self, ready: list[TopicPartition]) -> dict[int, tuple[Leader, list[TopicPartition]]]:
        by_broker: dict[int, tuple[Leader, list[TopicPartition]]] = {}
        for tp in ready:
            leader = self._leader_of(tp)
            if isinstance(leader, Leader):
                by_broker.setdefault(leader.broker_id, (leader, []))[1].append(tp)
                continue
            batch = self._acc.take(tp)
            if batch is not None:
                self._retry_or_fail(batch, leader)
        return by_broker

    def _has_capacity(self, leader: Leader) -> bool:
        node = self._nodes.get(leader.broker_id)
        return node is None or len(node.in_flight) < self._config.max_in_flight

    def _node(self, leader: Leader) -> _Node:
        """The connected node for ``leader``, (re)connecting as needed; raises BrokerConnectionError."""
        node = self._nodes.get(leader.broker_id)
        if node is not None and node.leader != leader:  # the broker re-registered elsewhere
            self._node_failed(node, BrokerConnectionError(
                f"broker {leader.broker_id} moved from {node.leader.host}:{node.leader.port} to "
                f"{leader.host}:{leader.port}"))
            node = None
        elif node is not None and not node.conn.is_connected:
            self._drop(node)
            node = None
        if node is None:
            node = _Node(leader, self._new_connection(leader))
            self._nodes[leader.broker_id] = node
        if not node.conn.is_connected:
            node.conn.connect()
        if node.registered_fd < 0:
            node.registered_fd = node.conn.fileno()
            self._selector.register(node.registered_fd, selectors.EVENT_READ, node)
        return node

    def _new_connection(self, leader: Leader) -> BrokerConnection:
        """The sender's own connection to ``leader`` (it multiplexes them with a selector), made by the
        cluster client with the producer's client.id and timeouts."""
        limits = {"client_id": self._config.client_id, "request_timeout_ms": self._config.request_timeout_ms,
                  "connect_timeout_ms": self._config.connect_timeout_ms}
        if self._connect is not None:  # a test's factory
            return self._connect(leader.host, leader.port, **limits)
        return self._metadata.open_connection(leader, client_id=self._config.client_id,
                                              request_timeout_ms=self._config.request_timeout_ms,
                                              connect_timeout_ms=self._config.connect_timeout_ms)

    def _drop(self, node: _Node) -> None:
        if node.registered_fd >= 0:
            self._selector.unregister(node.registered_fd)
            node.registered_fd = -1
        node.conn.close()

    def _send_produce(self, leader: Leader, batches: list[ProducerBatch]) -> None:
        acks = self._config.acks
        if self._identity is not None:
            for batch in batches:
                self._identity.stamp(batch)
        fields = {"transactional_id": None, "acks": acks, "timeout_ms": self._config.request_timeout_ms,
                  "topic_data": _topic_data(batches)}
        try:
            node = self._node(leader)
            refusal = self._codec_refusal(node) or self._legacy_refusal(node)
            if refusal is not None:
                for batch in batches:
                    self._fail(batch, refusal)
                return
            magic = produce_magic(node.conn.api_version(ApiKey.PRODUCE))
            if magic is not None:  # Produce v0..2: the batches as message sets v0/v1
                converted = self._message_sets(batches, magic)
                batches = list(converted)
                if not batches:
                    return
                fields["topic_data"] = _topic_data(batches, converted)
            handle = node.conn.send_async(ProduceRequest, fields, expect_response=acks != 0)
        except (BrokerConnectionError, ProtocolError, BrokerResponseError, AuthenticationError) as e:
            # nothing more was sent on this connection, but earlier requests failed with it (an
            # AuthenticationError is not retriable: the batches fail with it at once)
            failed = self._nodes.get(leader.broker_id)
            if failed is not None:
                self._node_failed(failed, e)
            for batch in batches:
                self._retry_or_fail(batch, e)
            return
        if acks == 0:
            for batch in batches:
                self._complete(batch, -1)
            return
        node.in_flight.append(_Request(handle, {batch.tp: batch for batch in batches}))

    def _codec_refusal(self, node: _Node) -> UnsupportedCompressionTypeError | None:
        """Refuse zstd to a broker without Produce v7 (before Kafka 2.1), as Kafka's own client does
        (``ProduceRequest.validateRecords``, docs/wire-protocol.md): such a broker cannot read the batch and
        fails it with an unknown server error or, under acks=0, drops it and closes the connection."""
        if self._config.compression_type != "zstd":
            return None
        version = node.conn.api_version(ApiKey.PRODUCE)
        if version >= ZSTD_MIN_PRODUCE_VERSION:
            return None
        return UnsupportedCompressionTypeError(
            f"compression.type=zstd needs Produce v{ZSTD_MIN_PRODUCE_VERSION} (Kafka 2.1 or later); broker "
            f"{node.leader.broker_id} ({node.leader.host}:{node.leader.port}) speaks Produce up to v{version}: "
            f"use lz4, gzip or snappy with it")

    def _legacy_refusal(self, node: _Node) -> MetaqError | None:
        """Before Produce v3 (Kafka 0.11) there are no producer ids: ``enable.idempotence=true`` is refused for
        such a broker; left unset (on by default), idempotence is turned off for the rest of the producer's
        life, with a warning (docs/legacy-wire.md, "Producing to old brokers")."""
        version = node.conn.api_version(ApiKey.PRODUCE)
        if version >= FIRST_BATCH_PRODUCE_VERSION:
            return None
        where = f"broker {node.leader.broker_id} ({node.leader.host}:{node.leader.port})"
        if self._config.enable_idempotence:
            return MetaqError(f"enable.idempotence=true: {where} speaks Produce up to v{version} (a Kafka "
                              f"broker before 0.11), which has no producer ids; set enable.idempotence=false "
                              f"to produce to it")
        if self._identity is not None:
            log.warning("%s speaks Produce up to v%d (before Kafka 0.11, no producer ids): idempotence "
                        "(enable.idempotence unset, so on by default) is off for this producer", where, version)
            self._identity = None
        return None

    def _message_sets(self, batches: list[ProducerBatch], magic: int) -> dict[ProducerBatch, bytes]:
        """The batches as message sets of ``magic`` (metaq/producer/legacy.py); a batch that has no such form
        (a record with headers) fails now and is left out."""
        converted = {}
        for batch in batches:
            try:
                converted[batch] = message_set_from_batch(batch.seal(), magic)
            except HeadersUnsupportedError as e:
                self._fail(batch, e)
        return converted

    # -- receiving -------------------------------------------------------------------------------------------

    def _poll(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            if key.data is None:
                self._drain_wakeups()
            else:
                self._read(key.data)
        now = time.monotonic()
        for node in list(self._nodes.values()):
            if node.in_flight and node.in_flight[0].handle.deadline <= now:
                self._read(node)  # raises the timeout inside and fails the node

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _read(self, node: _Node) -> None:
        """Handle every response that has fully arrived from ``node``."""
        if not node.in_flight:  # readable with nothing expected: the broker closed the connection (acks=0)
            log.debug("broker %s closed an idle connection", node.leader.broker_id)
            self._drop(node)
            return
        while node.in_flight:
            request = node.in_flight[0]
            try:
                response = request.handle.result(timeout=0)
            except TimeoutError:
                return  # the rest of the response has not arrived yet
            except (BrokerConnectionError, ProtocolError) as e:
                self._node_failed(node, e)
                return
            node.in_flight.popleft()
            assert response is not None  # only acks != 0 requests, which expect an answer, are in flight
            self._handle_response(request, response)

    def _node_failed(self, node: _Node, error: BaseException) -> None:
        log.warning("connection to broker %s (%s:%s) failed: %s", node.leader.broker_id, node.leader.host,
                    node.leader.port, error)
        self._drop(node)
        failed, node.in_flight = node.in_flight, deque()
        for request in failed:
            for batch in request.batches.values():
                self._retry_or_fail(batch, error)

    def _handle_response(self, request: _Request, response: ApiResponse) -> None:
        batches = dict(request.batches)
        for topic_response in response.responses:
            for part in topic_response.partition_responses:
                batch = batches.pop(TopicPartition(topic_response.name, part.index), None)
                if batch is None:
                    continue
                if part.error_code:
                    cls = for_code(part.error_code)
                    self._retry_or_fail(batch, cls(f"{cls.message} ({part.error_code}) for "
                                                   f"{batch.tp.topic}-{batch.tp.partition}"))
                else:
                    self._complete(batch, part.base_offset, part.log_append_time_ms)
        for batch in batches.values():
            self._retry_or_fail(batch, ProtocolError(
                f"the produce response has no entry for {batch.tp.topic}-{batch.tp.partition}"))

    # -- outcomes --------------------------------------------------------------------------------------------

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int = -1) -> None:
        try:
            batch.complete(base_offset, log_append_time_ms)
        finally:
            self._acc.done_with(batch)

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.attempts += 1
        if isinstance(error, BrokerConnectionError) or getattr(error, "invalid_metadata", False):
            self._metadata.invalidate(batch.tp.topic)  # the leader may have moved: re-read ZooKeeper
        delay = None if self._forced else self._policy.delay_after(batch.attempts, error)
        if delay is None:
            log.debug("giving up on %r after %d attempts: %s", batch, batch.attempts, error)
            self._fail(batch, error)
        else:
            log.debug("retrying %r in %.3f s after: %s", batch, delay, error)
            self._acc.reenqueue(batch, time.monotonic() + delay)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if self._identity is not None:
            self._identity.failed(batch)
        try:
            batch.fail(error)
        finally:
            self._acc.done_with(batch)

    def _shutdown(self, error: BaseException) -> None:
        self._acc.begin_close()  # no new batches from now on: nobody would send them
        for node in list(self._nodes.values()):
            for request in node.in_flight:
                for batch in request.batches.values():
                    self._fail(batch, error)
            node.in_flight.clear()
            self._drop(node)
        self._nodes.clear()
        for batch in self._acc.unsent_batches():
            self._fail(batch, error)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _topic_data(batches: Iterable[ProducerBatch], converted: Mapping[ProducerBatch, bytes] | None = None
                ) -> list[RequestFields]:
    """Produce's topic_data: each batch as built (record batch v2), or as ``converted`` has it (message sets)."""
    by_topic: dict[str, list[dict[str, int | bytes]]] = {}
    for batch in batches:
        records = batch.seal() if converted is None else converted[batch]
        by_topic.setdefault(batch.tp.topic, []).append({"index": batch.tp.partition, "records": records})
    return [{"name": topic, "partition_data": parts} for topic, parts in by_topic.items()]
