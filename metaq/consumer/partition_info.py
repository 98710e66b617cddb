"""Per-partition consumer state shared by the fetcher threads, the streams and the committer.

A :class:`PartitionTopicInfo` is created for each partition a rebalance assigns, with the committed
offset as both its *consumed* and its *fetched* offset (Kafka 0.8's ``PartitionTopicInfo``):

- fetched: the next offset a fetcher asks the broker for; advanced when a chunk is enqueued;
- consumed: the next offset the application has not yet taken; what a commit writes.

``generation`` is the rebalance generation that created it. When ownership ends (rebalance, session
loss) the info is ``revoke()``d: its chunks still in a queue are dropped by the stream, and the
committer no longer commits it.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from metaq.errors import MetaqError
from metaq.protocol.record_types import Record

__all__ = ["ENQUEUE_POLL_S", "ChunkQueue", "FetchedChunk", "PartitionTopicInfo", "Record"]

ENQUEUE_POLL_S = 0.02  # how often a blocked enqueue re-checks for revocation and stop (bounds stop_connections)


class ChunkQueue(queue.Queue["FetchedChunk | None"]):
    """A stream's bounded queue of chunks (``queued.max.message.chunks``); ``None`` ends iteration."""


@dataclass(slots=True)
class FetchedChunk:
    """One partition's fetched records, as requested at ``fetch_offset`` (may start below it)."""

    info: PartitionTopicInfo
    fetch_offset: int
    records: list[Record]
    error: MetaqError | None = None


@dataclass(eq=False)
class PartitionTopicInfo:
    """One partition this member owns, in one generation: the fetcher and the stream share it. It owns the
    partition's fetched and consumed offsets (changed under its lock, atomically with :meth:`revoke`) and
    whether it was revoked; the chunk queue it points to belongs to a stream."""

    topic: str
    partition: int
    chunks: ChunkQueue
    consumed_offset: int
    fetched_offset: int
    generation: int
    thread_id: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _revoked: threading.Event = field(default_factory=threading.Event, repr=False)
    is_revoked: bool = field(default=False, repr=False)
    """The Event's state as a plain attribute, for per-message checks without a call (written by revoke() only)."""
    log_end_offset: int | None = field(default=None, repr=False)
    """The partition's high watermark in the last fetch answer (metrics: lag); written by its fetcher only."""
    processed_offset: int = field(default=-1, repr=False)
    """Next offset after the last message a listener finished; written without a lock by the one dispatcher of
    the partition's chunk (one store per message), counted in :meth:`get_consumed_offset`, so that a commit
    made at revocation covers every message finished before it (not only whole chunks)."""

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def revoked(self) -> bool:
        return self._revoked.is_set()

    def revoke(self) -> None:
        """Ownership ended: stop accepting chunks, and tell streams to drop the queued ones.

        Taken under the lock so that a commit made after ``revoke()`` sees every offset handed out
        (see :meth:`try_consume`): a clean rebalance then causes no duplicates."""
        with self._lock:
            self.is_revoked = True
            self._revoked.set()

    def enqueue(self, fetch_offset: int, records: list[Record], stop: threading.Event | None = None) -> bool:
        """Hand a fetched chunk to the stream, blocking while its queue is full (back-pressure).

        Returns False (and enqueues nothing) if the partition was revoked or ``stop`` was set meanwhile
        (a fetcher being stopped must never hang on a full queue). A chunk fetched at an offset that is
        no longer the fetched offset (a reset happened) is dropped too.
        """
        if not records:
            return True
        chunk = FetchedChunk(self, fetch_offset, records)
        while not self._revoked.is_set() and not (stop is not None and stop.is_set()):
            with self._lock:
                if fetch_offset != self.fetched_offset:
                    return False
            try:
                self.chunks.put(chunk, timeout=ENQUEUE_POLL_S)
            except queue.Full:
                continue
            self.advance_fetched(fetch_offset, records[-1][0] + 1)
            return True
        return False

    def advance_fetched(self, from_offset: int, to_offset: int) -> bool:
        """Move the fetch position on from ``from_offset`` (unless a reset moved it meanwhile); also used
        for batches with nothing to deliver, such as control batches."""
        with self._lock:
            if self.fetched_offset != from_offset:
                return False
            self.fetched_offset = to_offset
            return True

    def enqueue_error(self, error: MetaqError, stop: threading.Event | None = None) -> None:
        """Surface a problem the application must see (e.g. a message larger than the fetch size)."""
        while not self._revoked.is_set() and not (stop is not None and stop.is_set()):
            try:
                self.chunks.put(FetchedChunk(self, self.fetched_offset, [], error), timeout=ENQUEUE_POLL_S)
                return
            except queue.Full:
                continue

    def reset_offsets(self, offset: int) -> None:
        """After OffsetOutOfRange: both offsets jump to the offset auto.offset.reset chose."""
        with self._lock:
            self.fetched_offset = offset
            self.consumed_offset = offset
            self.processed_offset = -1

    def get_fetch_offset(self) -> int:
        with self._lock:
            return self.fetched_offset

    def get_consumed_offset(self) -> int:
        with self._lock:
            return max(self.consumed_offset, self.processed_offset)

    def try_consume(self, next_offset: int) -> bool:
        """Hand out the message before ``next_offset`` unless ownership ended; atomic with revoke()."""
        with self._lock:
            if self.is_revoked:
                return False
            if next_offset > self.consumed_offset:
                self.consumed_offset = next_offset
            return True

    def mark_consumed(self, next_offset: int) -> None:
        """The application has taken everything below ``next_offset``; offsets never move backwards."""
        with self._lock:
            if next_offset > self.consumed_offset:
                self.consumed_offset = next_offset
