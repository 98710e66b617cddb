"""A fast decoder of record batch v2 (magic 2) bytes, as a Fetch response carries them, and of the v0/v1
message sets of Kafka 0.8-0.10 mixed in (runs of them are read by metaq/protocol/legacy.py).

    result = decode_records(partition.records, min_offset=fetch_offset)
    result.records        # [(offset, timestamp, key, value, headers), ...] at or above min_offset
    result.next_offset    # offset after the last complete batch (None: no complete batch)
    result.first_batch_size  # size of the first batch even if cut off: the "message too large" check
    decode_columns(data, fetch_offset).columns  # the same records as lists per field (columnar readers)

A fetch may start with a batch that holds offsets below the one asked for, and usually ends with a batch cut
off by the size limit; both are normal. Control batches (transaction markers) are skipped but still advance
``next_offset``. A v0/v1 entry counts as a batch here (a compressed one holds many records); its records
have no headers and, in v0, the timestamp -1. Anything malformed (bad CRC, bad varint, lengths that do
not add up, a codec that fails or is not installed) raises :class:`CorruptRecordError` naming the batch
position and base offset; no other exception type escapes.

Speed: the records of a batch are read by aiokafka's compiled (Cython) v2 reader, ``DefaultRecordBatch`` from
``aiokafka.record._crecords``, which bounds-checks every field: about 0.35 us a 100-byte record with the
tuples built, against 0.8 us for the pure-Python loop of metaq/protocol/record_loops.py (``python -m
bench.decode``). aiokafka ships that reader as wheels for CPython 3.10-3.14 on manylinux x86_64/aarch64, macOS
and Windows, but not for musllinux (Alpine), where its sdist may install without the extension; there, and on
any interpreter where the import fails, the pure-Python loop (varint reads inlined, one table lookup for the
1- and 2-byte varints that dominate) does the same work. :data:`COMPILED` says which one runs.

The two agree on every well-formed batch and refuse the same malformed ones but for two differences: a key
or value length below -1 reads as null in aiokafka (as in Kafka's ``DefaultRecord``), as corrupt in the
pure-Python loop (as in librdkafka); and aiokafka reads a record's attributes byte (unused: every client
writes 0) as a varint, so one of 0x80 or more shifts the fields after it, which then nearly always fail
the record's length check.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from crc32c import crc32c

from metaq.errors import CorruptRecordError, InvalidRecordError
from metaq.protocol import legacy
from metaq.protocol.batches import BATCH_HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH
from metaq.protocol.compression import codec_name, decompress
from metaq.protocol.record_loops import _NO_HEADERS, _check_records_python, _read_records
from metaq.protocol.record_types import Headers, Record

try:  # the compiled record reader (see the module doc); the pure-Python loop (record_loops.py) without it
    from aiokafka.errors import CorruptRecordException as _CompiledCorruptError
    from aiokafka.record._crecords.default_records import DefaultRecordBatch as _CompiledBatch
except ImportError:  # pragma: no cover - every platform with an aiokafka wheel has the extension
    _CompiledBatch = None
    _CompiledCorruptError = CorruptRecordError

__all__ = ["COMPILED", "ColumnsResult", "DecodeResult", "RecordColumns", "check_records", "codec_decoder",
           "decode_columns", "decode_records"]

COMPILED = _CompiledBatch is not None
"""Whether batches are read by aiokafka's compiled reader (else by the pure-Python loop)."""

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">i")
_MAGIC_POS = 16
_CRC_START = 21
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20
_ATTRIBUTES_LOW_BYTE = 22  # attributes is a big-endian int16 at 21; its codec bits are in this byte
_SLACK = 32
"""Readable bytes the compiled reader needs after a batch (see :func:`_compiled_batch`)."""
_PADDING = bytes(_SLACK)


class DecodeResult(NamedTuple):
    records: list[Record]
    next_offset: int | None
    """Offset after the last complete batch, control batches included; None without a complete batch."""
    complete_bytes: int
    """Bytes taken by complete batches; the rest is a batch cut off by the fetch size."""
    first_batch_size: int | None
    """Total size of the first batch as its length field says, even if cut off; None if that field is."""


def decode_records(buf: bytes | bytearray | memoryview, min_offset: int = 0, *,
                   check_crcs: bool = True) -> DecodeResult:
    """Decode every complete batch in ``buf``; records below ``min_offset`` are left out (see module doc)."""
    records: list[Record] = []
    return DecodeResult(records, *_decode_all(buf, min_offset, check_crcs, records))


class RecordColumns:
    """Decoded records as one list per field, for readers that build columns (Arrow batches): a tuple per
    record costs about as much as decoding it, and a million tuples keep the garbage collector busy (ints
    and bytes it does not track). ``headers`` is None when they were not asked for. Iterating gives
    :data:`Record` tuples, with no headers when they were left out."""

    __slots__ = ("headers", "keys", "offsets", "timestamps", "values")

    def __init__(self, with_headers: bool = True) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[Headers] | None = [] if with_headers else None

    @classmethod
    def from_records(cls, records: Iterable[Record], with_headers: bool = True) -> RecordColumns:
        columns = cls(with_headers)
        columns.extend(records)
        return columns

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[Record]:
        headers = [_NO_HEADERS] * len(self) if self.headers is None else self.headers
        return zip(self.offsets, self.timestamps, self.keys, self.values, headers, strict=True)

    def extend(self, records: Iterable[Record]) -> None:
        for offset, timestamp, key, value, headers in records:
            self.offsets.append(offset)
            self.timestamps.append(timestamp)
            self.keys.append(key)
            self.values.append(value)
            if self.headers is not None:
                self.headers.append(headers)

    def delete(self, start: int, stop: int | None = None) -> None:
        """Drop the records at positions ``[start, stop)``."""
        for column in (self.offsets, self.timestamps, self.keys, self.values, self.headers):
            if column is not None:
                del column[start:stop]

    def _read_compiled(self, batch: _CompiledBatch) -> None:
        """Append the records of aiokafka's reader, field by field."""
        offsets, timestamps, keys, values = (self.offsets.append, self.timestamps.append, self.keys.append,
                                             self.values.append)
        if self.headers is None:
            for record in batch:
                offsets(record.offset)
                timestamps(record.timestamp)
                keys(record.key)
                values(record.value)
            return
        headers, no_headers = self.headers.append, _NO_HEADERS
        for record in batch:
            offsets(record.offset)
            timestamps(record.timestamp)
            keys(record.key)
            values(record.value)
            found = record.headers
            headers(tuple(found) if found else no_headers)


class ColumnsResult(NamedTuple):
    """:class:`DecodeResult` with the records as :class:`RecordColumns`."""

    columns: RecordColumns
    next_offset: int | None
    complete_bytes: int
    first_batch_size: int | None


def decode_columns(buf: bytes | bytearray | memoryview, min_offset: int = 0, *, with_headers: bool = True,
                   check_crcs: bool = True) -> ColumnsResult:
    """:func:`decode_records` giving the records column by column (headers only ``with_headers``)."""
    columns = RecordColumns(with_headers)
    return ColumnsResult(columns, *_decode_all(buf, min_offset, check_crcs, columns))


def _decode_all(buf: bytes | bytearray | memoryview, min_offset: int, check_crcs: bool,
                out: list[Record] | RecordColumns) -> tuple[int | None, int, int | None]:
    """Decode every complete batch into ``out``: (next offset, complete bytes, first batch size)."""
    data = buf if type(buf) is bytes else bytes(buf)
    end = len(data)
    next_offset: int | None = None
    first_batch_size: int | None = None
    pos = 0
    while end - pos >= LOG_OVERHEAD:
        (length,) = _LENGTH.unpack_from(data, pos + 8)
        size = length + LOG_OVERHEAD
        if first_batch_size is None:
            first_batch_size = size
        if end - pos > _MAGIC_POS and data[pos + _MAGIC_POS] < 2:  # a run of v0/v1 entries (legacy.py)
            legacy_out = out if type(out) is list else []
            pos, after = legacy.decode_run(data, pos, end, min_offset, check_crcs, legacy_out)
            if legacy_out is not out:
                out.extend(legacy_out)
            if after is None:
                break  # its first entry is cut off by the fetch size
            next_offset = after
            continue
        _check_prefix(data, pos, length)
        if pos + size > end:
            break  # the fetch size cut this batch off: normal, fetched again next time
        next_offset = _decode_batch(data, pos, size, min_offset, check_crcs, out)
        pos += size
    return next_offset, pos, first_batch_size


def _check_prefix(data: bytes, pos: int, length: int) -> None:
    """What can be checked of a v2 batch before all of it has arrived: its length and magic byte (v0/v1
    entries never get here when their magic byte has arrived; before it, only the smallest size holds)."""
    if len(data) <= pos + _MAGIC_POS:
        if length < legacy.MIN_MESSAGE_SIZE[0]:
            raise CorruptRecordError(f"batch at byte {pos}: length {length} is below that of any message")
        return
    magic = data[pos + _MAGIC_POS]
    if magic != 2:
        raise CorruptRecordError(f"batch at byte {pos}: unknown magic byte {magic}")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at byte {pos}: batch length {length} is below the minimum {MIN_BATCH_LENGTH}")


def _decode_batch(data: bytes, pos: int, size: int, min_offset: int, check_crcs: bool,
                  out: list[Record] | RecordColumns) -> int:
    """Append the batch's records at or above ``min_offset`` to ``out``; return the batch's next offset."""
    if isinstance(out, RecordColumns) and _CompiledBatch is None:  # the pure-Python loop makes tuples
        records: list[Record] = []
        after = _decode_batch(data, pos, size, min_offset, check_crcs, records)
        out.extend(records)
        return after
    (base_offset, _length, _epoch, _magic, crc, attributes, last_delta, base_ts, max_ts,
     _pid, _pepoch, _seq, count) = _HEADER.unpack_from(data, pos)
    batch_end = pos + size
    if check_crcs:
        computed = crc32c(memoryview(data)[pos + _CRC_START:batch_end])
        if computed != crc:
            raise CorruptRecordError(
                f"batch at byte {pos} (base offset {base_offset}): CRC mismatch "
                f"(stored {crc:#010x}, computed {computed:#010x})")
    next_offset: int = base_offset + last_delta + 1
    if attributes & _CONTROL or next_offset <= min_offset or count == 0:
        return next_offset
    if count < 0:
        raise CorruptRecordError(f"batch at byte {pos} (base offset {base_offset}): negative record count {count}")
    body, start, stop = data, pos + BATCH_HEADER_SIZE, batch_end
    codec = attributes & _COMPRESSION_MASK
    if codec:
        body = _decompress(codec, data[start:stop], pos, base_offset)
        start, stop = 0, len(body)
    first = len(out)
    try:
        if isinstance(out, RecordColumns):  # only with the compiled reader, see above
            out._read_compiled(_compiled_batch(data, pos, size, body if codec else None))
        elif _CompiledBatch is not None:  # applies LogAppendTime itself
            _read_compiled(_compiled_batch(data, pos, size, body if codec else None), out)
        else:
            _read_records(body, start, stop, count, base_offset, base_ts, out)
    except CorruptRecordError as e:
        _delete(out, first)
        raise CorruptRecordError(f"batch at byte {pos} (base offset {base_offset}): {e}") from None
    except _CompiledCorruptError as e:
        _delete(out, first)
        raise CorruptRecordError(f"batch at byte {pos} (base offset {base_offset}): malformed record "
                                 f"({_reader_error(e)}; the record count says {count})") from None
    except (IndexError, ValueError, OverflowError, MemoryError) as e:  # bytes ran out, bad UTF-8, absurd sizes
        _delete(out, first)
        raise CorruptRecordError(
            f"batch at byte {pos} (base offset {base_offset}): malformed record ({type(e).__name__}: {e})"
        ) from None
    if not isinstance(out, RecordColumns):
        if attributes & _LOG_APPEND_TIME and _CompiledBatch is None:  # the broker's time, the same for the batch
            out[first:] = [(offset, max_ts, key, value, headers) for offset, _, key, value, headers in out[first:]]
        if base_offset < min_offset:
            _drop_below(out, first, min_offset)
    elif base_offset < min_offset:
        out.delete(first, bisect.bisect_left(out.offsets, min_offset, lo=first))
    return next_offset


def _delete(out: list[Record] | RecordColumns, first: int) -> None:
    """Forget the records of a batch that failed half-way."""
    if isinstance(out, RecordColumns):
        out.delete(first)
    else:
        del out[first:]


def _compiled_batch(data: bytes, pos: int, size: int, body: bytes | None = None) -> _CompiledBatch:
    """aiokafka's reader over the batch at ``data[pos:pos + size]``, or over its header and ``body`` (its
    records, decompressed by us: our codec table and size limit, not aiokafka's) with the codec bits cleared.

    The reader checks that each field starts inside the batch, but reads a varint to its last byte, so a
    malformed one at the end can read up to 19 bytes past the batch before the next check refuses it. The
    bytes it reads must be ours: a batch with fewer than ``_SLACK`` bytes after it is copied with zero
    padding (at most one copy per fetch or produce request, the last batch's)."""
    if body is not None:
        header = bytearray(data[pos:pos + BATCH_HEADER_SIZE])
        header[_ATTRIBUTES_LOW_BYTE] &= ~_COMPRESSION_MASK & 0xFF
        padded = b"".join((header, body, _PADDING))
        return _CompiledBatch(memoryview(padded)[:BATCH_HEADER_SIZE + len(body)])
    end = pos + size
    if len(data) - end < _SLACK:
        return _CompiledBatch(memoryview(data[pos:end] + _PADDING)[:size])
    return _CompiledBatch(memoryview(data)[pos:end])


def _read_compiled(batch: _CompiledBatch, out: list[Record]) -> None:
    """Append the batch's records to ``out`` as (offset, timestamp, key, value, headers) tuples."""
    append = out.append
    no_headers = _NO_HEADERS
    for record in batch:
        headers = record.headers
        append((record.offset, record.timestamp, record.key, record.value,
                tuple(headers) if headers else no_headers))


def _drop_below(out: list[Record], first: int, min_offset: int) -> None:
    """Remove the batch's records (from index ``first``) below ``min_offset``; offsets rise within a batch."""
    cut = first
    while cut < len(out) and out[cut][0] < min_offset:
        cut += 1
    del out[first:cut]



def _reader_error(e: Exception) -> str:
    """What the compiled reader said, without aiokafka's "[Error 2] CorruptRecordException:" prefix."""
    if isinstance(e, _CompiledCorruptError) and e.args:
        return str(e.args[0])
    return f"{type(e).__name__}: {e}"


def check_records(data: bytes, pos: int, stop: int, count: int) -> int:
    """Walk the ``count`` records of one batch in ``data[pos:stop]``, as a broker must before appending
    them: each record must be well formed (its fields end where its length says, UTF-8 header keys), the
    i-th record's offset delta must be i, and the records must fill ``data[pos:stop]`` exactly. Returns the
    largest timestamp delta. Raises InvalidRecordError naming the record.

    The compiled reader reads the records behind a header of our own (base offset and timestamp 0, so it
    yields the deltas), on a copy: about 0.2 us a 100-byte record, against 0.7 us for
    :func:`_check_records_python`, which every batch it accepts also decodes in."""
    if _CompiledBatch is None or count < 1:
        return _check_records_python(data, pos, stop, count)
    header = _HEADER.pack(0, 0, -1, 2, 0, 0, count - 1, 0, 0, -1, -1, -1, count)
    buf = b"".join((header, memoryview(data)[pos:stop], _PADDING))  # padded: see _compiled_batch
    i = 0
    max_delta = -(1 << 63)
    try:
        for record in _CompiledBatch(memoryview(buf)[:len(buf) - _SLACK]):
            if record.offset != i:
                raise InvalidRecordError(f"record {i}: offset delta {record.offset}, expected {i}")
            delta = record.timestamp
            if delta > max_delta:
                max_delta = delta
            i += 1
    except InvalidRecordError:
        raise
    except (_CompiledCorruptError, ValueError, OverflowError, MemoryError) as e:  # bad UTF-8, absurd sizes
        where = f"record {i}" if i < count else f"after the {count} records the record count says"
        raise InvalidRecordError(f"{where}: malformed ({_reader_error(e)})") from None
    return max_delta



def codec_decoder(codec: int) -> tuple[str, Callable[[bytes], bytes]]:
    """(name, decompressor) for a codec id (every codec decompresses through cramjam, see
    metaq/protocol/compression.py), or UnsupportedCompressionError (a CorruptRecordError) for an unknown id."""
    name = codec_name(codec)
    return name, lambda payload: decompress(codec, payload)


def _decompress(codec: int, payload: bytes, pos: int, base_offset: int) -> bytes:
    try:
        return decompress(codec, payload)
    except CorruptRecordError as e:
        raise type(e)(f"batch at byte {pos} (base offset {base_offset}): cannot decompress: {e}") from e
