"""KafkaStream: the blocking iterator an application reads messages from (Kafka 0.8's ConsumerIterator).

    for message in stream:               # MessageAndMetadata(topic, partition, offset, key, value, timestamp)
        handle(message)

Semantics (docs/delivery-guarantees.md §1): records below the partition's consumed offset are skipped (a
fetched batch may start before the requested offset); the consumed offset becomes ``offset + 1`` when a
message is handed out, so the next commit covers it. Chunks of partitions whose ownership ended are
dropped. While the ZooKeeper connection is SUSPENDED, or the session is not proven alive (the session lease,
see :class:`DeliveryGate`), nothing is delivered: checked before every record the iterator returns, and
before every batch ``iter_batches`` yields. With ``consumer.timeout.ms``
>= 0 a wait longer than that raises :class:`ConsumerTimeoutError`, and the stream stays usable.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from metaq.consumer.message import MessageAndMetadata, _Unfrozen, batch_from, make_message
from metaq.consumer.partition_info import ChunkQueue, FetchedChunk, PartitionTopicInfo
from metaq.consumer.serde import describe_position, deserialize, get_deserializer
from metaq.errors import ConsumerTimeoutError, DeserializationError, MetaqError

log = logging.getLogger(__name__)

WAIT_SLICE_S = 0.2  # how often a blocked iterator re-checks the delivery gate, failures and shutdown


class DeliveryGate:
    """Whether messages may be handed to the application now, as one deadline on the monotonic clock.

    Two conditions make it: the ZooKeeper connection is up (:meth:`close` on SUSPENDED and LOST, :meth:`open`
    on CONNECTED), and, for a gate made with ``leased=True``, the session is proven alive until a point in
    time (:meth:`extend`, from :class:`metaq.zklease.SessionLease`). A process paused past its session
    timeout resumes believing it is connected: only the lease, whose deadline passed during the pause, stops
    it from delivering records that other members own by then. Every delivery compares ``time.monotonic()``
    with :attr:`deadline` (a float read without a lock or a call); the writers, rare, take a lock.
    """

    def __init__(self, *, leased: bool = False) -> None:
        self._cond = threading.Condition()
        self._connected = True
        self._lease_until = -math.inf if leased else math.inf
        self.deadline = self._lease_until
        """Monotonic time until which delivery is allowed (``-inf``: closed; ``inf``: open without a lease)."""

    def open(self) -> None:
        with self._cond:
            self._connected = True
            self._update()

    def close(self) -> None:
        with self._cond:
            self._connected = False
            self._update()

    def extend(self, until: float) -> None:
        """The session is proven alive until ``until`` (monotonic); never shortens an earlier proof."""
        with self._cond:
            if until > self._lease_until:
                self._lease_until = until
                self._update()

    def lapse(self) -> None:
        """The lease is void (the session was lost): closed until a new proof."""
        with self._cond:
            if self._lease_until != math.inf:
                self._lease_until = -math.inf
                self._update()

    def _update(self) -> None:
        self.deadline = self._lease_until if self._connected else -math.inf
        self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the gate to be open; True if it is."""
        with self._cond:
            return self._cond.wait_for(lambda: time.monotonic() < self.deadline, timeout)

    @property
    def is_open(self) -> bool:
        return time.monotonic() < self.deadline

    @property
    def connected(self) -> bool:
        """The connection is up (commits are possible), whatever the lease says."""
        return self._connected


class BatchInHand:
    """The batch :meth:`KafkaStream.iter_batches` yielded last, for a caller that hands its messages out one by
    one (the listener dispatch). Between two messages, :meth:`may_go_on` holds delivery while the gate is
    closed and says False once the partition was revoked (the rest belongs to its next owner);
    :meth:`finished` records what was processed, so that the commit a revocation makes covers it."""

    __slots__ = ("gate", "info")

    def __init__(self, info: PartitionTopicInfo, gate: DeliveryGate) -> None:
        self.info = info
        self.gate = gate

    def may_go_on(self, stop: threading.Event | None = None) -> bool:
        """Wait while delivery is gated; False if the partition is revoked or ``stop`` is set meanwhile."""
        info, gate = self.info, self.gate
        while not info.is_revoked:
            if time.monotonic() < gate.deadline or gate.wait(WAIT_SLICE_S):
                return not info.is_revoked
            if stop is not None and stop.is_set():
                return False
        return False

    def finished(self, next_offset: int) -> None:
        """Every message of the batch below ``next_offset`` was processed."""
        self.info.processed_offset = next_offset


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
    """One stream of messages over a chunk queue the fetchers fill: owns the chunk in hand and the position in
    it, and hands out its records (deserialized unless both deserializers are the identity) while the delivery
    gate is open, marking each partition's consumed offset as it goes. The queue, the gate and the failure
    signal are the connector's, shared by its streams."""

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
        self._raw = key_deserializer is _identity and value_deserializer is _identity
        self._chunk: FetchedChunk | None = None
        self._pos = 0
        self._ended = False
        self.took_at = time.monotonic()
        """When the application last took a chunk (max.poll.interval.ms, see :meth:`stalled_since`)."""
        self._taking = False

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        """``for message in stream``: what calling ``next(stream)`` again and again returns, as a generator
        that hands out the rest of a chunk itself (a resumed generator costs a fraction of a ``__next__``
        call). State lives in the stream, so iterating again after an exception (ConsumerTimeoutError) or a
        ``break`` goes on where the last message left off, as ``next(stream)`` does."""
        return self._iterate() if self._raw else self

    def _iterate(self) -> Iterator[MessageAndMetadata]:
        """The raw (no deserializers) iteration: :meth:`__next__` for the first message of a chunk and for
        every case off the hot path (a record below the consumed offset, a closed gate, a revoked partition,
        the end of a chunk), the loop below for the rest: the same per-record tests and the same locked
        hand-out (atomic with revoke()). It re-reads the stream's position at every message, so a
        ``next(stream)`` between two of them is no problem."""
        gate = self._gate
        now = time.monotonic
        new = object.__new__
        take = self.__next__
        while True:
            try:
                message = take()
            except StopIteration:
                return
            yield message
            chunk = self._chunk
            if chunk is None:
                continue
            info = chunk.info
            topic, partition, lock, records = info.topic, info.partition, info._lock, chunk.records
            end = len(records)
            while self._chunk is chunk:
                pos = self._pos
                if pos >= end:
                    break
                offset, timestamp, key, value, headers = records[pos]
                if offset < info.consumed_offset or now() >= gate.deadline:
                    break  # __next__ skips it, or waits for the gate
                with lock:
                    if info.is_revoked:
                        break  # __next__ drops the rest of the chunk
                    if offset >= info.consumed_offset:
                        info.consumed_offset = offset + 1
                self._pos = pos + 1
                # iter_messages()'s loop body inlined: driving that generator from this one (or calling
                # make_message) costs 5-10% more CPU per message in bench.consumer's stream iterator run
                built: Any = new(_Unfrozen)
                built.topic = topic
                built.partition = partition
                built.offset = offset
                built.key = key
                built.value = value
                built.timestamp = timestamp
                built.headers = headers
                built.__class__ = MessageAndMetadata
                yield built

    def __next__(self) -> MessageAndMetadata:
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        gate = self._gate
        now = time.monotonic
        while True:
            chunk = self._chunk
            if chunk is not None:
                # The hot loop: per record one unlocked skip test, one clock read against the gate's deadline
                # (SUSPENDED, session lease) and one locked try_consume (atomic with revoke()); the position
                # moves on only once a record is decided.
                info = chunk.info
                records = chunk.records
                pos = self._pos
                end = len(records)
                while pos < end:
                    offset, timestamp, key, value, headers = records[pos]
                    if offset < info.consumed_offset:  # below what was handed out (re-checked under the lock)
                        pos += 1
                        continue
                    if now() >= gate.deadline:
                        self._pos = pos
                        self._wait_gate(deadline)  # gated: may time out; this record stays the next one
                    with info._lock:  # info.try_consume(offset + 1) inlined: atomic with revoke()
                        if info.is_revoked:
                            break  # the rest of this chunk belongs to the next owner
                        if offset >= info.consumed_offset:
                            info.consumed_offset = offset + 1
                    self._pos = pos + 1
                    if self._raw:
                        return make_message(info.topic, info.partition, offset, key, value, timestamp, headers)
                    return MessageAndMetadata(
                        info.topic, info.partition, offset, self._decode(self._key, key, info, offset, "key"),
                        self._decode(self._value, value, info, offset), timestamp, headers,
                    )
                self._chunk = None
            chunk = self._take_chunk(deadline)
            if chunk is None:
                raise StopIteration
            self._start_chunk(chunk)

    def iter_batches(self) -> Iterator[Sequence[MessageAndMetadata]]:
        """Whole chunks at a time (a :class:`~metaq.consumer.message.MessageBatch`, whose messages are built as
        they are read, or with deserializers a list). A batch's offsets count as consumed only when the next
        batch is asked for, i.e. after the caller has processed it (at-least-once for the batch in hand).
        Honours consumer.timeout.ms like iteration does."""
        while True:
            deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
            batch = self._next_batch(deadline)
            if batch is None:
                return
            yield batch
            self._chunk_info_mark(batch[-1])

    def in_hand(self) -> BatchInHand:
        """The batch :meth:`iter_batches` yielded last (valid until the next one is asked for)."""
        chunk = self._chunk
        if chunk is None:
            raise MetaqError("in_hand(): no batch was yielded by iter_batches()")
        return BatchInHand(chunk.info, self._gate)

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

    def _next_batch(self, deadline: float | None) -> Sequence[MessageAndMetadata] | None:
        """The rest of the current chunk (or the next one) as messages. A record that does not deserialize
        ends the batch before it; asked for next, it is consumed and raised (DeserializationError naming
        its position), so neither it nor its neighbours are silently lost."""
        while True:
            chunk = self._chunk
            if chunk is None or self._pos >= len(chunk.records) or chunk.info.revoked:
                self._chunk = None
                chunk = self._take_chunk(deadline)
                if chunk is None:
                    return None
                self._start_chunk(chunk)
            info = chunk.info
            self._wait_gate(deadline)
            if info.revoked:
                self._chunk = None
                continue
            consumed = info.get_consumed_offset()
            records = chunk.records
            if self._raw:  # nothing can fail to deserialize: the records as they are, messages built on access
                raw = batch_from(info.topic, info.partition, records, self._pos, consumed)
                self._pos = len(records)
                if raw:
                    return raw
                continue
            batch: list[MessageAndMetadata] = []
            for i in range(self._pos, len(records)):
                o, ts, k, v, h = records[i]
                if o < consumed:
                    continue
                try:
                    batch.append(self._message(info, o, ts, k, v, h))
                except DeserializationError:
                    if batch:
                        self._pos = i
                        return batch
                    self._pos = i + 1
                    info.mark_consumed(o + 1)
                    raise
            self._pos = len(records)
            if batch:
                return batch

    def _message(self, info: Any, o: int, ts: int, k: bytes | None, v: bytes | None, h: Any) -> MessageAndMetadata:
        if self._raw:
            return make_message(info.topic, info.partition, o, k, v, ts, h)
        return MessageAndMetadata(info.topic, info.partition, o, self._decode(self._key, k, info, o, "key"),
                                  self._decode(self._value, v, info, o), ts, h)

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

    def stalled_since(self) -> float | None:
        """Since when chunks have waited for the application (it took none since ``took_at`` while some were
        queued), or None: it is waiting for one. Kafka's ``max.poll.interval.ms`` is measured from this, once
        per chunk (a chunk is what one poll returns here)."""
        if self._taking or self._ended or self.chunks.empty():
            return None
        return self.took_at

    def _take_chunk(self, deadline: float | None) -> FetchedChunk | None:
        self._taking = True
        try:
            return self._take_chunk_waiting(deadline)
        finally:
            self._taking = False
            self.took_at = time.monotonic()

    def _take_chunk_waiting(self, deadline: float | None) -> FetchedChunk | None:
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
                try:
                    self.chunks.put_nowait(None)  # other iterators of this queue end too
                except queue.Full:
                    pass  # refilled meanwhile: every iterator still ends at its own next take
                return None
            if not chunk.info.revoked:
                return chunk

    def _wait_gate(self, deadline: float | None) -> None:
        while not self._gate.wait(WAIT_SLICE_S):  # hold delivery until the session is back (or proven alive)
            if deadline is not None and time.monotonic() >= deadline:
                raise ConsumerTimeoutError("no message within consumer.timeout.ms (ZooKeeper suspended or "
                                           "session not proven alive)")

    def _raise_new_failure(self) -> None:
        epoch, error = self._failures.check(self._seen_failure)
        self._seen_failure = epoch
        if error is not None:
            raise error
