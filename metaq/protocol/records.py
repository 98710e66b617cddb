"""A fast pure-Python decoder of record batch v2 (magic 2) bytes, as a Fetch response carries them.

    result = decode_records(partition.records, min_offset=fetch_offset)
    result.records        # [(offset, timestamp, key, value, headers), ...] at or above min_offset
    result.next_offset    # offset after the last complete batch (None: no complete batch)
    result.first_batch_size  # size of the first batch even if cut off: the "message too large" check

A fetch may start with a batch that holds offsets below the one asked for, and usually ends with a batch cut
off by the size limit; both are normal. Control batches (transaction markers) are skipped but still advance
``next_offset``. Anything malformed (bad CRC, bad varint, lengths that do not add up, a codec that fails or
is not installed) raises :class:`CorruptRecordError` naming the batch position and base offset; no other
exception type escapes.

Speed: records are decoded by one loop per batch with the varint reads inlined (one table lookup for the
1- and 2-byte varints that dominate, a function call only beyond that), so a 100-byte
record costs well under 2 microseconds. See ``bench/decode.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import kafka.codec
from crc32c import crc32c

from metaq.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
    UnsupportedMessageFormatError,
)
from metaq.protocol.batches import BATCH_HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH

if TYPE_CHECKING:  # a runtime import would load metaq.consumer, whose fetcher imports this module
    from metaq.consumer.partition_info import Record

__all__ = ["DecodeResult", "check_records", "codec_decoder", "decode_records"]

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">i")
_MAGIC_POS = 16
_CRC_START = 21
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20
_MAX_VARINT_BYTES = 10  # a varlong; Kafka's varints (5 bytes) are a subset

_ZIGZAG1 = tuple((b >> 1) ^ -(b & 1) for b in range(128))
"""Value of a 1-byte zigzag varint, by its byte."""
_BAD_LENGTH = 1 << 62
"""Stands for a negative length other than -1: moves the position far past the record, so the record's own
length check fails and the record is reported as corrupt (no extra test on the fast path)."""
_LENGTH1 = tuple(v if v >= 0 else _BAD_LENGTH for v in _ZIGZAG1)
"""Value of a 1-byte length varint by its byte, -1 (null, byte 1) handled before the lookup."""
_NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()
_ZIGZAG2 = tuple((r >> 1) ^ -(r & 1) for r in range(1 << 14))
"""Value of a 2-byte zigzag varint, by ``(second byte << 7) | (first byte & 0x7F)``."""
_LENGTH2 = tuple(v if v >= 0 else _BAD_LENGTH for v in _ZIGZAG2)
"""Value of a 2-byte length varint, negative lengths mapped to _BAD_LENGTH (-1 is never 2 bytes long)."""


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
    data = buf if type(buf) is bytes else bytes(buf)
    end = len(data)
    records: list[Record] = []
    next_offset: int | None = None
    first_batch_size: int | None = None
    pos = 0
    while end - pos >= LOG_OVERHEAD:
        (length,) = _LENGTH.unpack_from(data, pos + 8)
        size = length + LOG_OVERHEAD
        if first_batch_size is None:
            first_batch_size = size
        _check_prefix(data, pos, length)
        if pos + size > end:
            break  # the fetch size cut this batch off: normal, fetched again next time
        next_offset = _decode_batch(data, pos, size, min_offset, check_crcs, records)
        pos += size
    return DecodeResult(records, next_offset, pos, first_batch_size)


def _check_prefix(data: bytes, pos: int, length: int) -> None:
    """What can be checked of a batch before all of it has arrived: its length and magic byte."""
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at byte {pos}: batch length {length} is below the minimum {MIN_BATCH_LENGTH}")
    if len(data) > pos + _MAGIC_POS:
        magic = data[pos + _MAGIC_POS]
        if magic != 2:
            if magic in (0, 1):
                raise UnsupportedMessageFormatError(
                    f"batch at byte {pos}: message format v{magic} is not supported, only record batch v2")
            raise CorruptRecordError(f"batch at byte {pos}: unknown magic byte {magic}")


def _decode_batch(data: bytes, pos: int, size: int, min_offset: int, check_crcs: bool,
                  out: list[Record]) -> int:
    """Append the batch's records at or above ``min_offset`` to ``out``; return the batch's next offset."""
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
        _read_records(body, start, stop, count, base_offset, base_ts, out)
    except CorruptRecordError as e:
        del out[first:]
        raise CorruptRecordError(f"batch at byte {pos} (base offset {base_offset}): {e}") from None
    except (IndexError, ValueError, OverflowError, MemoryError) as e:  # bytes ran out, bad UTF-8, absurd sizes
        del out[first:]
        raise CorruptRecordError(
            f"batch at byte {pos} (base offset {base_offset}): malformed record ({type(e).__name__}: {e})"
        ) from None
    if attributes & _LOG_APPEND_TIME:  # the broker's append time, the same for the whole batch
        out[first:] = [(offset, max_ts, key, value, headers) for offset, _, key, value, headers in out[first:]]
    if base_offset < min_offset:
        _drop_below(out, first, min_offset)
    return next_offset


def _drop_below(out: list[Record], first: int, min_offset: int) -> None:
    """Remove the batch's records (from index ``first``) below ``min_offset``; offsets rise within a batch."""
    cut = first
    while cut < len(out) and out[cut][0] < min_offset:
        cut += 1
    del out[first:cut]


def _read_records(data: bytes, pos: int, stop: int, count: int, base_offset: int, base_ts: int,
                  out: list[Record]) -> None:
    """The hot loop: decode ``count`` records from ``data[pos:stop]`` into ``out``.

    Each varint is read inline: one byte (< 0x80) by table lookup, two bytes by a lookup in a 16384-entry
    table (timestamp deltas of 64 ms or more, 100-byte values), longer ones by :func:`_read_varint`. Length
    fields use tables that map negative lengths other than -1 to a huge value, so a bad length shows up in
    the per-record end check instead of costing a test of its own."""
    zigzag = _ZIGZAG1
    zigzag2 = _ZIGZAG2
    length1 = _LENGTH1
    length2 = _LENGTH2
    append = out.append
    no_headers = _NO_HEADERS
    read_varint = _read_varint
    for _ in range(count):
        # record length
        b = data[pos]
        if b < 0x80:
            record_end = pos + 1 + length1[b]
            pos += 2  # and the attributes byte, unused in v2
        else:
            b1 = data[pos + 1]
            if b1 < 0x80:
                record_end = pos + 2 + length2[(b1 << 7) | (b & 0x7F)]
                pos += 3
            else:
                n, pos = read_varint(data, pos)
                record_end = pos + (n if n >= 0 else _BAD_LENGTH)
                pos += 1
        # timestamp delta
        b = data[pos]
        if b < 0x80:
            timestamp = base_ts + zigzag[b]
            pos += 1
        else:
            b1 = data[pos + 1]
            if b1 < 0x80:
                timestamp = base_ts + zigzag2[(b1 << 7) | (b & 0x7F)]
                pos += 2
            else:
                n, pos = read_varint(data, pos)
                timestamp = base_ts + n
        # offset delta
        b = data[pos]
        if b < 0x80:
            offset = base_offset + zigzag[b]
            pos += 1
        else:
            b1 = data[pos + 1]
            if b1 < 0x80:
                offset = base_offset + zigzag2[(b1 << 7) | (b & 0x7F)]
                pos += 2
            else:
                n, pos = read_varint(data, pos)
                offset = base_offset + n
        # key
        b = data[pos]
        if b == 1:
            key = None
            pos += 1
        elif b < 0x80:
            n = length1[b]
            pos += 1
            key = data[pos:pos + n]
            pos += n
        else:
            n, pos = read_varint(data, pos)
            if n < 0:
                n = _BAD_LENGTH
            key = data[pos:pos + n]
            pos += n
        # value
        b = data[pos]
        if b < 0x80:
            if b == 1:
                value = None
                pos += 1
            else:
                n = length1[b]
                pos += 1
                value = data[pos:pos + n]
                pos += n
        else:
            b1 = data[pos + 1]
            if b1 < 0x80:
                n = length2[(b1 << 7) | (b & 0x7F)]
                pos += 2
            else:
                n, pos = read_varint(data, pos)
                if n < 0:
                    n = _BAD_LENGTH
            value = data[pos:pos + n]
            pos += n
        # headers
        if data[pos] == 0:
            headers = no_headers
            pos += 1
        else:
            headers, pos = _read_headers(data, pos)
        if pos != record_end:
            raise CorruptRecordError(
                f"record at offset {offset}: its fields end at byte {pos}, its length says {record_end}")
        append((offset, timestamp, key, value, headers))
    if pos != stop:
        raise CorruptRecordError(f"{count} records end at byte {pos} of {stop}: the record count is wrong")


def check_records(data: bytes, pos: int, stop: int, count: int) -> int:
    """Walk the ``count`` records of one batch in ``data[pos:stop]`` without copying keys or values, as a
    broker must before appending them: each record must be well formed (its fields end where its length
    says, null or non-negative key and value lengths, UTF-8 header keys), the i-th record's offset delta must
    be i, and the records must fill ``data[pos:stop]`` exactly. Returns the largest timestamp delta.

    Raises InvalidRecordError naming the record. The layout is read as :func:`_read_records` reads it, so
    every batch this walk accepts also decodes; it costs about as much (about 1 us a record), being the
    same loop without the copies but with the checks. ``pos`` only grows, so a record running past ``stop``
    is caught by the final check without a bound test per record."""
    zigzag = _ZIGZAG1
    zigzag2 = _ZIGZAG2
    read_varint = _read_varint
    max_delta = -(1 << 63)
    i = 0
    try:
        for i in range(count):
            b = data[pos]  # record length, then the attributes byte (unused in v2)
            if b < 0x80:
                record_end = pos + 1 + zigzag[b]
                pos += 2
            else:
                b1 = data[pos + 1]
                if b1 < 0x80:
                    record_end = pos + 2 + zigzag2[(b1 << 7) | (b & 0x7F)]
                    pos += 3
                else:
                    n, pos = read_varint(data, pos)
                    record_end = pos + n
                    pos += 1
            b = data[pos]  # timestamp delta
            if b < 0x80:
                delta = zigzag[b]
                pos += 1
            else:
                b1 = data[pos + 1]
                if b1 < 0x80:
                    delta = zigzag2[(b1 << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    delta, pos = read_varint(data, pos)
            if delta > max_delta:
                max_delta = delta
            b = data[pos]  # offset delta
            if b < 0x80:
                n = zigzag[b]
                pos += 1
            else:
                n, pos = read_varint(data, pos)
            if n != i:
                raise InvalidRecordError(f"record {i}: offset delta {n}, expected {i}")
            b = data[pos]  # key length
            if b < 0x80:
                n = zigzag[b]
                pos += 1
            else:
                n, pos = read_varint(data, pos)
            if n > 0:
                pos += n
            elif n < -1:
                raise InvalidRecordError(f"record {i}: negative key length {n}")
            b = data[pos]  # value length
            if b < 0x80:
                n = zigzag[b]
                pos += 1
            else:
                b1 = data[pos + 1]
                if b1 < 0x80:
                    n = zigzag2[(b1 << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    n, pos = read_varint(data, pos)
            if n > 0:
                pos += n
            elif n < -1:
                raise InvalidRecordError(f"record {i}: negative value length {n}")
            if data[pos] == 0:  # no headers
                pos += 1
            else:
                pos = _check_headers(data, pos, record_end)
            if pos != record_end:
                raise InvalidRecordError(f"record {i}: its fields end at byte {pos}, its length says {record_end}")
    except InvalidRecordError:
        raise
    except IndexError:
        raise InvalidRecordError(f"record {i}: the bytes end inside it (a wrong record count or length)") from None
    except (CorruptRecordError, ValueError) as e:  # a varint too long, a negative length, bad UTF-8
        raise InvalidRecordError(f"record {i}: malformed ({type(e).__name__}: {e})") from None
    if pos != stop:
        raise InvalidRecordError(f"{count} records end at byte {pos} of {stop}: the record count is wrong")
    return max_delta


def _check_headers(data: bytes, pos: int, record_end: int) -> int:
    """Position after a record's headers; the count is bounded by the record's size before they are read."""
    count, after = _read_varint(data, pos)
    if count < 0 or 2 * count > record_end - after:  # each header takes at least two bytes
        raise InvalidRecordError(f"header count {count} does not fit the record")
    return _read_headers(data, pos)[1]


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint/varlong at ``pos``: (value, position after it)."""
    raw = 0
    shift = 0
    for i in range(pos, pos + _MAX_VARINT_BYTES):
        b = data[i]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), i + 1
        shift += 7
    raise CorruptRecordError(f"malformed varint at byte {pos}: more than {_MAX_VARINT_BYTES} bytes")


def _read_length(data: bytes, pos: int) -> tuple[int, int]:
    """A length varint: (length, position after it); -1 means null, other negative values are corrupt."""
    n, pos = _read_varint(data, pos)
    if n < -1:
        raise CorruptRecordError(f"negative length {n} before byte {pos}")
    return n, pos


def _read_headers(data: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """Record headers (rare, so not inlined): count, then (key string, nullable value bytes) pairs."""
    count, pos = _read_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count} before byte {pos}")
    headers = []
    for _ in range(count):
        n, pos = _read_length(data, pos)
        if n < 0:
            raise CorruptRecordError(f"null header key before byte {pos}")
        key_end = pos + n
        if key_end > len(data):
            raise CorruptRecordError(f"header key of {n} bytes runs past the end at byte {pos}")
        key = data[pos:key_end].decode("utf-8")
        n, pos = _read_length(data, key_end)
        value = None if n < 0 else data[pos:pos + n]
        pos += max(n, 0)
        headers.append((key, value))
    return tuple(headers), pos


_CODECS: dict[int, tuple[str, Callable[[], bool], Callable[[bytes], bytes], str]] = {
    1: ("gzip", kafka.codec.has_gzip, kafka.codec.gzip_decode, "zlib"),
    2: ("snappy", kafka.codec.has_snappy, kafka.codec.snappy_decode, "python-snappy (or cramjam)"),
    3: ("lz4", kafka.codec.has_lz4, kafka.codec.lz4_decode, "lz4"),
    4: ("zstd", kafka.codec.has_zstd, kafka.codec.zstd_decode, "zstandard"),
}
"""codec id -> (name, is the library installed, kafka-python's decompressor, the library to install)."""


def codec_decoder(codec: int) -> tuple[str, Callable[[bytes], bytes]]:
    """(name, kafka-python's decompressor) for a codec id, or UnsupportedCompressionError (a
    CorruptRecordError) saying that the id is unknown or which library is missing."""
    entry = _CODECS.get(codec)
    if entry is None:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    name, available, decode, library = entry
    if not available():
        raise UnsupportedCompressionError(f"{name}-compressed batch, but the {library} library is not installed")
    return name, decode


def _decompress(codec: int, payload: bytes, pos: int, base_offset: int) -> bytes:
    try:
        _, decode = codec_decoder(codec)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"batch at byte {pos} (base offset {base_offset}): {e}") from None
    try:
        return bytes(decode(payload))
    except Exception as e:  # each codec library raises its own error types for bad input
        raise CorruptRecordError(
            f"batch at byte {pos} (base offset {base_offset}): cannot decompress ({type(e).__name__}: {e})"
        ) from e
