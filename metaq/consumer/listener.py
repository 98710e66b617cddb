"""MetaQ's listener API on the 0.8 connector: subscribe listeners, and metaq runs the consuming loop.

    class Printer:
        executor = None                       # or an Executor: each chunk runs there, one chunk at a time
        def receive_message(self, message: MessageAndMetadata) -> None:
            print(message.offset, message.value)    # raising = failed: retried, then set aside

    with MessageConsumer({"group.id": "etl", "zookeeper.connect": "127.0.0.1:2181"},
                         value_deserializer="json") as consumer:
        consumer.subscribe("clicks", 1024 * 1024, Printer()).complete_subscribe()
        ...                                   # messages arrive on "metaq-dispatch-clicks-0"

Delivery (docs/delivery-guarantees.md §3 and §6 rows 7 and 9): one dispatch thread per stream takes whole chunks
with ``KafkaStream.iter_batches()``; a message's offset counts as consumed only once the listener finished
it (per message, per part for batch listeners), so the commits cover processed messages only (at-least-once:
after a crash, duplicates are possible, losses are not), and the commit a rebalance makes before releasing
a partition covers everything finished until then. Between two messages (two parts) the dispatcher checks
that it may still deliver: it waits while ZooKeeper is SUSPENDED or the session lease lapsed, and drops the
rest of the chunk once its partition was revoked.

A message whose handling raises is retried ``metaq.max.fetch.retries`` times with a short backoff, then written
(fsynced) to the topic's :class:`~metaq.consumer.recover.RecoverStore` and skipped, so its partition moves on.
A :class:`~metaq.consumer.recover.RecoverManager` thread per topic redelivers the stored messages through the
same listener (and executor) every ``metaq.recover.interval.ms``, until they succeed or reach
``metaq.recover.max.attempts``.

Listeners are called from the dispatch threads (or their executor) and from the recover thread, possibly at
the same time: they must be thread-safe. They never hold up a rebalance, which only stops the fetchers.
"""

from __future__ import annotations

import concurrent.futures
import logging
import operator
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, Self

import tenacity
from prometheus_client import CollectorRegistry
from tenacity.wait import wait_base

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.connector import Consumer
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.rebalance import ConsumerState, RebalanceListener
from metaq.consumer.recover import RecoverManager, RecoverStore, default_dir, describe_error
from metaq.consumer.serde import DeserializerSpec, bytes_deserializer, get_deserializer
from metaq.consumer.streams import BatchInHand, ConsumerTimeoutError
from metaq.errors import ConfigError, DeserializationError, MetaqError
from metaq.metrics.consumer import ConsumerMetrics
from metaq.signals import TerminationHandler
from zk_layout import validate_topic

log = logging.getLogger(__name__)

SUBSCRIBING = "SUBSCRIBING"
RUNNING = "RUNNING"
CLOSED = "CLOSED"

ERROR_PAUSE_S = 0.1  # first pause after an unexpected dispatch error (doubles, capped): no hot loop
MAX_ERROR_PAUSE_S = 5.0
STUCK_LOG_S = 60.0  # how often a dispatcher waiting on a long-running listener says so
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0


class MessageListener(Protocol):
    """MetaQ's ``MessageListener``: ``receive_message`` is called once per message (MetaQ's
    ``recieveMessages``); raising means the message failed.

    An optional attribute ``executor: concurrent.futures.Executor | None`` chooses where it runs: ``None`` (or
    absent) on the dispatch thread; otherwise each chunk is handed to the executor and the dispatch thread waits
    for it before taking the next one, so per-partition order and at-least-once hold.
    """

    def receive_message(self, message: MessageAndMetadata) -> None: ...


class BatchMessageListener(Protocol):
    """Receives whole chunks (at most ``max_size`` bytes of keys and values). Raising means the whole batch
    failed: it is retried, then split into single messages for retry-then-skip, so messages handled before
    the failure may be delivered again. May have an ``executor`` like :class:`MessageListener`."""

    def receive_messages(self, batch: list[MessageAndMetadata]) -> None: ...


Listener = MessageListener | BatchMessageListener


class Stream(Protocol):
    """What a dispatcher needs from a :class:`~metaq.consumer.streams.KafkaStream`: its chunk queue (where
    ``None`` ends iteration), ``iter_batches`` and ``in_hand`` (the batch yielded last)."""

    chunks: queue.Queue[Any]

    def iter_batches(self) -> Iterator[list[MessageAndMetadata]]: ...

    def in_hand(self) -> BatchInHand: ...


class Connector(Protocol):
    """What the listener consumer needs from a :class:`~metaq.consumer.connector.Consumer` (a typing seam: tests
    pass a fake)."""

    def create_message_streams(self, topic_count: Mapping[str, int]) -> Mapping[str, list[Any]]: ...

    def commit_offsets(self) -> None: ...

    def shutdown(self) -> None: ...

    @property
    def state(self) -> ConsumerState: ...


ConnectorFactory = Callable[[ConsumerConfig, RebalanceListener | None], Connector]


def default_retry_wait() -> wait_base:
    """10 ms doubling to at most 500 ms, plus up to 10 ms of jitter: a transient failure gets a moment to
    clear, while a poison message holds its partition back well under two seconds in all."""
    return tenacity.wait_exponential_jitter(multiplier=0.01, max=0.5, jitter=0.01)


def _connect(config: ConsumerConfig, rebalance_listener: RebalanceListener | None,
             metrics_registry: CollectorRegistry | None = None) -> Connector:
    return Consumer(config, rebalance_listener=rebalance_listener,
                                      metrics_registry=metrics_registry)


class _Abandoned(Exception):
    """Shutdown ran out of time: leave the chunk in hand unprocessed and unmarked (it will be redelivered)."""


def _where(message: MessageAndMetadata) -> str:
    return f"{message.topic}-{message.partition} offset {message.offset}"


def _size(message: MessageAndMetadata) -> int:
    return len(message.key or b"") + len(message.value or b"")


_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")


def _total_size(batch: list[MessageAndMetadata]) -> int:
    """``sum(_size(m) for m in batch)`` without a Python-level loop (falsy keys and values count 0)."""
    return sum(map(len, filter(None, map(_KEY, batch)))) + sum(map(len, filter(None, map(_VALUE, batch))))


def split_by_size(batch: list[MessageAndMetadata], max_size: int) -> Iterator[list[MessageAndMetadata]]:
    """Consecutive parts of ``batch`` of at most ``max_size`` bytes each (at least one message per part)."""
    if batch and _total_size(batch) <= max_size:  # the usual case, summed at C speed: one part
        yield list(batch)
        return
    part: list[MessageAndMetadata] = []
    size = 0
    for message in batch:
        n = _size(message)
        if part and size + n > max_size:
            yield part
            part, size = [], 0
        part.append(message)
        size += n
    if part:
        yield part


@dataclass(frozen=True)
class _Subscription:
    topic: str
    max_size: int
    listener: Any


class _Delivery:
    """How one subscription's raw messages reach its listener: decoding, retry-then-skip, the recover store."""

    def __init__(
        self,
        sub: _Subscription,
        store: RecoverStore,
        *,
        key: Callable[[bytes | None], Any],
        value: Callable[[bytes | None], Any],
        max_retries: int,
        wait: wait_base,
        abandon: threading.Event,
        stopping: threading.Event | None = None,
    ) -> None:
        self.topic = sub.topic
        self.listener = sub.listener
        self.max_size = sub.max_size
        self.is_batch = callable(getattr(sub.listener, "receive_messages", None))
        self.executor: concurrent.futures.Executor | None = getattr(sub.listener, "executor", None)
        self.store = store
        self._key = key
        self._value = value
        self._raw = key is bytes_deserializer and value is bytes_deserializer
        self._max_retries = max_retries
        self._retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(max_retries + 1), wait=wait,
                                           retry=tenacity.retry_if_exception_type(Exception), reraise=True)
        self._abandon = abandon
        self._stopping = stopping or abandon  # ends a wait for the delivery gate

    # -- what the dispatcher and the recover thread call --------------------------------------------

    def run_chunk(self, chunk: list[MessageAndMetadata], hand: BatchInHand) -> None:
        """Deliver a chunk with retry-then-skip; returns once every message was handled or set aside, or
        early once the chunk's partition was revoked. Each finished message (part) is recorded in ``hand``."""
        abandon = self._abandon
        if self.is_batch:
            for part in split_by_size(chunk, self.max_size):
                if not hand.may_go_on(self._stopping):
                    self._stop_early(hand)
                    return
                self._deliver_batch(part)
                hand.finished(part[-1].offset + 1)
        else:  # _deliver() inlined: the per-message path of a MessageListener
            handle = self.handle_one
            info, gate, now = hand.info, hand.gate, time.monotonic
            for message in chunk:
                if abandon.is_set():
                    raise _Abandoned()
                # one clock read and two attribute loads: gated (SUSPENDED, lease lapsed) or revoked?
                if (now() >= gate.deadline or info.is_revoked) and not hand.may_go_on(self._stopping):
                    self._stop_early(hand)
                    return
                try:
                    handle(message)
                except Exception as e:
                    self._retry_then_skip(message, e)
                info.processed_offset = message.offset + 1  # hand.finished() inlined

    @staticmethod
    def _stop_early(hand: BatchInHand) -> None:
        """The rest of the chunk is not delivered: revoked, it belongs to the next owner (return); otherwise the
        consumer is stopping while delivery is held, and the rest must stay unmarked for later (raise)."""
        if not hand.info.is_revoked:
            raise _Abandoned()

    def replay(self, message: MessageAndMetadata) -> None:
        """One attempt for a stored message, through the executor if the listener has one; raising = failed."""
        if self.executor is None:
            self.handle_one(message)
        else:
            self.executor.submit(self.handle_one, message).result()

    def handle_one(self, message: MessageAndMetadata) -> None:
        if self.is_batch:
            self.listener.receive_messages([self._decode(message)])
        else:
            self.listener.receive_message(self._decode(message))

    # -- retry-then-skip ----------------------------------------------------------------------------

    def _deliver(self, message: MessageAndMetadata) -> None:
        try:
            self.handle_one(message)  # the fast path: no retry machinery unless it fails
        except Exception as e:
            self._retry_then_skip(message, e)

    def _retry_then_skip(self, message: MessageAndMetadata, first: Exception) -> None:
        """The first attempt failed with ``first``: the remaining attempts, then the recover store."""
        try:
            self._retry(partial(self.handle_one, message), first, _where(message))
        except Exception as e:
            log.exception("listener failed %d times on %s; setting it aside in the recover store",
                          self._max_retries + 1, _where(message))
            self._set_aside(message, e)

    def _deliver_batch(self, part: list[MessageAndMetadata]) -> None:
        if len(part) == 1:
            self._deliver(part[0])
            return
        what = f"{len(part)} messages of {part[0].topic}-{part[0].partition} (offsets {part[0].offset}-" \
               f"{part[-1].offset})"
        try:
            self._call_batch(part)
            return
        except Exception as e:
            first = e
        try:
            self._retry(partial(self._call_batch, part), first, what)
            return
        except Exception:
            log.exception("batch listener failed %d times on %s; delivering them one at a time",
                          self._max_retries + 1, what)
        for message in part:
            self._check_abandon()
            self._deliver(message)

    def _call_batch(self, part: list[MessageAndMetadata]) -> None:
        self.listener.receive_messages(list(part) if self._raw else [self._decode(m) for m in part])

    def _retry(self, attempt: Callable[[], None], first: Exception, what: str) -> None:
        """The remaining attempts under the retry policy; attempt 1 already failed with ``first``."""
        if self._max_retries == 0:
            raise first
        pending = [first]

        def call() -> None:
            if pending:
                raise pending.pop()  # replays the fast path's failure, so the policy counts and waits for it
            attempt()

        self._retrying.copy(before_sleep=partial(self._log_retry, what))(call)

    def _log_retry(self, what: str, state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        pause = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("listener failed on %s (attempt %d of %d): %s; retrying in %.3fs", what, state.attempt_number,
                    self._max_retries + 1, describe_error(error) if error else "?", pause)

    def _set_aside(self, message: MessageAndMetadata, error: BaseException) -> None:
        """Store the message durably before its partition moves on; if the store cannot be written, the
        partition waits (nothing is skipped without being stored)."""
        pause = ERROR_PAUSE_S
        while True:
            try:
                entry_id = self.store.append(message, error)
            except Exception:
                log.exception("cannot write %s to the recover store %s; the partition waits", _where(message),
                              self.store.path)
                if self._abandon.wait(pause):
                    raise _Abandoned() from None
                pause = min(pause * 2, MAX_ERROR_PAUSE_S)
                continue
            log.warning("%s set aside in %s (entry %s); the partition moves on", _where(message),
                        self.store.path.name, entry_id)
            return

    def _decode(self, message: MessageAndMetadata) -> MessageAndMetadata:
        if self._raw:
            return message
        try:
            key, value = self._key(message.key), self._value(message.value)
        except Exception as e:
            raise DeserializationError(f"cannot deserialize {_where(message)}: {e}") from e
        return MessageAndMetadata(message.topic, message.partition, message.offset, key, value,
                                  message.timestamp, message.headers)

    def _check_abandon(self) -> None:
        if self._abandon.is_set():
            raise _Abandoned()


class _Dispatcher:
    """One stream's thread: takes chunks, hands them to the delivery (on the listener's executor, if any)."""

    def __init__(self, name: str, stream: Stream, delivery: _Delivery, stopping: threading.Event,
                 abandon: threading.Event) -> None:
        self.stream = stream
        self._delivery = delivery
        self._stopping = stopping
        self._abandon = abandon
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def wake(self) -> None:
        """Unblock a dispatcher waiting for a chunk, keeping the queued chunks: clearing them while the
        fetchers still run would let the stream move the consumed offset past unprocessed messages (it jumps
        to the next chunk's fetch offset). The connector's shutdown clears the queues once fetchers stop."""
        try:
            self.stream.chunks.put_nowait(None)
        except queue.Full:
            pass  # then there are chunks to take: the dispatcher takes one, sees the stop flag and returns

    def _run(self) -> None:
        pause = ERROR_PAUSE_S
        while not self._stopping.is_set():
            try:
                self._consume()
                return
            except ConsumerTimeoutError:
                continue  # consumer.timeout.ms: just a tick
            except _Abandoned:
                return
            except Exception as e:
                if self._stopping.is_set():  # e.g. the stream re-queueing the wake-up sentinel into a full queue
                    log.debug("%s: %r while stopping", self.thread.name, e)
                    return
                if isinstance(e, MetaqError):  # a failed rebalance or an oversized message, reported by the stream
                    log.warning("%s: %s", self.thread.name, e)
                else:
                    log.exception("%s: unexpected error from the stream; continuing", self.thread.name)
            self._stopping.wait(pause)
            pause = min(pause * 2, MAX_ERROR_PAUSE_S)

    def _consume(self) -> None:
        """Until the stream ends. Each finished message is marked consumed as it finishes (see run_chunk)."""
        for chunk in self.stream.iter_batches():
            if self._stopping.is_set():
                return  # this chunk stays unprocessed and unmarked: it is redelivered later
            if chunk:
                self._hand_over(chunk, self.stream.in_hand())

    def _hand_over(self, chunk: list[MessageAndMetadata], hand: BatchInHand) -> None:
        """Process the chunk; an unexpected failure retries the same chunk rather than lose it."""
        pause = ERROR_PAUSE_S
        while True:
            try:
                self._process(chunk, hand)
                return
            except _Abandoned:
                raise
            except Exception:
                log.exception("%s: delivering a chunk of %s-%d failed unexpectedly; retrying it",
                              self.thread.name, chunk[0].topic, chunk[0].partition)
            if self._abandon.wait(pause):
                raise _Abandoned()
            pause = min(pause * 2, MAX_ERROR_PAUSE_S)

    def _process(self, chunk: list[MessageAndMetadata], hand: BatchInHand) -> None:
        executor = self._delivery.executor
        if executor is None:
            self._delivery.run_chunk(chunk, hand)
            return
        future = executor.submit(self._delivery.run_chunk, chunk, hand)
        started = time.monotonic()
        # wait for it before taking the next chunk (order, at-least-once); wake up only to report a stuck listener
        while not concurrent.futures.wait([future], timeout=STUCK_LOG_S).done:
            log.warning("%s: the listener has been processing a chunk for %.0fs", self.thread.name,
                        time.monotonic() - started)
        future.result()


class MessageConsumer:
    """MetaQ's ``MessageConsumer``: ``subscribe`` listeners, then ``complete_subscribe`` joins the group.

        consumer = MessageConsumer(config, value_deserializer="json", streams_per_topic=2)
        consumer.subscribe("clicks", 1 << 20, ClickListener()).subscribe("views", 1 << 20, ViewBatches())
        consumer.complete_subscribe()
        consumer.recover_store("clicks").list()       # what was set aside
        consumer.shutdown()

    ``retry_wait`` (a tenacity wait strategy) is the backoff between attempts of a failing message (default
    :func:`default_retry_wait`); ``recover_initial_delay_s`` delays the first replay (MetaQ: 5 s);
    ``connector_factory`` builds the connector (tests pass a fake). Offsets are committed by the connector's
    auto-commit (``auto.commit.enable``), at rebalances and at shutdown; or call :meth:`commit_offsets`.

    Keys and values are decoded per message here, not by the stream: an undecodable message then fails like
    any other (retried, set aside raw) instead of taking its whole chunk down with it.
    """

    def __init__(
        self,
        config: ConsumerConfig | Mapping[str, Any],
        *,
        rebalance_listener: RebalanceListener | None = None,
        key_deserializer: DeserializerSpec = "bytes",
        value_deserializer: DeserializerSpec = "bytes",
        streams_per_topic: int = 1,
        retry_wait: wait_base | None = None,
        recover_initial_delay_s: float = 5.0,
        connector_factory: ConnectorFactory | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_properties(config)
        if not isinstance(streams_per_topic, int) or streams_per_topic < 1:
            raise ConfigError(f"streams_per_topic must be an int >= 1, got {streams_per_topic!r}")
        self._rebalance_listener = rebalance_listener
        self._key = get_deserializer(key_deserializer)
        self._value = get_deserializer(value_deserializer)
        self._streams_per_topic = streams_per_topic
        self._retry_wait = retry_wait if retry_wait is not None else default_retry_wait()
        self._recover_delay_s = recover_initial_delay_s
        self._connector_factory = connector_factory or partial(_connect, metrics_registry=metrics_registry)
        self._lock = threading.Lock()
        self._phase = SUBSCRIBING
        self._subscriptions: dict[str, _Subscription] = {}
        self._stores: dict[str, RecoverStore] = {}
        self._connector: Connector | None = None
        self._dispatchers: list[_Dispatcher] = []
        self._managers: list[RecoverManager] = []
        self._stopping = threading.Event()
        self._abandon = threading.Event()
        self._closed = threading.Event()

    # -- subscribing -------------------------------------------------------------------------------

    def subscribe(self, topic: str, max_size: int, listener: Listener) -> Self:
        """Register ``listener`` for ``topic``; takes effect at :meth:`complete_subscribe`. Chainable.

        ``max_size`` is MetaQ's per-fetch size. Here one set of fetchers serves every subscription and
        fetches at most ``fetch.message.max.bytes`` per partition, so a subscription cannot get more than
        that: a larger ``max_size`` would promise messages the fetchers refuse (they report
        MessageSizeTooLarge), hence a ConfigError. A smaller one bounds the bytes (keys + values) of each
        batch handed to a :class:`BatchMessageListener`. A listener with ``receive_messages`` is a batch
        listener even if it also has ``receive_message``.
        """
        with self._lock:
            if self._phase != SUBSCRIBING:
                raise MetaqError(f"subscribe({topic!r}): only allowed before complete_subscribe()")
            validate_topic(topic)
            if topic in self._subscriptions:
                raise ConfigError(f"subscribe({topic!r}): already subscribed to this topic")
            self._check_max_size(topic, max_size)
            _check_listener(topic, listener)
            self._subscriptions[topic] = _Subscription(topic, max_size, listener)
        return self

    def _check_max_size(self, topic: str, max_size: int) -> None:
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size <= 0:
            raise ConfigError(f"subscribe({topic!r}): max_size must be a positive int, got {max_size!r}")
        limit = self.config.fetch_message_max_bytes
        if max_size > limit:
            raise ConfigError(f"subscribe({topic!r}): max_size={max_size} exceeds fetch.message.max.bytes={limit} "
                              "(the most the fetchers bring back per partition); lower max_size or raise "
                              "fetch.message.max.bytes")

    def complete_subscribe(self) -> None:
        """Once: open the recover stores, join the group (first rebalance on this thread; its failure raises
        here and the consumer is shut down), start one dispatch thread per stream and the recover threads."""
        with self._lock:
            if self._phase != SUBSCRIBING:
                raise MetaqError("complete_subscribe() was already called (or the consumer is shut down)")
            if not self._subscriptions:
                raise MetaqError("complete_subscribe(): subscribe() to at least one topic first")
            self._phase = RUNNING
        try:
            self._start()
        except BaseException:
            self.shutdown()
            raise

    def _start(self) -> None:
        directory = default_dir(self.config.recover_dir)
        for topic in self._subscriptions:
            self._stores[topic] = RecoverStore.open(directory, topic, self.config.group_id)
        deliveries = {topic: self._delivery(sub) for topic, sub in self._subscriptions.items()}
        self._connector = self._connector_factory(self.config, self._rebalance_listener)
        streams = self._connector.create_message_streams({t: self._streams_per_topic for t in deliveries})
        for topic, delivery in deliveries.items():
            for n, stream in enumerate(streams[topic]):
                self._dispatchers.append(_Dispatcher(f"metaq-dispatch-{topic}-{n}", stream, delivery,
                                                     self._stopping, self._abandon))
            self._managers.append(RecoverManager(
                delivery.store, self._counted_replay(topic, delivery), interval_ms=self.config.recover_interval_ms,
                max_attempts=self.config.recover_max_attempts, initial_delay_s=self._recover_delay_s))
        self._report_recover_sizes()
        for dispatcher in self._dispatchers:
            dispatcher.thread.start()
        for manager in self._managers:
            manager.start()
        log.info("consumer %s: listening on %s (%d dispatch threads)", self.config.group_id,
                 ", ".join(self._subscriptions), len(self._dispatchers))

    def _metrics(self) -> ConsumerMetrics | None:
        return getattr(self._connector, "metrics", None)  # a test's fake connector has none

    def _counted_replay(self, topic: str, delivery: _Delivery) -> Callable[[MessageAndMetadata], None]:
        """The recover thread's handler, counting outcomes (metaq_consumer_recover_replays_total)."""
        metrics = self._metrics()
        if metrics is None:
            return delivery.replay

        def replay(message: MessageAndMetadata) -> None:
            try:
                delivery.replay(message)
            except BaseException:
                metrics.replayed(topic, ok=False)
                raise
            metrics.replayed(topic, ok=True)
        return replay

    def _report_recover_sizes(self) -> None:
        metrics = self._metrics()
        if metrics is not None:
            stores = dict(self._stores)
            metrics.report_recover_sizes(lambda: [(topic, len(store.list())) for topic, store in stores.items()])

    def _delivery(self, sub: _Subscription) -> _Delivery:
        return _Delivery(sub, self._stores[sub.topic], key=self._key, value=self._value,
                         max_retries=self.config.max_fetch_retries, wait=self._retry_wait, abandon=self._abandon,
                         stopping=self._stopping)

    # -- running -----------------------------------------------------------------------------------

    def recover_store(self, topic: str) -> RecoverStore:
        """The recover store of a subscribed topic (open from complete_subscribe() until shutdown())."""
        store = self._stores.get(topic)
        if store is None:
            raise MetaqError(f"no recover store for {topic!r}: not subscribed, or complete_subscribe() not called")
        return store

    def commit_offsets(self) -> None:
        """Commit the offsets of processed chunks now (useful with ``auto.commit.enable=false``)."""
        if self._connector is not None:
            self._connector.commit_offsets()

    @property
    def state(self) -> ConsumerState:
        """The connector's state (owned partitions, rebalancing, last error)."""
        if self._connector is None:
            return ConsumerState(CLOSED if self._phase == CLOSED else "STARTING", 0)
        return self._connector.state

    # -- shutdown ----------------------------------------------------------------------------------

    def stop_on_signals(self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> TerminationHandler:
        """SIGTERM or SIGINT runs :meth:`shutdown` (listeners finish the chunk in hand, what was processed
        is committed, partitions are released, the group is left) on a thread of its own; a second signal
        exits at once. Call from the main thread, then block in :meth:`wait`."""
        return TerminationHandler(lambda: self.shutdown(timeout_s)).install()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the consumer is shut down (True) or ``timeout`` seconds passed (False)."""
        return self._closed.wait(timeout)

    def shutdown(self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
        """Bounded and orderly: the dispatchers finish the chunk in hand (abandoned unmarked after half the
        timeout), the recover threads stop, then the connector commits, releases and leaves the group."""
        with self._lock:
            already = self._phase == CLOSED
            self._phase = CLOSED
        if already:  # e.g. the with-block ending while a signal's shutdown runs: wait for that one
            if threading.current_thread() not in {d.thread for d in self._dispatchers}:
                self._closed.wait(timeout_s)
            return
        deadline = time.monotonic() + timeout_s
        self._stopping.set()
        self._stop_dispatchers(deadline, timeout_s)
        for manager in self._managers:
            manager.stop(max(0.1, deadline - time.monotonic()))
        if self._connector is not None:
            try:
                self._connector.shutdown()
            except Exception:
                log.exception("consumer %s: connector shutdown failed", self.config.group_id)
        for store in self._stores.values():
            store.close()
        self._closed.set()

    def _stop_dispatchers(self, deadline: float, timeout_s: float) -> None:
        for dispatcher in self._dispatchers:
            dispatcher.wake()
        half = time.monotonic() + timeout_s / 2
        others = [d for d in self._dispatchers if d.thread is not threading.current_thread()]  # called by a listener?
        for dispatcher in others:
            dispatcher.thread.join(max(0.0, half - time.monotonic()))  # bounded: listeners may be slow
        if any(d.thread.is_alive() for d in others):
            self._abandon.set()  # leave the chunks in hand unmarked: they are redelivered
        for dispatcher in others:
            dispatcher.thread.join(max(0.0, deadline - time.monotonic()))
            if dispatcher.thread.is_alive():
                log.warning("%s: still busy in the listener at shutdown; left behind", dispatcher.thread.name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _check_listener(topic: str, listener: Any) -> None:
    if not (callable(getattr(listener, "receive_messages", None)) or
            callable(getattr(listener, "receive_message", None))):
        raise ConfigError(f"subscribe({topic!r}): the listener needs a receive_message(message) or "
                          f"receive_messages(batch) method; got {type(listener).__name__}")
    executor = getattr(listener, "executor", None)
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ConfigError(f"subscribe({topic!r}): listener.executor must be a concurrent.futures.Executor or None")
