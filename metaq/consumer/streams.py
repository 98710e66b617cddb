"""KafkaStream: the blocking iterator an application reads messages from (Kafka 0.8's ConsumerIterator).

    for message in stream:               # MessageAndMetadata(topic, partition, offset, key, value, timestamp)
        handle(message)

Semantics (consumer-semantics.md §2.1): records below the partition's consumed offset are skipped (a
fetched batch may start before the requested offset); the consumed offset becomes ``offset + 1`` when a
message is handed out, so the next commit covers it. Chunks of partitions whose ownership ended are
dropped. While the ZooKeeper connection is SUSPENDED nothing is delivered. With ``consumer.timeout.ms``
>= 0 a wait longer than that raises :class:`ConsumerTimeoutError`, and the stream stays usable.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.partition_info import ChunkQueue, FetchedChunk, Record
from metaq.consumer.serde import describe_position, deserialize, get_deserializer
from metaq.errors import MetaqError

log = logging.getLogger(__name__)

WAIT_SLICE_S = 0.2  # how often a blocked iterator re-checks the delivery gate, failures and shutdown


class ConsumerTimeoutError(MetaqError):
    """No message arrived within consumer.timeout.ms (the stream can be iterated again)."""

    retriable = True


class DeliveryGate:
    """Open while messages may be delivered; closed while ZooKeeper is SUSPENDED (ownership uncertain)."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def wait(self, timeout: float) -> bool:
        return self._open.wait(timeout)

    @property
    def is_open(self) -> bool:
        return self._open.is_set()


class FailureSignal:
    """Lets the rebalance thread hand a failure to every stream once (re-raised on the next call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.epoch = 0
        self.error: MetaqError | None = None

    def fail(self, error: MetaqError) -> None:
        with self._lock:
            self.epoch += 1
            self.error = error

    def check(self, seen_epoch: int) -> tuple[int, MetaqError | None]:
        with self._lock:
            return self.epoch, (self.error if self.epoch != seen_epoch else None)


Deserializer = Callable[[bytes | None], Any]


_identity: Deserializer = get_deserializer("bytes")  # the identity: skipped per message for speed


class KafkaStream:
    def __init__(
        self,
        chunks: ChunkQueue,
        *,
        consumer_timeout_ms: int = -1,
        gate: DeliveryGate | None = None,
        failures: FailureSignal | None = None,
        key_deserializer: Deserializer = _identity,
        value_deserializer: Deserializer = _identity,
    ) -> None:
        self.chunks = chunks
        self._timeout_s = consumer_timeout_ms / 1000.0 if consumer_timeout_ms >= 0 else None
        self._gate = gate or DeliveryGate()
        self._failures = failures or FailureSignal()
        self._seen_failure = self._failures.epoch
        self._key = key_deserializer
        self._value = value_deserializer
        self._chunk: FetchedChunk | None = None
        self._pos = 0
        self._ended = False

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        return self

    def __next__(self) -> MessageAndMetadata:
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        while True:
            record = self._next_record(deadline)
            if record is None:
                raise StopIteration
            chunk = self._chunk
            assert chunk is not None
            info = chunk.info
            offset, timestamp, key, value, headers = record
            if not info.try_consume(offset + 1):
                continue  # revoked just now: the rest of this chunk belongs to the next owner
            return MessageAndMetadata(
                info.topic, info.partition, offset, self._decode(self._key, key, info, offset, "key"),
                self._decode(self._value, value, info, offset), timestamp, headers,
            )

    def iter_batches(self) -> Iterator[list[MessageAndMetadata]]:
        """Whole chunks at a time. A batch's offsets count as consumed only when the next batch is asked
        for, i.e. after the caller has processed it (at-least-once for the batch in hand)."""
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            yield batch
            last = batch[-1]
            self._chunk_info_mark(last)

    def clear(self) -> None:
        """Drop queued chunks (rebalance); the chunk being iterated is dropped via its revoked info."""
        while True:
            try:
                item = self.chunks.get_nowait()
            except queue.Empty:
                return
            if item is None:  # keep the shutdown sentinel
                self.chunks.put_nowait(None)
                return

    def end(self) -> None:
        """Shutdown: clear and put the sentinel that ends iteration."""
        self.clear()
        try:
            self.chunks.put_nowait(None)
        except queue.Full:
            pass

    # -- internals ---------------------------------------------------------------------------------

    def _decode(self, fn: Deserializer, data: bytes | None, info: Any, offset: int, part: str = "value") -> Any:
        if fn is _identity:
            return data
        return deserialize(fn, data, describe_position(info.topic, info.partition, offset, part))

    def _next_record(self, deadline: float | None) -> Record | None:
        while True:
            chunk = self._chunk
            if chunk is not None and not chunk.info.revoked:
                records = chunk.records
                consumed = chunk.info.get_consumed_offset()
                while self._pos < len(records):
                    record = records[self._pos]
                    self._pos += 1
                    if record[0] >= consumed:
                        self._wait_gate(deadline)
                        if chunk.info.revoked:
                            break
                        return record
            self._chunk = None
            chunk = self._take_chunk(deadline)
            if chunk is None:
                return None
            self._start_chunk(chunk)

    def _next_batch(self) -> list[MessageAndMetadata] | None:
        while True:
            chunk = self._take_chunk(None)
            if chunk is None:
                return None
            self._start_chunk(chunk)
            info = chunk.info
            consumed = info.get_consumed_offset()
            self._wait_gate(None)
            if info.revoked:
                continue
            topic, partition = info.topic, info.partition
            batch = [
                MessageAndMetadata(topic, partition, o, self._decode(self._key, k, info, o, "key"),
                                   self._decode(self._value, v, info, o), ts, h)
                for o, ts, k, v, h in chunk.records
                if o >= consumed
            ]
            if batch:
                return batch

    def _chunk_info_mark(self, last: MessageAndMetadata) -> None:
        chunk = self._chunk
        if chunk is not None and not chunk.info.revoked:
            chunk.info.mark_consumed(last.offset + 1)

    def _start_chunk(self, chunk: FetchedChunk) -> None:
        if chunk.error is not None:
            raise chunk.error
        consumed = chunk.info.get_consumed_offset()
        if consumed < chunk.fetch_offset:
            log.warning("consumed offset %d does not match fetch offset %d for %s-%d; consumer may lose data",
                        consumed, chunk.fetch_offset, chunk.info.topic, chunk.info.partition)
            chunk.info.mark_consumed(chunk.fetch_offset)
        self._chunk = chunk
        self._pos = 0

    def _take_chunk(self, deadline: float | None) -> FetchedChunk | None:
        if self._ended:
            return None
        while True:
            self._raise_new_failure()
            wait = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
            if wait <= 0:
                raise ConsumerTimeoutError(f"no message within consumer.timeout.ms ({self._timeout_s}s)")
            try:
                chunk = self.chunks.get(timeout=wait)  # sliced wait: see WAIT_SLICE_S
            except queue.Empty:
                continue
            if chunk is None:
                self._ended = True
                self.chunks.put_nowait(None)  # other iterators of this queue end too
                return None
            if not chunk.info.revoked:
                return chunk

    def _wait_gate(self, deadline: float | None) -> None:
        while not self._gate.wait(WAIT_SLICE_S):  # SUSPENDED: hold delivery until the session is back
            if deadline is not None and time.monotonic() >= deadline:
                raise ConsumerTimeoutError("no message within consumer.timeout.ms (ZooKeeper suspended)")

    def _raise_new_failure(self) -> None:
        epoch, error = self._failures.check(self._seen_failure)
        self._seen_failure = epoch
        if error is not None:
            raise error
