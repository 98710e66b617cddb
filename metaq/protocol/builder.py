"""Building record batches v2 (magic 2) fast, for the producer and the broker's own logs.

Byte-identical to kafka-python's DefaultRecordBatchBuilder. :class:`BatchBuilder` appends with aiokafka's
compiled (Cython) builder, about 0.15 us a 100-byte record against 1.5 us for the pure-Python
:class:`PyBatchBuilder` (varints of small values from a table, a record is four buffer appends), which runs
only where aiokafka was installed without its extension (see metaq/protocol/records.py). Compression stays
ours (cramjam, metaq/protocol/compression.py): the compiled builder writes an uncompressed batch and
``build()`` compresses its records and rewrites the header.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import crc32c

from metaq.protocol.compression import codec_id, compress

try:
    from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder as _CompiledBuilder
except ImportError:  # pragma: no cover - every platform with an aiokafka wheel has the extension
    _CompiledBuilder = None

Header = tuple[str, bytes | None]


class Added(Protocol):
    """What a builder's ``add`` answers for a record it took: the compiled builder's own small object (not
    tracked by the cyclic GC) or :class:`AddedRecord`."""

    @property
    def offset(self) -> int: ...  # the record's index in its batch
    @property
    def size(self) -> int: ...  # the bytes it took
    @property
    def timestamp(self) -> int: ...  # its timestamp (ms), stamped by the builder when none was given


class AddedRecord(NamedTuple):
    """:class:`PyBatchBuilder`'s answer to ``add``, shaped like the compiled builder's."""

    offset: int
    size: int
    timestamp: int

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte record batch v2 header (docs/wire-protocol.md §2)
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_LEADER_EPOCH_OFFSET = 12  # outside the CRC, which covers the batch from its attributes on
_ZERO_EPOCH = bytes(4)
_ATTRIBUTES_OFFSET = 21
_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_OFFSET = 57  # the header's last field


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_VARINTS = [_zigzag_varint(i) for i in range(1 << 14)]  # lengths and deltas are almost always small
_NVARINTS = len(_VARINTS)


def varint(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < _NVARINTS else _zigzag_varint(value)


class PyBatchBuilder:
    """Builds one record batch v2 (magic 2) without a producer id, compressed with the ``compression.type``
    codec (metaq/protocol/compression.py) when that makes it smaller.

    Byte-identical to kafka-python's DefaultRecordBatchBuilder and about 3x faster: varints of small values come
    from a table, and a record is four buffer appends.
    """

    __slots__ = ("_buf", "_count", "_first_ts", "_max_ts", "_limit", "_compression")

    def __init__(self, batch_size: int, compression: str = "none") -> None:
        self._buf = bytearray(BATCH_HEADER.size)
        self._count = 0
        self._first_ts = 0
        self._max_ts = 0
        self._limit = batch_size
        self._compression = codec_id(compression)

    @property
    def count(self) -> int:
        return self._count

    @property
    def size(self) -> int:
        return len(self._buf)

    @property
    def full(self) -> bool:
        return len(self._buf) >= self._limit

    def append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] | None = None,
               _table: list[bytes] = _VARINTS, _n: int = _NVARINTS) -> int:
        """Add a record: the bytes it took, or 0 (and nothing added) if it would overflow the batch. A first
        record always fits. A ``timestamp`` of None is now."""
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        count = self._count
        delta = timestamp - self._first_ts if count else 0
        if key is None:
            key_part = b"\x01"  # varint(-1): null
        else:
            size = len(key)
            key_part = (_table[size] if size < _n else _zigzag_varint(size)) + key
        if value is None:
            value_len = b"\x01"
            value = b""
        else:
            size = len(value)
            value_len = _table[size] if size < _n else _zigzag_varint(size)
        head = b"".join((b"\x00",  # record attributes
                         _table[delta] if 0 <= delta < _n else _zigzag_varint(delta),
                         _table[count] if count < _n else _zigzag_varint(count),
                         key_part, value_len))
        tail = b"\x00" if not headers else encode_headers(headers)
        length = len(head) + len(value) + len(tail)
        prefix = _table[length] if length < _n else _zigzag_varint(length)
        buf = self._buf
        added = len(prefix) + length
        if count and len(buf) + added > self._limit:
            return 0
        buf += prefix
        buf += head
        buf += value
        buf += tail
        if not count:
            self._first_ts = self._max_ts = timestamp
        elif timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count = count + 1
        return added

    def add(self, offset: int, timestamp: int | None, key: bytes | None, value: bytes | None,
            headers: list[Header]) -> AddedRecord | None:
        """:meth:`append` with the compiled builder's signature and answer (``offset`` is the record's index,
        0, 1, 2...; a ``timestamp`` of None is now): None if the batch is full."""
        if offset != self._count:
            raise ValueError(f"record offset {offset} out of order: the batch has {self._count} records")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        size = self.append(timestamp, key, value, headers)
        return AddedRecord(offset, size, timestamp) if size else None

    def build(self) -> bytes:
        """The finished batch (base offset 0; the broker assigns offsets)."""
        records = self._buf
        attributes = 0
        if self._compression and self._count:
            packed = compress(self._compression, bytes(memoryview(records)[BATCH_HEADER.size:]))
            if len(packed) < len(records) - BATCH_HEADER.size:
                records = bytearray(BATCH_HEADER.size) + packed
                attributes = self._compression
        BATCH_HEADER.pack_into(records, 0, 0, len(records) - 12, 0, 2, 0, attributes, max(self._count - 1, 0),
                               self._first_ts, self._max_ts, -1, -1, -1, self._count)
        _CRC.pack_into(records, _CRC_OFFSET, crc32c.crc32c(memoryview(records)[_ATTRIBUTES_OFFSET:]))
        return bytes(records)


_NO_HEADERS: list[Header] = []  # only read by the compiled builder, never changed


class CompiledBatchBuilder:
    """:class:`PyBatchBuilder`'s interface and bytes, appending with aiokafka's compiled builder."""

    __slots__ = ("_builder", "_count", "_limit", "_compression", "_built", "add")

    def __init__(self, batch_size: int, compression: str = "none") -> None:
        assert _CompiledBuilder is not None
        self._builder = _CompiledBuilder(2, 0, 0, -1, -1, -1, batch_size)
        self._count = 0
        self.add: Callable[[int, int | None, bytes | None, bytes | None, list[Header]], Added | None] = (
            self._builder.append)
        """The compiled append itself, for a caller that counts its records (the producer): ``add(offset,
        timestamp, key, value, headers)`` with offsets 0, 1, 2... in order, headers a list and a timestamp of
        None stamped now (in C); None if the batch is full. No Python frame runs per record. Records added so
        are not in :attr:`count`."""
        self._limit = batch_size
        self._compression = codec_id(compression)
        self._built: bytes | None = None

    @property
    def count(self) -> int:
        """Records added with :meth:`append` (not :attr:`add`)."""
        return self._count

    @property
    def size(self) -> int:
        return int(self._builder.size())

    @property
    def full(self) -> bool:
        return int(self._builder.size()) >= self._limit

    def append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] | None = None) -> int:
        """Add a record: the bytes it took, or 0 (and nothing added) if it would overflow the batch. A first
        record always fits. A ``timestamp`` of None is now."""
        added = self._builder.append(self._count, timestamp, key, value, list(headers) if headers else _NO_HEADERS)
        if added is None:
            return 0
        self._count += 1
        return int(added.size)

    def build(self) -> bytes:
        """The finished batch (base offset 0; the broker assigns offsets)."""
        if self._built is None:
            self._built = self._finish(self._builder.build())
        return self._built

    def _finish(self, records: bytearray) -> bytes:
        """The compiled builder's uncompressed batch, compressed with our codec when that makes it smaller."""
        records[_LEADER_EPOCH_OFFSET:_LEADER_EPOCH_OFFSET + 4] = _ZERO_EPOCH  # aiokafka writes -1, kafka-python 0
        if not (self._compression and _RECORD_COUNT.unpack_from(records, _RECORD_COUNT_OFFSET)[0]):
            return bytes(records)
        packed = compress(self._compression, bytes(memoryview(records)[BATCH_HEADER.size:]))
        if len(packed) >= len(records) - BATCH_HEADER.size:
            return bytes(records)
        fields = list(BATCH_HEADER.unpack_from(records))
        out = bytearray(BATCH_HEADER.size) + packed
        fields[1], fields[5] = len(out) - 12, self._compression  # batch length, attributes
        BATCH_HEADER.pack_into(out, 0, *fields)
        _CRC.pack_into(out, _CRC_OFFSET, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
        return bytes(out)


_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_OFFSET = 43


def with_producer(batch: bytes, producer_id: int, epoch: int, base_sequence: int) -> bytes:
    """The batch as an idempotent producer sends it: its producer id, epoch and first record's sequence number
    in the header, the CRC computed again (these fields are inside it). One CRC-32C pass over the batch, done
    once per batch when it is first sent (a retry resends the same bytes)."""
    out = bytearray(batch)
    _PRODUCER.pack_into(out, _PRODUCER_OFFSET, producer_id, epoch, base_sequence)
    _CRC.pack_into(out, _CRC_OFFSET, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    return bytes(out)


_ATTRIBUTES = struct.Struct(">h")
_TRANSACTIONAL = 0x10


def as_transactional(batch: bytes, producer_id: int, epoch: int, base_sequence: int) -> bytes:
    """The batch as part of a transaction: :func:`with_producer` plus the transactional attribute (what a
    group coordinator writes for TxnOffsetCommit, docs/transactions.md section 2)."""
    out = bytearray(batch)
    (attributes,) = _ATTRIBUTES.unpack_from(out, _ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_OFFSET, attributes | _TRANSACTIONAL)
    return with_producer(bytes(out), producer_id, epoch, base_sequence)


AnyBatchBuilder = PyBatchBuilder | CompiledBatchBuilder
BatchBuilder: type[AnyBatchBuilder] = (
    PyBatchBuilder if _CompiledBuilder is None else CompiledBatchBuilder)
"""The builder metaq uses: the compiled one where aiokafka's extension is installed."""


def encode_headers(headers: Sequence[Header]) -> bytes:
    """A record's headers in the v2 record format (count, then name and value of each)."""
    parts = [varint(len(headers))]
    for h_key, h_value in headers:
        name = h_key.encode("utf-8")
        parts.append(varint(len(name)))
        parts.append(name)
        if h_value is None:
            parts.append(b"\x01")
        else:
            parts.append(varint(len(h_value)))
            parts.append(h_value)
    return b"".join(parts)
