"""Per-partition record batches waiting to be sent.

``send()`` appends records to the newest batch of their partition; the sender thread takes a partition's oldest
batch when it is full, its linger time has passed, or a flush or close asks for everything::

    acc = RecordAccumulator(batch_size=262144, buffer_memory=32 << 20, linger_ms=5, max_block_ms=60000)
    future = acc.append(TopicPartition("clicks", 0), 1700000000000, b"key", b"value")
    acc.ready_partitions(time.monotonic())       # -> ([TopicPartition("clicks", 0)], next check) once ready

A partition with a batch in flight is *muted*: its next batch waits, so a retried batch never overtakes a later
one and records stay in order per partition. Buffered bytes are bounded by ``buffer.memory``; ``append`` blocks
up to ``max.block.ms`` for space and then raises the builtin ``TimeoutError``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import Any, NamedTuple

from metaq.errors import MessageSizeTooLargeError, MetaqError
from metaq.protocol.builder import BATCH_HEADER, AnyBatchBuilder, BatchBuilder, Header

RECORD_OVERHEAD = 21  # most bytes a record adds besides key, value and headers (5 length, 10 ts, 5 offset, 1 attrs)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """What a successful send resolves to. ``offset`` is -1 with acks=0 (the broker does not say)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


_CONDITION_LOCK = threading.Lock()  # guards the lazy creation of every RecordFuture's condition


class RecordFuture(Future[RecordMetadata]):
    """A Future that creates its ``threading.Condition`` and its waiter and callback lists only when someone
    waits, cancels or adds a callback.

    ``send()`` returns a future per record and most are never waited on one by one. Future's eager Condition
    (with its RLock and bound methods, all tracked by the cyclic GC) made ``send()`` about 3x slower, and its
    two lists, also tracked, doubled the garbage collector's share of ``send()``. This relies on Future's
    private fields (``_state``, ``_result``, ``_exception``, ``_waiters``, ``_done_callbacks``; Future only
    reads the lists, always after taking ``_condition``), unchanged since Python 3.2; the tests exercise the
    public API and ``wait()`` over them.
    """

    def __init__(self, outcome: BatchOutcome | None = None, index: int = 0) -> None:
        # Future.__init__ is skipped on purpose: it builds the Condition and lists
        self._lazy: tuple[threading.Condition, list[Any], list[Any]] | None = None
        self._state = PENDING
        self._value: RecordMetadata | None = None
        self._exception = None
        self._outcome = outcome  # where a batch's record reads its metadata from once the batch succeeded
        self._index = index

    @property
    def _result(self) -> RecordMetadata | None:
        """Future's result field, made from the batch's outcome on first read: most results are never read."""
        value = self._value
        if value is None and self._state == FINISHED and self._exception is None and self._outcome is not None:
            value = self._value = self._outcome.metadata(self._index)
        return value

    @_result.setter
    def _result(self, value: RecordMetadata | None) -> None:
        self._value = value

    def _parts(self) -> tuple[threading.Condition, list[Any], list[Any]]:
        parts = self._lazy
        if parts is None:
            with _CONDITION_LOCK:
                parts = self._lazy
                if parts is None:
                    parts = self._lazy = (threading.Condition(), [], [])
        return parts

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._parts()[0]

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        return self._parts()[1]

    @property
    def _done_callbacks(self) -> list[Any]:
        return self._parts()[2]

    def resolve(self, result: RecordMetadata) -> None:
        self._finish(result, None)

    def reject(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, result: RecordMetadata | None, error: BaseException | None) -> None:
        with _CONDITION_LOCK:
            if self._lazy is None:  # no waiter, canceller or callback can exist: nobody to notify
                if self._state == PENDING:
                    self._result, self._exception, self._state = result, error, FINISHED
                return
        self._notify(result, error)

    def _notify(self, result: RecordMetadata | None, error: BaseException | None) -> None:
        """Future's own path, for a future someone waits on, cancelled or added a callback to."""
        if self.set_running_or_notify_cancel():
            if error is None:
                self.set_result(result)  # type: ignore[arg-type]
            else:
                self.set_exception(error)


class BatchOutcome:
    """A sent batch's offsets, which its records' futures make their RecordMetadata from when read (it holds
    no future, so futures and outcome form no reference cycle for the garbage collector)."""

    __slots__ = ("topic", "partition", "timestamps", "base_offset", "log_append_time_ms")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamps: list[int] = []  # of the records, in order
        self.base_offset = -1  # -1 for acks=0 (the broker does not say)
        self.log_append_time_ms = -1

    def metadata(self, index: int) -> RecordMetadata:
        """Record ``index``'s metadata: offset base_offset + index (-1 stays -1), the log append time if set."""
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.log_append_time_ms if self.log_append_time_ms >= 0 else self.timestamps[index]
        return RecordMetadata(self.topic, self.partition, offset, ts)


def resolve_all(futures: Sequence[RecordFuture], outcome: BatchOutcome, base_offset: int,
                log_append_time_ms: int) -> None:
    """``resolve`` every record future of a batch whose ``outcome`` they share, taking the lock once for the
    batch; their RecordMetadata is made when read, and the few futures someone waits on are notified after."""
    outcome.base_offset, outcome.log_append_time_ms = base_offset, log_append_time_ms
    watched: list[RecordFuture] = []
    with _CONDITION_LOCK:
        for future in futures:
            if future._lazy is not None:
                watched.append(future)
            elif future._state == PENDING:
                future._state = FINISHED
    for future in watched:
        future._notify(outcome.metadata(future._index), None)


def record_size_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    """An upper bound on a record's encoded size, used for size and memory checks."""
    size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for h_key, h_value in headers or ():
        size += 10 + len(h_key.encode("utf-8")) + (len(h_value) if h_value is not None else 0)
    return size


class ProducerBatch:
    """One partition's records in one record batch, and the futures of ``send()`` calls waiting on it."""

    __slots__ = ("tp", "created", "attempts", "retry_at", "size", "_builder", "_data", "_futures",
                 "_outcome", "_done")

    def __init__(self, tp: TopicPartition, batch_size: int, compression: str, now: float) -> None:
        self.tp = tp
        self.created = now  # time.monotonic() of the first record: linger counts from here
        self.attempts = 0  # failed sends so far
        self.retry_at = 0.0  # time.monotonic() before which a retry must not be sent
        self.size = BATCH_HEADER.size  # bytes counted against buffer.memory: the batch being built
        self._builder: AnyBatchBuilder | None = BatchBuilder(batch_size, compression)
        self._data: bytes | None = None
        self._futures: list[RecordFuture] = []
        self._outcome = BatchOutcome(tp.topic, tp.partition)
        self._done = threading.Event()

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={self.record_count}>"

    @property
    def record_count(self) -> int:
        return len(self._futures)

    @property
    def is_full(self) -> bool:
        return self._builder is None or self._builder.full

    @property
    def open_size(self) -> int:
        """Bytes in the batch being built (0 once sealed)."""
        return self._builder.size if self._builder is not None else 0

    @property
    def sealed(self) -> bool:
        return self._builder is None

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header] | None) -> RecordFuture | None:
        """A future for the record, or None if the batch is full or already sealed."""
        builder = self._builder
        if builder is None:
            return None
        added = builder.append(timestamp, key, value, headers)
        if not added:
            return None
        self.size += added
        futures = self._futures
        future = RecordFuture(self._outcome, len(futures))
        futures.append(future)
        self._outcome.timestamps.append(timestamp)
        return future

    def seal(self) -> bytes:
        """The finished batch bytes; no record can be added afterwards."""
        if self._data is None:
            builder, self._builder = self._builder, None
            assert builder is not None
            self._data = builder.build()
        return self._data

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Resolve every record's future: record i has offset base_offset + i (-1 stays -1 for acks=0)."""
        if self._done.is_set():  # already resolved (e.g. failed by a forced close): outcomes are final
            return
        resolve_all(self._futures, self._outcome, base_offset, log_append_time_ms)
        self._done.set()

    def fail(self, error: BaseException) -> None:
        if self._done.is_set():
            return
        for future in self._futures:
            future.reject(error)
        self._done.set()

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)


class RecordAccumulator:
    """Thread-safe queues of batches per partition; see the module docstring."""

    def __init__(self, *, batch_size: int, buffer_memory: int, linger_ms: int, max_block_ms: int,
                 compression: str = "none", max_record_size: int | None = None,
                 wakeup: Callable[[], None] = lambda: None) -> None:
        self._batch_size = batch_size
        self._buffer_memory = buffer_memory
        self._linger = linger_ms / 1000.0
        self._max_block = max_block_ms / 1000.0
        self._compression = compression
        self._max_record_size = max_record_size if max_record_size is not None else buffer_memory
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)  # notified when buffer memory is released
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._muted: set[TopicPartition] = set()
        self._used = 0
        self._flushes = 0
        self._closing = False

    # -- the send() side -------------------------------------------------------------------------------------

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] | None = None) -> Future[RecordMetadata]:
        """Add a record to its partition's newest batch (or a new one); blocks while the buffer is full."""
        if headers:
            bound = record_size_bound(key, value, headers)
        else:  # the common case, inlined: send() spends most of its time here
            bound = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        if bound + BATCH_HEADER.size > self._max_record_size:
            raise MessageSizeTooLargeError(
                f"a record of about {bound} bytes for {tp.topic}-{tp.partition} is larger than "
                f"max.request.size ({self._max_record_size})")
        with self._lock:
            if self._closing:
                raise MetaqError("send() on a closed producer")
            if self._used + bound > self._buffer_memory:
                self._reserve(bound)
            queue = self._batches.get(tp)
            if queue:
                batch = queue[-1]
                size = batch.size
                future = batch.try_append(timestamp, key, value, headers)
                if future is not None:
                    self._used += batch.size - size
                    return future
            future = self._new_batch(tp, timestamp, key, value, headers)
        self._wakeup()  # a new batch: the sender must learn its linger deadline (or send the full one)
        return future

    def _new_batch(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header] | None) -> RecordFuture:
        """Start the partition's next batch with this record (holding the lock)."""
        batch = ProducerBatch(tp, self._batch_size, self._compression, time.monotonic())
        future = batch.try_append(timestamp, key, value, headers)
        assert future is not None  # a first record always fits
        self._batches.setdefault(tp, deque()).append(batch)
        self._incomplete.add(batch)
        self._used += batch.size
        return future

    def _reserve(self, size: int) -> None:
        """Wait (holding the condition) until ``size`` more bytes fit in buffer.memory."""
        if self._used + size <= self._buffer_memory:
            return
        deadline = time.monotonic() + self._max_block
        while self._used + size > self._buffer_memory and not self._closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no buffer space for a record within max.block.ms ({self._max_block * 1000:.0f}"
                                   f" ms): {self._used} of buffer.memory ({self._buffer_memory}) bytes are unsent")
            self._space.wait(remaining)  # released by the sender as batches complete
        if self._closing:
            raise MetaqError("the producer was closed while send() waited for buffer space")

    # -- the sender side -------------------------------------------------------------------------------------

    def ready_partitions(self, now: float) -> tuple[list[TopicPartition], float]:
        """Partitions whose oldest batch may be sent now, and when (monotonic) to look again at the rest."""
        ready: list[TopicPartition] = []
        next_check = math.inf
        send_all = self._flushes > 0 or self._closing
        with self._lock:
            for tp, queue in self._batches.items():
                if not queue or tp in self._muted:
                    continue
                batch = queue[0]
                if batch.retry_at > now:
                    next_check = min(next_check, batch.retry_at)
                elif send_all or len(queue) > 1 or batch.is_full or now >= batch.created + self._linger:
                    ready.append(tp)
                else:
                    next_check = min(next_check, batch.created + self._linger)
        return ready, next_check

    def drain(self, groups: Iterable[Sequence[TopicPartition]], max_request_size: int,
              now: float) -> list[list[ProducerBatch]]:
        """For each group of partitions (one group per broker), take their oldest batches, sealed, up to
        ``max_request_size`` bytes per group, and mute those partitions until :meth:`done_with`."""
        drained: list[list[ProducerBatch]] = []
        with self._lock:
            for tps in groups:
                taken: list[ProducerBatch] = []
                total = 0
                for tp in tps:
                    queue = self._batches.get(tp)
                    if not queue or tp in self._muted or queue[0].retry_at > now:
                        continue
                    batch = queue[0]
                    size = len(batch.seal())
                    if taken and total + size > max_request_size:
                        break  # the rest waits for the next request
                    queue.popleft()
                    self._muted.add(tp)
                    taken.append(batch)
                    total += size
                drained.append(taken)
        return drained

    def take(self, tp: TopicPartition) -> ProducerBatch | None:
        """Take a partition's oldest batch (e.g. to fail or delay it without sending); mutes the partition."""
        with self._lock:
            queue = self._batches.get(tp)
            if not queue or tp in self._muted:
                return None
            batch = queue.popleft()
            batch.seal()
            self._muted.add(tp)
            return batch

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a failed batch back first in its partition's queue, to be sent again at ``retry_at``."""
        with self._lock:
            batch.retry_at = retry_at
            self._batches.setdefault(batch.tp, deque()).appendleft(batch)
            self._muted.discard(batch.tp)

    def done_with(self, batch: ProducerBatch) -> None:
        """The batch completed or failed for good: release its memory and unmute its partition."""
        with self._lock:
            self._muted.discard(batch.tp)
            self._incomplete.discard(batch)
            self._used -= batch.size
            self._space.notify_all()

    def unsent_batches(self) -> list[ProducerBatch]:
        """Take every queued batch (for a forced close); in-flight ones are the sender's."""
        with self._lock:
            batches = [batch for queue in self._batches.values() for batch in queue]
            self._batches.clear()
            for batch in batches:
                batch.seal()
            return batches

    # -- flush and close -------------------------------------------------------------------------------------

    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def begin_flush(self) -> list[ProducerBatch]:
        """Make every batch ready regardless of linger; returns the batches a flush must wait for."""
        with self._lock:
            self._flushes += 1
            batches = list(self._incomplete)
        self._wakeup()
        return batches

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def begin_close(self) -> None:
        """From now on every batch is ready at once, appends fail, and blocked appends give up waiting."""
        with self._lock:
            self._closing = True
            self._space.notify_all()
        self._wakeup()
