"""The listener consumer's threads: one :class:`_Dispatcher` per stream, and :class:`MessageConsumer`, which
subscribes listeners, joins the group and runs the dispatchers and recover threads.

See :mod:`metaq.consumer.listener` for the delivery guarantees.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, Self

from prometheus_client import CollectorRegistry
from tenacity.wait import wait_base

from metaq.config import Properties
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.connector import Consumer
from metaq.consumer.delivery import (
    ERROR_PAUSE_S,
    MAX_ERROR_PAUSE_S,
    Listener,
    _Abandoned,
    _Delivery,
    _Subscription,
    default_retry_wait,
)
from metaq.consumer.membership import ConsumerState, RebalanceListener
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover import RecoverManager, RecoverStore, default_dir
from metaq.consumer.serde import DeserializerSpec, get_deserializer
from metaq.consumer.streams import BatchInHand
from metaq.errors import ConfigError, ConsumerTimeoutError, MetaqError
from metaq.metrics.consumer import ConsumerMetrics
from metaq.signals import TerminationHandler
from zk_layout import validate_topic

log = logging.getLogger(__name__)

SUBSCRIBING = "SUBSCRIBING"
RUNNING = "RUNNING"
CLOSED = "CLOSED"

STUCK_LOG_S = 60.0  # how often a dispatcher waiting on a long-running listener says so
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0


class Stream(Protocol):
    """What a dispatcher needs from a :class:`~metaq.consumer.streams.KafkaStream`: its chunk queue (where
    ``None`` ends iteration), ``iter_batches`` and ``in_hand`` (the batch yielded last)."""

    chunks: queue.Queue[Any]

    def iter_batches(self) -> Iterator[Sequence[MessageAndMetadata]]: ...

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


def _connect(config: ConsumerConfig, rebalance_listener: RebalanceListener | None,
             metrics_registry: CollectorRegistry | None = None) -> Connector:
    return Consumer(config, rebalance_listener=rebalance_listener,
                                      metrics_registry=metrics_registry)


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

    def _hand_over(self, chunk: Sequence[MessageAndMetadata], hand: BatchInHand) -> None:
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

    def _process(self, chunk: Sequence[MessageAndMetadata], hand: BatchInHand) -> None:
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
        config: ConsumerConfig | Properties,
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
        self._started = threading.Event()  # complete_subscribe() has built (or failed to build) everything

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
            self._started.set()
            self.shutdown()
            raise
        self._started.set()

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
            starting = self._phase == RUNNING and not self._started.is_set()
            self._phase = CLOSED
        if starting:  # a signal during complete_subscribe(): stop what it is building once it has built it
            self._started.wait(timeout_s)
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
