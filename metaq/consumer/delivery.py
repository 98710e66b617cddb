"""How a subscription's messages reach its listener: the listener protocols, decoding, retry-then-skip
(``metaq.max.fetch.retries``, then the recover store) and the split of chunks into parts.

See :mod:`metaq.consumer.listener` for the delivery guarantees.
"""

from __future__ import annotations

import concurrent.futures
import logging
import operator
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import tenacity
from tenacity.wait import wait_base

from metaq.consumer.message import MessageAndMetadata, MessageBatch
from metaq.consumer.recover import RecoverStore, describe_error
from metaq.consumer.serde import bytes_deserializer
from metaq.consumer.streams import BatchInHand
from metaq.errors import DeserializationError

log = logging.getLogger(__name__)

ERROR_PAUSE_S = 0.1  # first pause after an unexpected dispatch error (doubles, capped): no hot loop
MAX_ERROR_PAUSE_S = 5.0


class MessageListener(Protocol):
    """MetaQ's ``MessageListener``: ``receive_message`` is called once per message (MetaQ's
    ``recieveMessages``); raising means the message failed.

    An optional attribute ``executor: concurrent.futures.Executor | None`` chooses where it runs: ``None`` (or
    absent) on the dispatch thread; otherwise each chunk is handed to the executor and the dispatch thread waits
    for it before taking the next one, so per-partition order and at-least-once hold.
    """

    def receive_message(self, message: MessageAndMetadata) -> None: ...


class BatchMessageListener(Protocol):
    """Receives whole chunks (at most ``max_size`` bytes of keys and values) as a read-only sequence: a
    :class:`~metaq.consumer.message.MessageBatch`, which builds each message as it is read (``list(batch)``
    for a list), or a list when the subscription has deserializers. Raising means the whole batch
    failed: it is retried, then split into single messages for retry-then-skip, so messages handled before
    the failure may be delivered again. May have an ``executor`` like :class:`MessageListener`."""

    def receive_messages(self, batch: Sequence[MessageAndMetadata]) -> None: ...


Listener = MessageListener | BatchMessageListener


def default_retry_wait() -> wait_base:
    """10 ms doubling to at most 500 ms, plus up to 10 ms of jitter: a transient failure gets a moment to
    clear, while a poison message holds its partition back well under two seconds in all."""
    return tenacity.wait_exponential_jitter(multiplier=0.01, max=0.5, jitter=0.01)


class _Abandoned(Exception):
    """Shutdown ran out of time: leave the chunk in hand unprocessed and unmarked (it will be redelivered)."""


def _where(message: MessageAndMetadata) -> str:
    return f"{message.topic}-{message.partition} offset {message.offset}"


def _size(message: MessageAndMetadata) -> int:
    return len(message.key or b"") + len(message.value or b"")


_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")


def _total_size(batch: Sequence[MessageAndMetadata]) -> int:
    """``sum(_size(m) for m in batch)`` without a Python-level loop (falsy keys and values count 0)."""
    return sum(map(len, filter(None, map(_KEY, batch)))) + sum(map(len, filter(None, map(_VALUE, batch))))


def split_by_size(batch: Sequence[MessageAndMetadata], max_size: int) -> Iterator[Sequence[MessageAndMetadata]]:
    """Consecutive parts of ``batch`` of at most ``max_size`` bytes each (at least one message per part); a
    :class:`MessageBatch` is cut into MessageBatches (slices: no message is built here), a list into lists."""
    if isinstance(batch, MessageBatch):
        yield from _split_records(batch, max_size)
        return
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


def _split_records(batch: MessageBatch, max_size: int) -> Iterator[MessageBatch]:
    """split_by_size() of a MessageBatch, on its records."""
    if batch and batch.size() <= max_size:
        yield batch
        return
    records = batch.records
    start = size = 0
    for i, (_, _, key, value, _) in enumerate(records):
        n = len(key or b"") + len(value or b"")
        if i > start and size + n > max_size:
            yield batch[start:i]
            start, size = i, 0
        size += n
    if start < len(records):
        yield batch[start:]


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

    def run_chunk(self, chunk: Sequence[MessageAndMetadata], hand: BatchInHand) -> None:
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
            handle = self.listener.receive_message if self._raw else self.handle_one  # handle_one() w/o decoding
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

    def _deliver_batch(self, part: Sequence[MessageAndMetadata]) -> None:
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

    def _call_batch(self, part: Sequence[MessageAndMetadata]) -> None:
        self.listener.receive_messages(part if self._raw else [self._decode(m) for m in part])

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


