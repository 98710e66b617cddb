"""The public producer: asynchronous ``send()`` returning futures, batching, retries, orderly close.

Topic metadata (partitions, leaders, broker addresses) comes from ZooKeeper, as the brokers register it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from metaq.client.connection import BrokerConnection
from metaq.client.settings import ConnectionSettings
from metaq.config import Properties
from metaq.errors import MetaqError
from metaq.producer.accumulator import RecordAccumulator, RecordMetadata
from metaq.producer.config import ProducerConfig
from metaq.producer.metadata import ClusterMetadata, TopicInfo
from metaq.producer.partitioner import make_partitioner
from metaq.producer.sender import Sender
from metaq.protocol.builder import Header

log = logging.getLogger(__name__)

_BYTES = (bytes, bytearray, memoryview)
_FORCED_JOIN = 5.0  # seconds to wait for the sender after interrupting it; it only has to fail futures then


class Producer:
    """Sends records to the leaders of their partitions, found in ZooKeeper::

        with Producer({"zookeeper.connect": "127.0.0.1:2181/metaq", "acks": "all"}) as producer:
            future = producer.send("clicks", b'{"page": "/"}', key=b"user-42")
            producer.flush()
            print(future.result())          # RecordMetadata(topic='clicks', partition=1, offset=7, ...)

    ``send()`` is thread-safe and returns at once (unless the buffer is full); records to one partition are
    delivered in ``send()`` order, even across retries. Future callbacks run on the sender thread and must not
    block. ``metadata`` and ``connection_factory`` are seams for tests.

    A future nobody uses costs two fields and is freed when dropped (its batch does not hold it), so
    fire-and-forget sends leave nothing for the cyclic garbage collector; waiting on, cancelling or adding a
    callback to a future gives it Future's usual condition. Keeping every future of a long run alive does
    bring the collector back: an application that must can ``gc.freeze()`` its long-lived state after setup
    (its choice; the producer does not). ``send()`` reads topic metadata as last read, and the sender re-reads
    it after ``metadata.max.age.ms`` or an error, as Kafka's producer does.
    """

    def __init__(self, config: ProducerConfig | Properties | None = None, *,
                 metadata: ClusterMetadata | None = None,
                 connection_factory: Callable[..., BrokerConnection] | None = None) -> None:
        self.config = config if isinstance(config, ProducerConfig) else ProducerConfig.from_properties(config)
        cfg = self.config
        if metadata is None:
            metadata = ClusterMetadata.from_zookeeper(
                cfg.require_zookeeper(), connection_settings(cfg), session_timeout_ms=cfg.zookeeper_session_timeout_ms,
                connection_timeout_ms=cfg.zookeeper_connection_timeout_ms, max_age_ms=cfg.metadata_max_age_ms,
                security=cfg.zookeeper_security())
        self._metadata = metadata
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            self._partitioner = make_partitioner(cfg.partitioner)
            self._accumulator = RecordAccumulator(
                batch_size=cfg.batch_size, buffer_memory=cfg.buffer_memory, linger_ms=cfg.linger_ms,
                max_block_ms=cfg.max_block_ms, compression=cfg.compression_type,
                max_record_size=cfg.max_request_size, wakeup=self._wakeup)
            self._sender = Sender(cfg, self._accumulator, metadata, connection_factory)
            self._sender.start()
            self._append = self._accumulator.append  # send()'s two calls, looked up once
            self._known_topic = metadata.known_topics.get
        except BaseException:
            metadata.close()  # do not leak the ZooKeeper session of a producer that never ran
            raise

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wakeup(self) -> None:
        self._sender.wakeup()

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, *, partition: int | None = None,
             timestamp_ms: int | None = None,
             headers: Sequence[Header] | None = None) -> Future[RecordMetadata]:
        """Queue a record; the future resolves when the broker acknowledged it (or failed for good).

        Raises at once for a closed producer, an unknown topic or partition, a record larger than
        max.request.size, or (``TimeoutError``) no buffer space within max.block.ms.
        """
        if self._closed or self._sender.failure is not None:
            self._check_open()
        if type(value) is not bytes and value is not None:  # the checks cost a call each: most values are bytes
            _check_bytes("value", value)
        if key is not None and type(key) is not bytes:
            _check_bytes("key", key)
        if headers:
            _check_headers(headers)
        # metadata as last read, as Kafka's producer does: the sender re-reads it when older than
        # metadata.max.age.ms (it asks for every batch it sends) or after an error; an unknown topic is read now
        info = self._known_topic(topic)
        if info is None:
            info = self._metadata.topic(topic)
        if partition is None:
            partition = self._partitioner(topic, key, info.partitions, info.available)
        elif partition not in info.partition_set:
            _check_partition(self._metadata.refresh(topic), topic, partition)
        return self._append(topic, partition, timestamp_ms, key, value, headers)  # None: the builder stamps now

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions (sorted); raises UnknownTopicError."""
        return self._metadata.partitions_for(topic)

    def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait for the outcomes (futures are then done).

        Raises the builtin ``TimeoutError`` if that takes longer than ``timeout`` seconds.
        """
        batches = self._accumulator.begin_flush()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            for batch in batches:
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                if not batch.wait(remaining):  # each wait is bounded by the flush deadline
                    raise TimeoutError(f"flush() did not finish within {timeout} s")
        finally:
            self._accumulator.end_flush()

    def close(self, timeout: float = 30.0) -> None:
        """Send what is buffered (up to ``timeout`` seconds), then stop the sender, connections and ZooKeeper.

        Records still unsent at the deadline fail with MetaqError. Calling close() again does nothing.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        deadline = time.monotonic() + max(timeout, 0.0)
        self._accumulator.begin_close()
        if threading.current_thread() is self._sender:  # from a future callback: cannot wait for ourselves
            self._sender.force_close()
        else:
            self._stop_sender(deadline)
        self._metadata.close()

    def _stop_sender(self, deadline: float) -> None:
        self._sender.initiate_close()
        self._sender.join(max(deadline - time.monotonic(), 0.0))  # bounded by close(timeout)
        if self._sender.is_alive():
            log.warning("producer close timed out with records unsent; failing them")
            self._sender.force_close()
            self._sender.join(_FORCED_JOIN)  # bounded: a forced sender only fails futures and closes sockets
            if self._sender.is_alive():
                log.error("the producer's sender thread did not stop within %.0f s", _FORCED_JOIN)

    def _check_open(self) -> None:
        if self._closed:
            raise MetaqError("send() on a closed producer")
        failure = self._sender.failure
        if failure is not None:
            raise MetaqError(f"the producer's sender thread failed: {failure!r}") from failure


def connection_settings(config: ProducerConfig) -> ConnectionSettings:
    """How the producer's connections are made (client.id, its timeouts and its security options)."""
    return ConnectionSettings(client_id=config.client_id, request_timeout_ms=config.request_timeout_ms,
                              connect_timeout_ms=config.connect_timeout_ms, security=config.security(),
                              broker_version_fallback=config.broker_version_fallback)


def _check_bytes(what: str, data: object) -> None:
    if data is not None and not isinstance(data, _BYTES):
        raise TypeError(f"{what} must be bytes or None, not {type(data).__name__}")


def _check_headers(headers: Sequence[Header]) -> None:
    for item in headers:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"headers must be (str, bytes | None) pairs, not {item!r}")
        _check_bytes(f"header {item[0]!r}", item[1])


def _check_partition(info: TopicInfo | None, topic: str, partition: int) -> None:
    if info is None or partition not in info.partition_set:
        count = len(info.partitions) if info is not None else 0
        raise ValueError(f"topic {topic!r} has no partition {partition} ({count} partitions)")
