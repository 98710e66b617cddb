"""The local recover store: messages a listener kept failing on, set aside so that their partition moves on.

    store = RecoverStore.open("~/.metaq_recover", "clicks", "etl")
    entry_id = store.append(message, error)           # flushed and fsynced before the caller skips the message
    [entry] = store.list()                              # RecoverEntry(id, topic, partition, offset, ..., attempts)
    store.replay(handler, max_attempts=20)              # ReplayResult(succeeded=1, failed=0, dead=0)
    store.drop()                                        # everything; or drop([ids])
    store.close()

MetaQ's ``RecoverStorageManager`` (docs/delivery-guarantees.md §3), with its weaknesses fixed: an entry whose
replay keeps failing is counted and, at ``max_attempts``, marked *dead* (kept, listed, no longer replayed
automatically) instead of being retried forever; a failing entry never stops a replay pass (MetaQ #99/#111).

One store per ``<topic>@<group>`` in a directory (``metaq.recover.dir``, default ``~/.metaq_recover``):

- ``<topic>@<group>.recover``: an append-only log of frames ``[u32 length][u32 crc32][msgpack map]``. The
  first frame is a header (format name, version, topic, group); then ``put`` (a whole entry), ``upd``
  (attempts, last error, dead flag) and ``del`` (a removal tombstone) records. Every append is flushed and
  fsynced before the call returns. A torn last frame (a crash mid-append) is dropped with a warning and
  cut off, as Kafka's log recovery does. Opening the store compacts it when it holds superseded records:
  the live entries are rewritten to a temp file, fsynced, renamed over the log, and the directory fsynced.
- ``<topic>@<group>.lock`` and ``.replay.lock``: ``flock`` locks. Several consumer processes of one group on
  one host share the store safely: every operation takes the first lock and first reads what the others
  appended (or reloads after another process compacted); only one process at a time runs a replay pass.

Within a process a store is thread-safe. Keys and values are stored as the raw bytes that were fetched.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

import msgpack

from metaq.consumer.message import MessageAndMetadata
from metaq.errors import StorageError
from metaq.fileio import atomic_write

log = logging.getLogger(__name__)

DEFAULT_DIR = "~/.metaq_recover"
SUFFIX = ".recover"
FORMAT_NAME = "metaq-recover"
FORMAT_VERSION = 1
FRAME_HEADER = struct.Struct(">II")  # body length, crc32 of the body
MAX_FRAME_BYTES = 1 << 30  # a larger length field can only be a torn or corrupt frame
LOCK_TIMEOUT_S = 30.0  # other processes hold the store lock only for one append or one compaction
LOCK_POLL_S = 0.01
COMPACT_MIN_GARBAGE = 1000  # superseded records tolerated at run time before compacting
MAX_ERROR_CHARS = 2000
_NAME = re.compile(r"[A-Za-z0-9._-]+")

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class RecoverEntry:
    """One message set aside. ``attempts`` counts failed replays (0 when stored); ``dead`` ones are no
    longer replayed automatically."""

    id: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers
    attempts: int
    last_error: str
    stored_at_ms: int
    dead: bool = False

    def to_message(self) -> MessageAndMetadata:
        return MessageAndMetadata(self.topic, self.partition, self.offset, self.key, self.value,
                                  self.timestamp, self.headers)

    def _record(self) -> dict[str, Any]:
        return {"op": "put", "id": self.id, "topic": self.topic, "partition": self.partition,
                "offset": self.offset, "key": self.key, "value": self.value, "timestamp": self.timestamp,
                "headers": [list(h) for h in self.headers], "attempts": self.attempts,
                "last_error": self.last_error, "stored_at_ms": self.stored_at_ms, "dead": self.dead}

    @classmethod
    def _from_record(cls, rec: dict[str, Any]) -> RecoverEntry:
        return cls(str(rec["id"]), str(rec["topic"]), int(rec["partition"]), int(rec["offset"]),
                   rec["key"], rec["value"], int(rec["timestamp"]),
                   tuple((str(name), value) for name, value in rec["headers"]),
                   int(rec["attempts"]), str(rec["last_error"]), int(rec["stored_at_ms"]), bool(rec["dead"]))


@dataclass(frozen=True)
class ReplayResult:
    """What one replay pass did: entries redelivered and removed, failed again (kept), newly marked dead.
    ``busy`` means another thread or process was replaying this store, so this pass did nothing."""

    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    busy: bool = False


def default_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """``directory`` (``metaq.recover.dir``) or ``~/.metaq_recover``, with ``~`` expanded."""
    return Path(os.path.expanduser(os.fspath(directory if directory is not None else DEFAULT_DIR)))


def store_name(topic: str, group: str) -> str:
    """``<topic>@<group>``; both use Kafka's name characters, so the split on ``@`` is unambiguous."""
    for what, name in (("topic", topic), ("group", group)):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise StorageError(f"recover store: invalid {what} name {name!r} (allowed: letters, digits, '._-')")
    return f"{topic}@{group}"


def recover_stores(directory: str | os.PathLike[str] | None = None) -> list[tuple[str, str]]:
    """The ``(topic, group)`` of every store in ``directory`` (for the ops CLI); empty if it does not exist."""
    root = default_dir(directory)
    if not root.is_dir():
        return []
    found = []
    for path in root.glob(f"*@*{SUFFIX}"):
        topic, _, group = path.name[: -len(SUFFIX)].partition("@")
        if _NAME.fullmatch(topic) and _NAME.fullmatch(group):
            found.append((topic, group))
    return sorted(found)


def describe_error(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


def _raw(value: Any, what: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"the recover store keeps raw bytes; the message {what} is a {type(value).__name__}")


def _frame(record: dict[str, Any]) -> bytes:
    body: bytes = msgpack.packb(record, use_bin_type=True)
    return FRAME_HEADER.pack(len(body), zlib.crc32(body)) + body


def _parse(data: bytes) -> tuple[list[dict[str, Any]], int, str | None]:
    """The complete, valid records at the start of ``data``, where they end, and why parsing stopped early."""
    records: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < FRAME_HEADER.size:
            return records, pos, "incomplete frame header"
        length, crc = FRAME_HEADER.unpack_from(data, pos)
        if length > MAX_FRAME_BYTES:
            return records, pos, f"frame length {length} is not plausible"
        end = pos + FRAME_HEADER.size + length
        if end > len(data):
            return records, pos, f"frame of {length} bytes is incomplete"
        body = data[pos + FRAME_HEADER.size:end]
        if zlib.crc32(body) != crc:
            return records, pos, "crc mismatch"
        try:
            record = msgpack.unpackb(body, raw=False)
        except Exception as e:  # msgpack raises several ValueError subclasses and others
            return records, pos, f"undecodable record ({type(e).__name__})"
        if not isinstance(record, dict) or "op" not in record:
            return records, pos, "not a store record"
        records.append(record)
        pos = end
    return records, pos, None


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
            return ReplayResult(**counts)

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

    def _header(self) -> dict[str, Any]:
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

    def _check_header(self, header: dict[str, Any] | None, problem: str | None) -> None:
        if header is None or header.get("op") != "hdr" or header.get("format") != FORMAT_NAME:
            raise StorageError(f"{self.path} is not a metaq recover store ({problem or 'no header'}); "
                               "move it away")
        if header.get("version") != FORMAT_VERSION:
            raise StorageError(f"{self.path}: unsupported recover store version {header.get('version')!r}")

    def _apply(self, record: dict[str, Any]) -> None:
        op = record.get("op")
        entry_id = record.get("id")
        self._records += 1
        try:
            if op == "put":
                entry = RecoverEntry._from_record(record)
                self._entries[entry.id] = entry
            elif op == "upd" and entry_id in self._entries:
                self._entries[entry_id] = replace(self._entries[entry_id], attempts=int(record["attempts"]),
                                                  last_error=str(record["last_error"]), dead=bool(record["dead"]))
            elif op == "del":
                self._entries.pop(entry_id, None)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError) as e:
            log.warning("recover store %s: ignoring a malformed %r record: %r", self.path, op, e)

    def _write(self, records: list[dict[str, Any]]) -> None:
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


def _now_ms() -> int:
    return int(time.time() * 1000)


class RecoverManager:
    """Replays one store through the listener: first ``initial_delay_s`` after :meth:`start` (MetaQ: 5 s),
    then every ``interval_ms`` (``metaq.recover.interval.ms``). The thread never dies of a failing pass."""

    def __init__(
        self,
        store: RecoverStore,
        handler: Callable[[MessageAndMetadata], object],
        *,
        interval_ms: int,
        max_attempts: int,
        initial_delay_s: float = 5.0,
    ) -> None:
        self.store = store
        self._handler = handler
        self._interval_s = interval_ms / 1000.0
        self._initial_delay_s = initial_delay_s
        self._max_attempts = max_attempts
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.passes = 0
        self.last_result: ReplayResult | None = None
        self._thread = threading.Thread(target=self._run, name=f"metaq-recover-{store.topic}@{store.group}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def trigger(self) -> None:
        """Run a pass now instead of at the next interval."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop after the entry being replayed; False if the listener is still busy after ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)  # bounded: a listener stuck in user code cannot be interrupted
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            log.warning("%s: still running after %.1fs (listener busy); left behind", self._thread.name, timeout)
            return False
        return True

    def _run(self) -> None:
        delay = self._initial_delay_s
        while not self._stop.is_set():
            self._wake.wait(delay)  # woken early by trigger() or stop()
            self._wake.clear()
            if self._stop.is_set():
                return
            self._run_pass()
            delay = self._interval_s

    def _run_pass(self) -> None:
        try:
            result = self.store.replay(self._handler, max_attempts=self._max_attempts,
                                       should_stop=self._stop.is_set)
        except Exception:
            log.exception("%s: replay pass failed; next one in %.1fs", self._thread.name, self._interval_s)
            return
        self.passes += 1
        self.last_result = result
        if result.succeeded or result.failed or result.dead:
            log.info("%s: replayed %d, failed %d, newly dead %d", self._thread.name, result.succeeded,
                     result.failed, result.dead)
