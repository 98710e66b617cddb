"""The pure-Python record loops of record batch v2: the reader :func:`metaq.protocol.records.decode_records`
falls back to where aiokafka's compiled reader is missing, and the broker's validation walk of
:func:`metaq.protocol.records.check_records` without it (the module doc of metaq/protocol/records.py says how
the two readers compare and what each costs).
"""

from __future__ import annotations

from metaq.errors import CorruptRecordError, InvalidRecordError
from metaq.protocol.record_types import Record

__all__: list[str] = []

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



def _check_records_python(data: bytes, pos: int, stop: int, count: int) -> int:
    """:func:`check_records` in pure Python, without copying keys or values; also refuses key and value
    lengths below -1 (see the module doc).

    The layout is read as :func:`_read_records` reads it, so every batch this walk accepts also decodes; it
    costs about as much (about 1 us a record), being the same loop without the copies but with the checks.
    ``pos`` only grows, so a record running past ``stop`` is caught by the final check without a bound
    test per record."""
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

