"""The recover store's on-disk format: file names, frames ``[u32 length][u32 crc32][msgpack map]``, entries.

See :mod:`metaq.consumer.recover` for the layout of a store.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import msgpack

from metaq.consumer.message import MessageAndMetadata
from metaq.errors import StorageError

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

StoreRecord = dict[str, object]
"""One frame of a store file, decoded: a msgpack map by field name (``op`` says which: hdr, put, upd, del). Read
back from disk, each field is checked where it is used; a record that does not check out is skipped."""


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

    def _record(self) -> StoreRecord:
        return {"op": "put", "id": self.id, "topic": self.topic, "partition": self.partition,
                "offset": self.offset, "key": self.key, "value": self.value, "timestamp": self.timestamp,
                "headers": [list(h) for h in self.headers], "attempts": self.attempts,
                "last_error": self.last_error, "stored_at_ms": self.stored_at_ms, "dead": self.dead}

    @classmethod
    def _from_record(cls, rec: StoreRecord) -> RecoverEntry:
        """The entry of a ``put`` record; KeyError, TypeError or ValueError if it is malformed."""
        return cls(str(rec["id"]), str(rec["topic"]), record_int(rec["partition"]), record_int(rec["offset"]),
                   _stored_bytes(rec["key"]), _stored_bytes(rec["value"]), record_int(rec["timestamp"]),
                   tuple((str(name), _stored_bytes(value)) for name, value in _pairs(rec["headers"])),
                   record_int(rec["attempts"]), str(rec["last_error"]), record_int(rec["stored_at_ms"]),
                   bool(rec["dead"]))


def record_int(value: object) -> int:
    """An integer field of a store record, as ``int()`` reads the values msgpack decodes (TypeError for
    others: None, a list, a map)."""
    if isinstance(value, int | float | str | bytes):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(value).__name__}'")


def _stored_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    raise TypeError(f"expected bytes or nil, got {type(value).__name__}")


def _pairs(value: object) -> list[tuple[object, object]]:
    """The (name, value) pairs of a record's headers list."""
    if not isinstance(value, list | tuple):
        raise TypeError(f"'{type(value).__name__}' object is not a list of headers")
    pairs = []
    for item in value:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise ValueError(f"a header is not a (name, value) pair: {item!r}")
        pairs.append((item[0], item[1]))
    return pairs


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


def _raw(value: object, what: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return value if type(value) is bytes else bytes(value)
    raise TypeError(f"the recover store keeps raw bytes; the message {what} is a {type(value).__name__}")


def _frame(record: StoreRecord) -> bytes:
    body: bytes = msgpack.packb(record, use_bin_type=True)
    return FRAME_HEADER.pack(len(body), zlib.crc32(body)) + body


class Parsed(NamedTuple):
    """What :func:`_parse` read from the start of a store file's bytes."""

    records: list[StoreRecord]
    """The complete, valid records."""
    end: int
    """Where they end (the bytes after it are dropped)."""
    problem: str | None
    """Why parsing stopped before the end of the data, or None."""


def _parse(data: bytes) -> Parsed:
    """The complete, valid records at the start of ``data``, where they end, and why parsing stopped early."""
    records: list[StoreRecord] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < FRAME_HEADER.size:
            return Parsed(records, pos, "incomplete frame header")
        length, crc = FRAME_HEADER.unpack_from(data, pos)
        if length > MAX_FRAME_BYTES:
            return Parsed(records, pos, f"frame length {length} is not plausible")
        end = pos + FRAME_HEADER.size + length
        if end > len(data):
            return Parsed(records, pos, f"frame of {length} bytes is incomplete")
        body = data[pos + FRAME_HEADER.size:end]
        if zlib.crc32(body) != crc:
            return Parsed(records, pos, "crc mismatch")
        try:
            record = msgpack.unpackb(body, raw=False)
        except Exception as e:  # msgpack raises several ValueError subclasses and others
            return Parsed(records, pos, f"undecodable record ({type(e).__name__})")
        if not isinstance(record, dict) or "op" not in record:
            return Parsed(records, pos, "not a store record")
        records.append(record)
        pos = end
    return Parsed(records, pos, None)


def _now_ms() -> int:
    return int(time.time() * 1000)
