"""Message sets v0 and v1 (magic 0 and 1): the formats of Kafka 0.8-0.10, read and written.

A message set is a run of entries with no count: ``offset int64, message_size int32, message``, where a
message is ``crc uint32, magic int8, attributes int8, [timestamp int64 (v1)], key bytes, value bytes``
(int32 lengths, -1 null) and the CRC-32 (IEEE, not the Castagnoli of v2) covers everything after it. The
magic byte sits 16 bytes into an entry, as in a v2 batch, so one look tells the formats apart and a fetch
answer may mix them (:func:`metaq.protocol.records.decode_records` hands runs of v0/v1 entries here).

Attributes bits 0-2 are the codec (gzip 1, snappy 2, lz4 3), bit 3 (v1) the timestamp type. A compressed
entry is a *wrapper* whose value is the compressed inner message set; there is no nesting. The wrapper's
offset is that of its last inner message; inner offsets are absolute in v0 and relative (0..n-1) in v1
(KIP-31), so an inner message's offset is ``wrapper offset - last relative offset + its relative offset``.
A v1 wrapper with LogAppendTime gives its timestamp to every inner message (KIP-32). Kafka's documentation:
docs/legacy-wire.md, which cites the sources this follows (``AbstractLegacyRecordBatch``, ``LegacyRecord``).

lz4 in magic 0 (KAFKA-3160): Kafka 0.8.2-0.9 computed the LZ4 frame header checksum over the frame magic
too; magic 0 keeps that checksum, magic 1 uses the standard one. :func:`lz4_frame_fix` rewrites it both
ways (reading accepts either). Those versions also refuse a frame with a content checksum or a content
size, so magic-0 frames are written without either.

Speed: a whole run of uncompressed entries, and each wrapper's decompressed inner set (by
metaq/protocol/compression.py, which bounds the output and knows every framing), is read by one call of
the compiled loop (metaq/protocol/_legacy_decode.c: entry headers, CRC-32, keys, values, offsets shifted,
tuples built), which stops at each wrapper and at the first malformed entry; from there the pure-Python
walk below, the reference, reads on and names the fault. The extension is required (setup.py fails the
install without a compiler); tests run every path with ``_walk = None`` too (metaq.testing.readers) and
compare the two on generated sets. ``python -m bench.decode`` prints v1 beside v2 (docs/legacy-wire.md).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from itertools import islice
from operator import itemgetter, le
from typing import NamedTuple

from metaq.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from metaq.protocol import _legacy_decode
from metaq.protocol.compression import compress, decompress, lz4_frame_without_content_checksum
from metaq.protocol.lz4_frame import lz4_frame_fix

try:  # aiokafka's compiled builder (see _plain_entries); encode_message where it is missing
    from aiokafka.record._crecords.legacy_records import LegacyRecordBatchBuilder as _CompiledBuilder
except ImportError:  # pragma: no cover - every platform with an aiokafka wheel has the extension
    _CompiledBuilder = None

__all__ = ["LegacyMessage", "ProducedSet", "build_message_set", "decode_run", "encode_message", "inflate",
           "read_produced", "walk_message_set"]

Record = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
"""As metaq.protocol.records.Record; v0/v1 records have no headers."""

_ENTRY = struct.Struct(">qiIbb")  # offset, message_size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LOG_OVERHEAD = 12
_CRC_START = 16  # the CRC covers the message from its magic byte on
_MAGIC_POS = 16
_KEY_POS = {0: 18, 1: 26}
"""Where the key length starts, from the entry's first byte, per magic."""
MIN_MESSAGE_SIZE = {0: 14, 1: 22}
"""Smallest message_size per magic: crc, magic, attributes, [timestamp], two -1 lengths (Kafka's
``LegacyRecord.RECORD_OVERHEAD_V0/V1``)."""
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP = -1
"""The timestamp of a v0 message (Kafka's ``RecordBatch.NO_TIMESTAMP``)."""
_NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()
_NO_LIMIT = None
_Walk = Callable[[bytes, int, int, int, bool, list[Record], int, int | None, int], tuple[int, int | None, int]]
_walk: _Walk | None = _legacy_decode.walk
"""The compiled loop (module doc); None makes every path the pure-Python reference (metaq.testing.readers)."""
_last_offset: Callable[[bytes, int], int | None] = _legacy_decode.last_offset


def decode_run(data: bytes, pos: int, end: int, min_offset: int, check_crcs: bool,
               out: list[Record]) -> tuple[int, int | None]:
    """Decode the complete v0/v1 entries from ``pos`` on into ``out`` (those at or above ``min_offset``),
    stopping at the end, at an entry cut off by the fetch size, or at an entry of another magic.

    Returns (position after the last complete entry read, offset after it or None if none was read).
    Raises CorruptRecordError naming the entry for a bad CRC, sizes that do not add up, a wrapper that does
    not decompress or holds a compressed message.

    The compiled loop reads the uncompressed entries and stops at each wrapper (read here by
    :func:`_read_wrapper`) and at the first malformed entry, from which :func:`_decode_run_python` (the
    reference) reads on and names the fault."""
    walk = _walk
    if walk is None:
        return _decode_run_python(data, pos, end, min_offset, check_crcs, out)
    last: int | None = None
    while True:
        pos, read, stopped = walk(data, pos, end, min_offset, check_crcs, out, 0, None, -1)
        if read is not None:
            last = read
        if stopped == _legacy_decode.STOP_WRAPPER:
            offset, size = _ENTRY.unpack_from(data, pos)[:2]
            stop = pos + _LOG_OVERHEAD + size
            _read_wrapper(_parse(data, pos, stop, check_crcs), min_offset, check_crcs, out)
            last, pos = offset, stop
        elif stopped == _legacy_decode.STOP_BAD:
            pos, after = _decode_run_python(data, pos, end, min_offset, check_crcs, out)
            return pos, after if after is not None else None if last is None else last + 1
        else:
            return pos, None if last is None else last + 1


def _decode_run_python(data: bytes, pos: int, end: int, min_offset: int, check_crcs: bool,
                       out: list[Record]) -> tuple[int, int | None]:
    """:func:`decode_run` reading only the entries' headers here: runs of uncompressed entries of one magic
    go to :func:`_read_plain` in one piece, wrappers to :func:`_read_wrapper`."""
    entry = _ENTRY.unpack_from
    next_offset: int | None = None
    run_start, run_magic, run_count = pos, -1, 0
    while end - pos >= _MAGIC_POS + 2:
        offset, size, _crc, magic, attributes = entry(data, pos)
        if magic != 0 and magic != 1:
            break
        stop = pos + _LOG_OVERHEAD + size
        if size < MIN_MESSAGE_SIZE[magic]:
            _read_plain(data, run_start, pos, run_count, run_magic, min_offset, check_crcs, out)
            raise CorruptRecordError(f"message at byte {pos} (offset {offset}): size {size} is below the "
                                     f"minimum {MIN_MESSAGE_SIZE[magic]} of a v{magic} message")
        if stop > end:
            break  # cut off by the fetch size: fetched again next time
        if attributes & CODEC_MASK or magic != run_magic:
            _read_plain(data, run_start, pos, run_count, run_magic, min_offset, check_crcs, out)
            run_start, run_magic, run_count = pos, magic, 0
        if attributes & CODEC_MASK:
            message = _parse(data, pos, stop, check_crcs)
            _read_wrapper(message, min_offset, check_crcs, out)
            run_start, run_magic = stop, -1
        else:
            run_count += 1
        next_offset = offset + 1
        pos = stop
    _read_plain(data, run_start, pos, run_count, run_magic, min_offset, check_crcs, out)
    return pos, next_offset


def _read_plain(data: bytes, start: int, stop: int, count: int, magic: int, min_offset: int, check_crcs: bool,
                out: list[Record]) -> None:
    """Append the ``count`` uncompressed entries of one magic in ``data[start:stop]`` at or above
    ``min_offset``: by the compiled loop, and where it stops short, by the pure-Python walk, which names the
    entry and the fault."""
    if not count:
        return
    if _walk is not None:
        first = len(out)
        if _walk(data, start, stop, min_offset, check_crcs, out, 0, None, -1)[::2] == (stop, _legacy_decode.STOP_END):
            return
        del out[first:]  # the walk below reports it
    append = out.append
    for message in walk_message_set(data[start:stop], check_crcs, base=start):
        if message.offset >= min_offset:
            append((message.offset, message.timestamp, message.key, message.value, _NO_HEADERS))


def _parse(data: bytes, pos: int, stop: int, check_crcs: bool) -> LegacyMessage:
    """The one entry at ``data[pos:stop]`` (its size already checked)."""
    return next(iter(walk_message_set(data[pos:stop], check_crcs, base=pos)))


def _read_wrapper(wrapper: LegacyMessage, min_offset: int, check_crcs: bool, out: list[Record]) -> None:
    """Append the inner messages of a compressed wrapper (module doc) at or above ``min_offset``."""
    offset, magic, attributes = wrapper.offset, wrapper.magic, wrapper.attributes
    where = f"compressed message at byte {wrapper.position} (offset {offset})"
    if offset < min_offset:
        return  # the wrapper's offset is its last inner message's: all of them are below
    if wrapper.value is None:
        raise CorruptRecordError(f"{where}: a compressed message with a null value")
    inner = inflate(attributes & CODEC_MASK, magic, wrapper.value, where)
    if _walk is not None and _read_inner(wrapper, inner, min_offset, check_crcs, out):
        return
    records: list[Record] = []
    try:
        count = _count_plain(inner)
        _read_plain(inner, 0, len(inner), count, magic, -(1 << 63), check_crcs, records)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{where}: {e}") from None
    if not records:
        raise CorruptRecordError(f"{where}: holds no message")
    if magic == 1:
        last = records[-1][0]
        if offset and offset < last:
            raise CorruptRecordError(f"{where}: the wrapper's offset is below its last relative offset {last}")
        base = offset - last if offset else 0  # 0: some librdkafka versions' produce data (as Kafka reads it)
        if attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: the broker's time for every inner message
            log_append_time = wrapper.timestamp
            records = [(base + o, log_append_time, k, v, h) for o, _, k, v, h in records]
        elif base:
            records = [(base + o, t, k, v, h) for o, t, k, v, h in records]
    if records[0][0] >= min_offset:
        out.extend(records)
    else:
        out.extend(r for r in records if r[0] >= min_offset)


def _read_inner(wrapper: LegacyMessage, inner: bytes, min_offset: int, check_crcs: bool, out: list[Record]) -> bool:
    """:func:`_read_wrapper`'s work on a decompressed inner set by the compiled loop, straight into ``out``
    (offsets shifted, LogAppendTime given, as there); False, with ``out`` as it was, where the inner set is
    not sound: the pure-Python reference then names the fault."""
    assert _walk is not None
    offset, delta, timestamp = wrapper.offset, 0, None
    last = _last_offset(inner, -1)
    if last is None:
        return False
    if wrapper.magic == 1:
        if offset and offset < last:
            return False
        delta = offset - last if offset else 0
        if not _ALL <= delta < -_ALL:
            return False
        if wrapper.attributes & TIMESTAMP_TYPE_MASK:
            timestamp = wrapper.timestamp
    first = len(out)
    if _walk(inner, 0, len(inner), min_offset, check_crcs, out, delta, timestamp, -1)[::2] == (len(inner),
                                                                                          _legacy_decode.STOP_END):
        return True
    del out[first:]
    return False


def _count_plain(inner: bytes, magic: int | None = None) -> int:
    """How many entries a wrapper's inner set holds, each complete, uncompressed and of magic 0 or 1 (of
    ``magic`` when given: a producer's wrapper)."""
    pos, end, count = 0, len(inner), 0
    while pos < end:
        if end - pos < _MAGIC_POS + 2:
            raise CorruptRecordError(f"the inner message set ends with {end - pos} stray bytes")
        offset, size, _crc, entry_magic, attributes = _ENTRY.unpack_from(inner, pos)
        if entry_magic != 0 and entry_magic != 1:
            raise CorruptRecordError(f"inner message {count}: magic byte {entry_magic}")
        if magic is not None and entry_magic != magic:
            raise CorruptRecordError(f"inner message {count} has magic {entry_magic}, the wrapper {magic}")
        if attributes & CODEC_MASK:
            raise CorruptRecordError(f"inner message {count} is compressed too (nested compression)")
        if size < MIN_MESSAGE_SIZE[entry_magic] or pos + _LOG_OVERHEAD + size > end:
            raise CorruptRecordError(f"inner message {count} (offset {offset}): size {size} does not fit")
        pos += _LOG_OVERHEAD + size
        count += 1
    return count


def inflate(codec: int, magic: int, payload: bytes, where: str, limit: int | None = _NO_LIMIT) -> bytes:
    """The inner message set of a wrapper: decompressed (magic 0 lz4 with its header checksum repaired)."""
    if codec == 3 and magic == 0:
        payload = lz4_frame_fix(payload, broken=False)
    try:
        return decompress(codec, payload, limit)
    except CorruptRecordError as e:
        raise type(e)(f"{where}: cannot decompress: {e}") from e


class LegacyMessage(NamedTuple):
    """One entry of an uncompressed message set, as written (relative offsets left relative)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    position: int
    """Its first byte in the message set."""


def walk_message_set(data: bytes, check_crcs: bool = True, *, base: int = 0) -> Iterable[LegacyMessage]:
    """Every entry of a message set that must be complete (a wrapper's inner set, a produced set):
    CorruptRecordError for a cut-off entry, a bad CRC, sizes or lengths that do not add up, a magic other
    than 0 or 1. Positions in errors and in the messages count from ``base`` (where ``data`` was cut from)."""
    pos, end = 0, len(data)
    view = memoryview(data)
    while pos < end:
        if end - pos < _MAGIC_POS + 2:
            raise CorruptRecordError(f"message at byte {base + pos}: {end - pos} bytes left, too few for a message")
        offset, size, crc, magic, attributes = _ENTRY.unpack_from(data, pos)
        if magic not in (0, 1):
            raise CorruptRecordError(f"message at byte {base + pos}: magic byte {magic} in a v0/v1 message set")
        stop = pos + _LOG_OVERHEAD + size
        if size < MIN_MESSAGE_SIZE[magic] or stop > end:
            raise CorruptRecordError(f"message at byte {base + pos} (offset {offset}): size {size} does not fit")
        if check_crcs and (computed := zlib.crc32(view[pos + _CRC_START:stop])) != crc:
            raise CorruptRecordError(f"message at byte {base + pos} (offset {offset}): CRC mismatch "
                                     f"(stored {crc:#010x}, computed {computed:#010x})")
        timestamp = _TIMESTAMP.unpack_from(data, pos + 18)[0] if magic else NO_TIMESTAMP
        k = pos + _KEY_POS[magic]
        where = f"message at byte {base + pos} (offset {offset})"
        key, k = _read_bytes(data, k, stop, base, where)
        value, k = _read_bytes(data, k, stop, base, where)
        if k != stop:
            raise CorruptRecordError(f"{where}: its fields end at byte {base + k}, its size says {base + stop}")
        yield LegacyMessage(offset, magic, attributes, timestamp, key, value, base + pos)
        pos = stop


def _read_bytes(data: bytes, pos: int, stop: int, base: int, where: str) -> tuple[bytes | None, int]:
    """A key or value of the message ending at ``stop``; errors name it by ``where`` and absolute positions."""
    if pos + 4 > stop:
        raise CorruptRecordError(f"{where}: a length at byte {base + pos} runs past the message")
    (n,) = _LENGTH.unpack_from(data, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < -1 or pos + n > stop:
        raise CorruptRecordError(f"{where}: a length of {n} at byte {base + pos - 4} does not fit the message")
    return data[pos:pos + n], pos + n


def encode_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    """One entry of a message set (a v0 message has no timestamp field; ``timestamp`` is ignored)."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic:
        body += _TIMESTAMP.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _LENGTH.pack(-1)
        else:
            body += _LENGTH.pack(len(field))
            body += field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def build_message_set(magic: int, codec: int, records: Iterable[tuple[int, int, bytes | None, bytes | None]],
                      *, log_append_time: int | None = None) -> bytes:
    """A message set of ``records`` (offset, timestamp, key, value), in one compressed wrapper if ``codec``.

    The wrapper's offset is the last record's; in v1 the inner offsets are written relative (0..n-1) and
    the wrapper carries the largest timestamp, or ``log_append_time`` with the LogAppendTime bit (then every
    message, inner ones too, has that bit and time, as Kafka down-converts such a batch). What an
    old producer writes (relative offsets) and what an old broker stores (the wrapper's offset absolute)
    are the same bytes here; a producer's offsets are rewritten by the broker anyway."""
    items = list(records)
    if codec and not items:
        raise ValueError("a compressed message set needs at least one record")
    base = items[0][0] if codec and magic else 0
    if magic == 1 and log_append_time is not None:
        ts_attr = TIMESTAMP_TYPE_MASK  # every message, inner ones too, as Kafka's MemoryRecordsBuilder writes them
        entries = b"".join(encode_message(o - base, magic, ts_attr, log_append_time, k, v) for o, _t, k, v in items)
    else:
        ts_attr, entries = 0, _plain_entries(magic, items, base)
    if not codec:
        return entries
    if codec == _LZ4 and magic == 0:  # what Kafka 0.8-0.9 read (module doc)
        payload = lz4_frame_fix(lz4_frame_without_content_checksum(entries), broken=True)
    else:
        payload = compress(codec, entries)
    wrapper_ts = max(t for _, t, _, _ in items) if log_append_time is None else log_append_time
    return encode_message(items[-1][0], magic, codec | ts_attr, wrapper_ts, None, payload)


def _plain_entries(magic: int, items: list[tuple[int, int, bytes | None, bytes | None]], base: int) -> bytes:
    """Uncompressed entries of ``items`` with offsets less ``base``: by aiokafka's compiled builder where it is
    installed (about ten times faster than :func:`encode_message` a record), the same bytes."""
    if _CompiledBuilder is None:
        return b"".join(encode_message(o - base, magic, 0, t, k, v) for o, t, k, v in items)
    builder = _CompiledBuilder(magic, 0, 1 << 62)
    append = builder.append
    for offset, timestamp, key, value in items:
        append(offset - base, timestamp, key, value)
    return bytes(builder.build())


class ProducedSet(NamedTuple):
    """A produced v0/v1 message set, checked (:func:`read_produced`)."""

    magic: int
    codec: int
    """The codec of its wrappers (0: none was compressed)."""
    records: list[Record]
    """Its records in order, offsets as written (relative ones left relative)."""


def read_produced(data: bytes, limit: int) -> ProducedSet:
    """A producer's message set, checked as a broker checks one before appending (Kafka's LogValidator):
    complete entries of one magic (0 or 1) with valid CRCs and sizes, no attribute bits but the codec,
    wrappers holding at least one message of their magic, none compressed, with inner offsets that never
    go backwards, decompressing to at most ``limit`` bytes. CorruptRecordError (InvalidRecordError for the
    offsets) or MessageSizeTooLargeError name the entry. The compiled loop reads the set where it can
    (:func:`_read_produced_compiled`), the pure-Python reference where it stops short, naming the fault."""
    if _walk is not None and (produced := _read_produced_compiled(data, limit)) is not None:
        return produced
    return _read_produced_python(data, limit)


def _read_produced_compiled(data: bytes, limit: int) -> ProducedSet | None:
    """:func:`read_produced` by the compiled loop, which also checks the producer's rules for the entries it
    reads (one magic, no attribute bits but the codec), wrappers by :func:`_produced_wrapper` as there; None
    where it stops at anything else: the reference reads the set again and names the fault."""
    assert _walk is not None
    if len(data) <= _MAGIC_POS or data[_MAGIC_POS] > 1:
        return None
    magic, codec = data[_MAGIC_POS], 0
    records: list[Record] = []
    pos, end = 0, len(data)
    while True:
        pos, _, stopped = _walk(data, pos, end, _ALL, True, records, 0, None, magic)
        if stopped != _legacy_decode.STOP_WRAPPER:
            break
        offset, size, _crc, _magic, attributes = _ENTRY.unpack_from(data, pos)
        codec = attributes & CODEC_MASK
        if codec > _LZ4:
            return None
        stop = pos + _LOG_OVERHEAD + size
        records += _produced_wrapper(_parse(data, pos, stop, True), limit, f"message at byte {pos} (offset {offset})")
        pos = stop
    if stopped != _legacy_decode.STOP_END or pos != end or not records:
        return None
    return ProducedSet(magic, codec, records)


def _read_produced_python(data: bytes, limit: int) -> ProducedSet:
    """:func:`read_produced` reading the entries' headers here, runs of plain entries by :func:`_read_plain`."""
    records: list[Record] = []
    magic, codec = -1, 0
    pos, end = 0, len(data)
    run_start, run_count = 0, 0
    while pos < end:
        if end - pos < _MAGIC_POS + 2:
            raise CorruptRecordError(f"message at byte {pos}: {end - pos} bytes left, too few for a message")
        offset, size, _crc, entry_magic, attributes = _ENTRY.unpack_from(data, pos)
        where = f"message at byte {pos} (offset {offset})"
        if entry_magic != 0 and entry_magic != 1:
            raise CorruptRecordError(f"{where}: magic byte {entry_magic} in a v0/v1 message set")
        if magic < 0:
            magic = entry_magic
        elif entry_magic != magic:
            raise CorruptRecordError(f"{where}: magic {entry_magic} after messages of magic {magic}")
        if attributes & ~CODEC_MASK & 0xFF:
            raise CorruptRecordError(f"{where}: attributes {attributes & 0xFF:#04x} a producer may not set")
        stop = pos + _LOG_OVERHEAD + size
        if size < MIN_MESSAGE_SIZE[magic] or stop > end:
            raise CorruptRecordError(f"{where}: size {size} does not fit")
        if attributes & CODEC_MASK:
            _read_plain(data, run_start, pos, run_count, magic, _ALL, True, records)
            codec = attributes & CODEC_MASK
            if codec > _LZ4:
                raise UnsupportedCompressionError(f"{where}: codec {codec} in a v{magic} message (gzip, snappy "
                                                  f"and lz4 only; zstd needs record batch v2)")
            records += _produced_wrapper(_parse(data, pos, stop, True), limit, where)
            run_start, run_count = stop, 0
        else:
            run_count += 1
        pos = stop
    _read_plain(data, run_start, pos, run_count, magic, _ALL, True, records)
    if not records:
        raise CorruptRecordError("an empty message set")
    return ProducedSet(magic, codec, records)


_LZ4 = 3
_ALL = -(1 << 63)
"""A min_offset below every offset (relative ones included)."""


def _produced_wrapper(wrapper: LegacyMessage, limit: int, where: str) -> list[Record]:
    """A produced wrapper's inner records, checked (:func:`read_produced`)."""
    if wrapper.value is None:
        raise CorruptRecordError(f"{where}: a compressed message with a null value")
    inner = inflate(wrapper.attributes & CODEC_MASK, wrapper.magic, wrapper.value, where, limit)
    records: list[Record] = []
    if _walk is not None and _last_offset(inner, wrapper.magic) is not None:  # the compiled loop, C-level checks
        if _walk(inner, 0, len(inner), _ALL, True, records, 0, None, -1)[::2] == (len(inner),
                                                                                  _legacy_decode.STOP_END):
            offsets = list(map(itemgetter(0), records))
            if all(map(le, offsets, islice(offsets, 1, None))):
                return records
        records = []  # the reference below names the fault
    try:
        count = _count_plain(inner, wrapper.magic)
        _read_plain(inner, 0, len(inner), count, wrapper.magic, _ALL, True, records)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{where}: {e}") from None
    if not records:
        raise CorruptRecordError(f"{where}: a compressed message holding no message")
    for i in range(1, len(records)):
        if records[i][0] < records[i - 1][0]:
            raise InvalidRecordError(f"{where}: inner offsets go backwards at message {i} "
                                     f"({records[i - 1][0]}, then {records[i][0]})")
    return records
