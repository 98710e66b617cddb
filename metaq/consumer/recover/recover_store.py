"""The recover store of one ``topic@group``: an append-only, fsynced, flock-shared log of entries.

See :mod:`metaq.consumer.recover` for the layout and guarantees.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Self

from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover.format import (
    COMPACT_MIN_GARBAGE,
    FORMAT_NAME,
    FORMAT_VERSION,
    LOCK_POLL_S,
    LOCK_TIMEOUT_S,
    SUFFIX,
    RecoverEntry,
    ReplayResult,
    StoreRecord,
    _frame,
    _now_ms,
    _parse,
    _raw,
    default_dir,
    describe_error,
    record_int,
    store_name,
)
from metaq.errors import StorageError
from metaq.fileio import atomic_write

log = logging.getLogger(__name__)


class RecoverStore:
    """The recover store of one ``topic@group``; see the module docstring. Use :meth:`open`."""

    def __init__(self, directory: Path, topic: str, group: str) -> None:
        name = store_name(topic, group)
        self.topic = topic
        self.group = group
        self.path = directory / f"{name}{SUFFIX}"
        self._lock = threading.RLock()
        self._replay_mutex = threading.Lock()
        self._fd = -1
        self._lock_fd = os.open(directory / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            self._replay_fd = os.open(directory / f"{name}.replay.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            os.close(self._lock_fd)
            raise
        self._ino = -1
        self._pos = 0  # bytes of the log already applied to the in-memory state
        self._records = 0  # put/upd/del frames in the log (compaction is due when > live entries)
        self._entries: dict[str, RecoverEntry] = {}
        self._closed = False

    @classmethod
    def open(cls, directory: str | os.PathLike[str] | None, topic: str, group: str) -> Self:
        """Open (creating if needed) the store of ``topic@group``; compacts it if it holds superseded records."""
        root = default_dir(directory)
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            store = cls(root, topic, group)
        except OSError as e:
            raise StorageError(f"cannot open recover store in {root}: {e.strerror or e}") from e
        try:
            with store._locked():
                if store._records > len(store._entries):
                    store._compact()
        except BaseException:
            store.close()
            raise
        log.debug("recover store %s: %d entries", store.path, len(store._entries))
        return store

    # -- public API ------------------------------------------------------------------------------

    def append(self, message: MessageAndMetadata, error: BaseException) -> str:
        """Set ``message`` aside (durably: fsynced before this returns) and return its entry id. The same
        message (partition, offset, key, value) already stored is not stored twice: its id is returned."""
        key, value = _raw(message.key, "key"), _raw(message.value, "value")
        headers = tuple((str(name), _raw(v, f"header {name!r}")) for name, v in message.headers)
        with self._locked():
            for entry in self._entries.values():
                if (entry.partition, entry.offset, entry.key, entry.value) == (
                        message.partition, message.offset, key, value) and entry.topic == message.topic:
                    return entry.id
            entry = RecoverEntry(uuid.uuid4().hex, message.topic, message.partition, message.offset, key, value,
                                 message.timestamp, headers, 0, describe_error(error), _now_ms())
            self._write([entry._record()])
            self._entries[entry.id] = entry
            self._records += 1
            return entry.id

    def list(self, include_dead: bool = True) -> list[RecoverEntry]:
        """Entries in the order they were stored."""
        with self._locked():
            return [e for e in self._entries.values() if include_dead or not e.dead]

    def get(self, entry_id: str) -> RecoverEntry | None:
        with self._locked():
            return self._entries.get(entry_id)

    def remove(self, entry_id: str) -> bool:
        """Remove one entry (a tombstone, fsynced); False if it was not there (already removed)."""
        return self.drop([entry_id]) == 1

    def drop(self, ids: Iterable[str] | None = None) -> int:
        """Remove the given entries, or all of them (``None``), with one fsync; returns how many were removed."""
        with self._locked():
            targets = list(self._entries) if ids is None else [i for i in dict.fromkeys(ids) if i in self._entries]
            if not targets:
                return 0
            self._write([{"op": "del", "id": i} for i in targets])
            for i in targets:
                del self._entries[i]
            self._records += len(targets)
            self._maybe_compact()
            return len(targets)

    def replay(
        self,
        handler: Callable[[MessageAndMetadata], object],
        *,
        max_attempts: int,
        include_dead: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> ReplayResult:
        """Redeliver entries to ``handler`` in stored order; one that returns normally is removed.

        A failing entry stays (its attempts counted, the pass goes on); at ``max_attempts`` it is marked dead.
        ``include_dead`` replays dead entries too (an operator's manual retry). ``should_stop`` is checked
        between entries, so a pass can be cut short at shutdown. The handler runs without the store lock held.
        """
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        with self._replay_guard() as acquired:
            if not acquired:
                return ReplayResult(busy=True)
            counts = {"succeeded": 0, "failed": 0, "dead": 0}
            for entry_id in [e.id for e in self.list(include_dead=include_dead)]:
                if should_stop is not None and should_stop():
                    break
                entry = self.get(entry_id)  # it may have been dropped or replayed elsewhere meanwhile
                if entry is None or (entry.dead and not include_dead):
                    continue
                counts[self._replay_one(entry, handler, max_attempts)] += 1
            return ReplayResult(succeeded=counts["succeeded"], failed=counts["failed"], dead=counts["dead"])

    def compact(self) -> None:
        """Rewrite the log with the live entries only (atomically)."""
        with self._locked():
            self._compact()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._fd, self._lock_fd, self._replay_fd):
                if fd >= 0:
                    os.close(fd)
            self._fd = self._lock_fd = self._replay_fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RecoverStore({str(self.path)!r}, entries={len(self._entries)})"

    # -- replay ----------------------------------------------------------------------------------

    def _replay_one(self, entry: RecoverEntry, handler: Callable[[MessageAndMetadata], object],
                    max_attempts: int) -> str:
        try:
            handler(entry.to_message())
        except Exception as e:
            attempts = entry.attempts + 1
            dead = attempts >= max_attempts
            self._update(entry.id, attempts, describe_error(e), dead)
            if dead:
                log.error("recover %s: %s-%d offset %d failed %d replays; marked dead (kept; replay it with "
                          "include_dead=True or drop it): %s", self.path.name, entry.topic, entry.partition,
                          entry.offset, attempts, describe_error(e))
                return "dead"
            log.warning("recover %s: %s-%d offset %d failed again (replay %d of %d): %s", self.path.name,
                        entry.topic, entry.partition, entry.offset, attempts, max_attempts, describe_error(e))
            return "failed"
        self.remove(entry.id)
        return "succeeded"

    def _update(self, entry_id: str, attempts: int, last_error: str, dead: bool) -> None:
        with self._locked():
            if entry_id not in self._entries:
                return
            self._write([{"op": "upd", "id": entry_id, "attempts": attempts, "last_error": last_error,
                          "dead": dead}])
            self._entries[entry_id] = replace(self._entries[entry_id], attempts=attempts,
                                              last_error=last_error, dead=dead)
            self._records += 1
            self._maybe_compact()

    @contextlib.contextmanager
    def _replay_guard(self) -> Iterator[bool]:
        """One replay pass at a time per store, across threads and processes; never waits for another."""
        if not self._replay_mutex.acquire(blocking=False):
            yield False
            return
        try:
            with self._lock:
                self._check_open()
                acquired = self._try_flock(self._replay_fd)
            if not acquired:
                log.info("recover %s: another process is replaying it; pass skipped", self.path.name)
            try:
                yield acquired
            finally:
                with self._lock:
                    if acquired and not self._closed:  # closing the descriptor released it already
                        fcntl.flock(self._replay_fd, fcntl.LOCK_UN)
        finally:
            self._replay_mutex.release()

    # -- the log ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The thread lock, then the process lock; then catch up with what other processes wrote."""
        with self._lock:
            self._check_open()
            self._flock()
            try:
                self._sync()
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"recover store {self.path} is closed")

    def _flock(self) -> None:
        deadline = time.monotonic() + LOCK_TIMEOUT_S  # bounded: a hung process must not block our dispatcher
        while not self._try_flock(self._lock_fd):
            if time.monotonic() >= deadline:
                raise StorageError(f"recover store {self.path}: lock held by another process for "
                                   f"{LOCK_TIMEOUT_S:.0f}s")
            time.sleep(LOCK_POLL_S)

    @staticmethod
    def _try_flock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _sync(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._create()
            st = os.stat(self.path)
        if st.st_ino != self._ino or st.st_size < self._pos:
            self._reopen()
        elif st.st_size > self._pos:
            self._read_tail(st.st_size)

    def _header(self) -> StoreRecord:
        return {"op": "hdr", "format": FORMAT_NAME, "version": FORMAT_VERSION, "topic": self.topic,
                "group": self.group}

    def _create(self) -> None:
        atomic_write(self.path, _frame(self._header()))

    def _reopen(self) -> None:
        """(Re)load the whole log: first open, or another process replaced (compacted) it."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._ino = os.fstat(self._fd).st_ino
        self._pos = 0
        self._records = 0
        self._entries = {}
        self._read_tail(os.fstat(self._fd).st_size)

    def _read_tail(self, size: int) -> None:
        if size == 0:  # an empty file (created by hand): make it a store
            self._write([self._header()])
            return
        data = os.pread(self._fd, size - self._pos, self._pos)
        records, good, problem = _parse(data)
        if self._pos == 0:
            self._check_header(records[0] if records else None, problem)
            records = records[1:]
        for record in records:
            self._apply(record)
        if problem is not None:
            log.warning("recover store %s: dropping %d bytes at offset %d (%s): the tail of a write cut short "
                        "by a crash", self.path, len(data) - good, self._pos + good, problem)
            os.ftruncate(self._fd, self._pos + good)
            os.fsync(self._fd)
        self._pos += good

    def _check_header(self, header: StoreRecord | None, problem: str | None) -> None:
        if header is None or header.get("op") != "hdr" or header.get("format") != FORMAT_NAME:
            raise StorageError(f"{self.path} is not a metaq recover store ({problem or 'no header'}); "
                               "move it away")
        if header.get("version") != FORMAT_VERSION:
            raise StorageError(f"{self.path}: unsupported recover store version {header.get('version')!r}")

    def _apply(self, record: StoreRecord) -> None:
        op = record.get("op")
        entry_id = record.get("id")
        self._records += 1
        try:
            if op == "put":
                entry = RecoverEntry._from_record(record)
                self._entries[entry.id] = entry
            elif op == "upd" and isinstance(entry_id, str) and entry_id in self._entries:
                self._entries[entry_id] = replace(self._entries[entry_id], attempts=record_int(record["attempts"]),
                                                  last_error=str(record["last_error"]), dead=bool(record["dead"]))
            elif op == "del" and isinstance(entry_id, str):
                self._entries.pop(entry_id, None)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("recover store %s: ignoring a malformed %r record: %r", self.path, op, e)

    def _write(self, records: Sequence[StoreRecord]) -> None:
        """Append frames and fsync them; a failed write is cut off again so the log stays parseable."""
        data = b"".join(_frame(r) for r in records)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._pos)
            raise StorageError(f"cannot append to recover store {self.path}: {e.strerror or e}") from e
        self._pos += len(data)

    def _maybe_compact(self) -> None:
        garbage = self._records - len(self._entries)
        if garbage > max(COMPACT_MIN_GARBAGE, len(self._entries)):
            self._compact()

    def _compact(self) -> None:
        frames = [_frame(self._header())] + [_frame(e._record()) for e in self._entries.values()]
        before = self._records
        atomic_write(self.path, b"".join(frames))  # tmp + fsync + rename + directory fsync
        self._reopen()
        log.info("recover store %s compacted: %d records -> %d entries", self.path, before, len(self._entries))
