"""A bound on the segment files a broker holds open (docs/architecture.md, "Open files").

Kafka keeps every segment's ``.log`` open and its indexes mapped, so its descriptors grow with partitions and
segments until the process limit is hit (its answer is "raise ``ulimit -n``"). metaq opens a segment's files on
first use and keeps at most :attr:`OpenSegments.capacity` segments open broker-wide: opening one more closes the
least recently used one. A segment holds at most :data:`FILES_PER_SEGMENT` descriptors (``.log`` for reading,
``.log`` for writing while active, ``.index``, ``.timeindex``).

Evicting never breaks a reader: descriptors are :class:`SegmentFile` objects, closed when the last reference to
them goes (CPython's reference counting closes at once, not at a later collection). Eviction only drops the
segment's own references; a Fetch being sent by ``sendfile``, a cleaner pass or a flush holds its own reference
(the pin) and the descriptor stays open until it lets go. The next use of the segment reopens its files.
"""

from __future__ import annotations

import io
import logging
import resource
import threading
from collections import OrderedDict
from typing import Protocol

__all__ = [
    "FILES_PER_SEGMENT",
    "SEGMENT_FILES",
    "FileBudget",
    "OpenSegments",
    "SegmentFile",
    "file_budget",
]

logger = logging.getLogger(__name__)

FILES_PER_SEGMENT = 4
"""Descriptors an open segment may hold: ``.log`` read, ``.log`` write (active segment), two indexes."""

MIN_SEGMENTS = 8
"""The cache never shrinks below this (a log being appended, read and cleaned at once needs a few)."""


class SegmentFile(io.FileIO):
    """A segment's descriptor, closed when its last reference goes (quietly: that is how it is meant to end,
    so no ``ResourceWarning``). Whoever uses the descriptor holds the object for as long as it does."""

    def __del__(self) -> None:
        self.close()


class Evictable(Protocol):
    """What the cache holds: an owner of descriptors that can drop them (reopened on its next use)."""

    def release_files(self) -> None: ...


class OpenSegments:
    """Least recently used owners of open segment files, at most ``capacity`` of them.

    Thread-safe: the event loop appends and reads, a flush thread and cleaner threads open files too. Evicted
    owners are told to release their files outside the cache's lock."""

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._owners: OrderedDict[int, Evictable] = OrderedDict()
        self._capacity = max(MIN_SEGMENTS, capacity)
        self.evictions = 0
        """Segments closed to stay within the capacity since start (a high rate means thrashing)."""

    @property
    def capacity(self) -> int:
        return self._capacity

    def resize(self, capacity: int) -> None:
        """Change the bound (the broker sets it from RLIMIT_NOFILE at start); evicts at once if needed."""
        with self._lock:
            self._capacity = max(MIN_SEGMENTS, capacity)
            victims = self._over_capacity()
        _release(victims)

    def __len__(self) -> int:
        return len(self._owners)

    def __contains__(self, owner: object) -> bool:
        return id(owner) in self._owners

    def touch(self, owner: Evictable) -> None:
        """``owner`` uses (or just opened) its files: it becomes the most recently used; the least recently used
        owners beyond the capacity release theirs."""
        key = id(owner)
        with self._lock:
            if key in self._owners:
                self._owners.move_to_end(key)
                return
            self._owners[key] = owner
            victims = self._over_capacity()
        _release(victims)

    def forget(self, owner: Evictable) -> None:
        """``owner`` closed its files itself (segment closed or deleted)."""
        with self._lock:
            self._owners.pop(id(owner), None)

    def _over_capacity(self) -> list[Evictable]:
        victims = []
        while len(self._owners) > self._capacity:
            victims.append(self._owners.popitem(last=False)[1])
        self.evictions += len(victims)
        return victims


def _release(victims: list[Evictable]) -> None:
    for victim in victims:
        try:
            victim.release_files()
        except Exception:  # closing a descriptor cannot fail in a way the caller could handle
            logger.exception("Cannot release the files of %r", victim)


class FileBudget:
    """How a process limit on descriptors is shared: segment files, connections, and a reserve for the rest
    (ZooKeeper, replica fetchers, checkpoints, listening sockets, a file opened briefly)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserve = max(64, limit // 10)
        self.segments = max(MIN_SEGMENTS, (limit - self.reserve) // 2 // FILES_PER_SEGMENT)
        """Segments open at once (each up to FILES_PER_SEGMENT descriptors): half of what the reserve leaves."""
        self.connections = max(1, limit - self.reserve - self.segments * FILES_PER_SEGMENT)
        """Client connections at once: the rest."""

    def __repr__(self) -> str:
        return (f"FileBudget(limit={self.limit}, segments={self.segments} x {FILES_PER_SEGMENT} descriptors,"
                f" connections={self.connections}, reserve={self.reserve})")


def file_budget() -> FileBudget:
    """The budget of this process, from its soft RLIMIT_NOFILE (capped: an "unlimited" limit is not a reason to
    keep a million files open)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft > 1 << 20:
        soft = 1 << 20
    return FileBudget(soft)


SEGMENT_FILES = OpenSegments(file_budget().segments)
"""The broker-wide cache: the descriptor limit is the process's, so the bound is too."""
