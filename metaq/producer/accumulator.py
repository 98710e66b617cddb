"""Per-partition record batches waiting to be sent.

``send()`` appends records to the newest batch of their partition; the sender thread takes a partition's oldest
batch when it is full, its linger time has passed, or a flush or close asks for everything::

    acc = RecordAccumulator(batch_size=262144, buffer_memory=32 << 20, linger_ms=5, max_block_ms=60000)
    future = acc.append("clicks", 0, 1700000000000, b"key", b"value")
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
from metaq.protocol.builder import BATCH_HEADER, Added, AnyBatchBuilder, BatchBuilder, Header, with_producer

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


_LOCK = threading.Lock()  # guards every RecordFuture's materialisation and every BatchOutcome's completion
_FUTURE_FIELDS = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


class RecordFuture(Future[RecordMetadata]):
    """A record's future: until someone uses it, two fields: its batch's shared outcome and the builder's answer.

    ``send()`` returns a future per record and most are dropped unread. Future's own fields (a Condition with
    its RLock, two lists) made ``send()`` about 3x slower; and a batch that held its records' futures to
    resolve them kept every one alive, and tracked by the cyclic GC, until the broker answered. So the batch
    holds none: the outcome is one object per batch, and a future first used (waited on, cancelled, given a
    callback, read) *materialises* Future's fields under a lock, either from the finished outcome or, while
    the batch is pending, registering with the outcome to be notified. This relies on Future's private
    fields (``_condition``, ``_state``, ``_result``, ``_exception``, ``_waiters``, ``_done_callbacks``;
    Future and concurrent.futures.wait/as_completed touch the others only after taking ``_condition``),
    unchanged since Python 3.2; tests/producer/test_producer_future.py exercises the public API over them.
    """

    __slots__ = ("_outcome", "_added")

    def __init__(self, outcome: BatchOutcome, added: Added) -> None:
        # Future.__init__ is skipped on purpose: _materialize makes its fields if they are ever used
        self._outcome = outcome
        # what the batch builder answered: the record's index in its batch (its offset is the batch's base
        # offset + index) and its timestamp
        self._added = added

    def __getattr__(self, name: str) -> Any:
        """Only reached for fields not yet made: Future's are made on first use, anything else is missing."""
        if name not in _FUTURE_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._materialize()
        return object.__getattribute__(self, name)

    def _materialize(self) -> None:
        with _LOCK:
            if "_condition" in self.__dict__:  # another thread made them first
                return
            outcome = self._outcome
            self._waiters = []
            self._done_callbacks: list[Callable[[Future[RecordMetadata]], object]] = []
            self._result = None
            self._exception = None
            if outcome.done:
                self._state = FINISHED
                if outcome.error is None:
                    self._result = outcome.metadata(self._added)
                else:
                    self._exception = outcome.error
            else:
                self._state = PENDING
                outcome.watch(self)
            self._condition = threading.Condition()  # last: its presence says the rest is made

    def _notify(self) -> None:
        """Future's own path, for a materialised future of a batch that just finished (not under _LOCK)."""
        outcome = self._outcome
        if self.set_running_or_notify_cancel():  # False if it was cancelled: its waiters were told so
            if outcome.error is None:
                self.set_result(outcome.metadata(self._added))
            else:
                self.set_exception(outcome.error)


class BatchOutcome:
    """What became of a batch, shared by its records' futures, which make their RecordMetadata from it when
    read. It references only the futures someone waits on, until it has notified them."""

    __slots__ = ("topic", "partition", "base_offset", "log_append_time_ms", "error", "done", "_watchers")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1  # -1 for acks=0 (the broker does not say)
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        self.done = False
        self._watchers: list[RecordFuture] | None = None

    def metadata(self, added: Added) -> RecordMetadata:
        """A record's metadata: offset base_offset + its index (-1 stays -1), the log append time if set."""
        offset = self.base_offset + added.offset if self.base_offset >= 0 else -1
        ts = self.log_append_time_ms if self.log_append_time_ms >= 0 else added.timestamp
        return RecordMetadata(self.topic, self.partition, offset, ts)

    def watch(self, future: RecordFuture) -> None:
        """Notify ``future`` when the batch finishes (called holding _LOCK, while not done)."""
        if self._watchers is None:
            self._watchers = []
        self._watchers.append(future)

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Every record succeeded: record i has offset base_offset + i. Does nothing if already finished."""
        self._finish(base_offset, log_append_time_ms, None)

    def fail(self, error: BaseException) -> None:
        """Every record failed with ``error``. Does nothing if already finished."""
        self._finish(-1, -1, error)

    def _finish(self, base_offset: int, log_append_time_ms: int, error: BaseException | None) -> None:
        with _LOCK:
            if self.done:
                return
            self.base_offset, self.log_append_time_ms, self.error = base_offset, log_append_time_ms, error
            self.done = True
            watchers, self._watchers = self._watchers, None
        for future in watchers or ():
            future._notify()


def record_size_bound(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    """An upper bound on a record's encoded size, used for size and memory checks."""
    size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for h_key, h_value in headers or ():
        size += 10 + len(h_key.encode("utf-8")) + (len(h_value) if h_value is not None else 0)
    return size


_NO_HEADERS: list[Header] = []  # the compiled builder wants a list; it only reads it

# what RecordAccumulator._append_slowly did besides adding the record
_ADDED = 0  # added it to the partition's open batch
_STARTED = 1  # started the partition's first open batch: the sender must learn its linger deadline
_FILLED = 2  # started a new batch because the open one is full: the sender has a batch to send now


class ProducerBatch:
    """One partition's records in one record batch, and the outcome its records' futures read."""

    __slots__ = ("tp", "created", "attempts", "retry_at", "record_count", "add", "outcome", "producer_id",
                 "_builder", "_data", "_sealed_size", "_done")

    def __init__(self, tp: TopicPartition, batch_size: int, compression: str, now: float) -> None:
        self.tp = tp
        self.created = now  # time.monotonic() of the first record: linger counts from here
        self.attempts = 0  # failed sends so far
        self.retry_at = 0.0  # time.monotonic() before which a retry must not be sent
        self.record_count = 0
        self.producer_id = -1  # an idempotent producer's id, once stamped (see stamp_producer)
        builder = BatchBuilder(batch_size, compression)
        self._builder: AnyBatchBuilder | None = builder
        # the builder's add(offset, timestamp, key, value, headers), None when full: the accumulator calls it
        # directly, under its lock, only while the batch is open (not sealed)
        self.add = builder.add
        self.outcome = BatchOutcome(tp.topic, tp.partition)
        self._data: bytes | None = None
        self._sealed_size = 0
        self._done = threading.Event()

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={self.record_count}>"

    @property
    def size(self) -> int:
        """The bytes counted against buffer.memory: the batch uncompressed, header and records."""
        builder = self._builder
        return builder.size if builder is not None else self._sealed_size

    @property
    def is_full(self) -> bool:
        return self._builder is None or self._builder.full

    @property
    def sealed(self) -> bool:
        return self._builder is None

    def try_append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
                   headers: list[Header]) -> Added | None:
        """Add the record (a ``timestamp`` of None is now): the builder's answer, or None if the batch is full
        or already sealed. The accumulator's append does the same inline."""
        if self._builder is None:
            return None
        added = self.add(self.record_count, timestamp, key, value, headers)
        if added is not None:
            self.record_count += 1
        return added

    def seal(self) -> bytes:
        """The finished batch bytes; no record can be added afterwards."""
        if self._data is None:
            builder, self._builder = self._builder, None
            assert builder is not None
            self._sealed_size = builder.size
            self._data = builder.build()
        return self._data

    def stamp_producer(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        """Seal the batch and write an idempotent producer's id, epoch and sequence into it: once, before its
        first send; a retry resends the same bytes, so that the broker recognises a duplicate."""
        self._data = with_producer(self.seal(), producer_id, epoch, base_sequence)
        self.producer_id = producer_id

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Resolve every record's future: record i has offset base_offset + i (-1 stays -1 for acks=0).
        Outcomes are final: a batch already failed (e.g. by a forced close) stays failed."""
        self.outcome.complete(base_offset, log_append_time_ms)
        self._done.set()

    def fail(self, error: BaseException) -> None:
        self.outcome.fail(error)
        self._done.set()

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)


class RecordAccumulator:
    """Thread-safe queues of batches per partition; see the module docstring."""

    def __init__(self, *, batch_size: int, buffer_memory: int, linger_ms: int, max_block_ms: int,
                 compression: str = "none", max_record_size: int | None = None,
                 wakeup: Callable[[], None] = lambda: None) -> None:
        self._buffer_memory = buffer_memory
        self._linger = linger_ms / 1000.0
        self._max_block = max_block_ms / 1000.0
        self._compression = compression
        self._max_record_size = max_record_size if max_record_size is not None else buffer_memory
        self._max_bound = self._max_record_size - BATCH_HEADER.size  # a record alone in a batch must fit
        # a record the builder adds to a batch it already holds records in is at most batch_size: so it fits
        # in a request, and (while no more than _fast_limit bytes are used) in buffer.memory
        self._batch_size = min(batch_size, self._max_record_size)
        self._fast_limit = buffer_memory - self._batch_size
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)  # notified when buffer memory is released
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._open: dict[tuple[str, int], ProducerBatch] = {}  # each partition's newest batch while unsealed
        self._incomplete: set[ProducerBatch] = set()
        self._muted: set[TopicPartition] = set()
        self._used = 0
        self._flushes = 0
        self._closing = False

    # -- the send() side -------------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] | None = None) -> Future[RecordMetadata]:
        """Add a record (a ``timestamp`` of None is now) to its partition's open batch, or a new one; blocks
        while the buffer is full.

        The common case is inline and costs one lock, one dict lookup, one compiled append (which stamps the
        time) and the future: send() spends most of its time here. It needs no size checks: a record the
        builder adds to a batch that already holds records is at most batch.size (<= max.request.size), and
        while buffer.memory has batch.size to spare it fits there too. Everything else takes
        :meth:`_append_slowly`.
        """
        header_list = list(headers) if headers else _NO_HEADERS
        lock = self._lock
        lock.acquire()  # not ``with``: its __enter__/__exit__ calls cost as much as the lock itself
        try:
            if self._used <= self._fast_limit:
                batch = self._open.get((topic, partition))  # a plain tuple finds the TopicPartition key
                if batch is not None:
                    index = batch.record_count
                    added = batch.add(index, timestamp, key, value, header_list)
                    if added is not None:
                        batch.record_count = index + 1
                        self._used += added.size
                        return RecordFuture(batch.outcome, added)
            future, did = self._append_slowly(topic, partition, timestamp, key, value, header_list)
        finally:
            lock.release()
        if did != _ADDED:
            self._wakeup()
            if did == _FILLED:
                # Hand the GIL to the sender now. A thread sending in a loop holds it until the interpreter
                # forces a switch (sys.getswitchinterval(), 5 ms), so the woken sender would wait that long at
                # each step of sending a batch and the buffer would fill: this took the bench from 0.54-0.6M to
                # 0.77-0.82M msgs/s (256 KB batches; docs/architecture.md, "Producer throughput and the GIL").
                time.sleep(0)
        return future

    def _append_slowly(self, topic: str, partition: int, timestamp: int | None, key: bytes | None,
                       value: bytes | None, headers: list[Header]) -> tuple[RecordFuture, int]:
        """append() when the partition's open batch has no room (or there is none) or buffer.memory is nearly
        used up (holding the lock): check the record's size, wait for buffer space, add the record to the open
        batch if it fits now, else start a new one. Also says which it did (_ADDED, _STARTED, _FILLED)."""
        bound = record_size_bound(key, value, headers)
        if bound > self._max_bound:
            raise MessageSizeTooLargeError(
                f"a record of about {bound} bytes for {topic}-{partition} is larger than "
                f"max.request.size ({self._max_record_size})")
        if self._closing:
            raise MetaqError("send() on a closed producer")
        self._reserve(BATCH_HEADER.size + bound)  # may wait, letting the sender seal the open batch
        batch = self._open.get((topic, partition))
        if batch is not None:
            added = batch.try_append(timestamp, key, value, headers)
            if added is not None:
                self._used += added.size
                return RecordFuture(batch.outcome, added), _ADDED
        future = self._new_batch(TopicPartition(topic, partition), timestamp, key, value, headers)
        return future, _STARTED if batch is None else _FILLED

    def _new_batch(self, tp: TopicPartition, timestamp: int | None, key: bytes | None, value: bytes | None,
                   headers: list[Header]) -> RecordFuture:
        """Start the partition's next batch with this record, the new open batch (holding the lock)."""
        batch = ProducerBatch(tp, self._batch_size, self._compression, time.monotonic())
        added = batch.try_append(timestamp, key, value, headers)
        assert added is not None  # a first record always fits
        self._batches.setdefault(tp, deque()).append(batch)
        self._open[tp] = batch
        self._incomplete.add(batch)
        self._used += batch.size
        return RecordFuture(batch.outcome, added)

    def _seal(self, batch: ProducerBatch) -> bytes:
        """Seal ``batch`` (holding the lock): appends go to a new batch from now on."""
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        return batch.seal()

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
                    size = len(self._seal(batch))
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
            self._seal(batch)
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
                self._seal(batch)
            return batches

    # -- flush and close -------------------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        """The bytes of buffer.memory in use: every batch not yet done with, uncompressed."""
        return self._used

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
            self._open.clear()  # appends now take the slow path, which refuses them
            self._space.notify_all()
        self._wakeup()
