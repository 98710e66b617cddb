"""The four record batch codecs (gzip, snappy, lz4, zstd), all through one binding: cramjam.

Kafka's framing of each codec inside a record batch v2 (attributes bits 0-2):

* 1 gzip: one or more gzip members (RFC 1952);
* 2 snappy: the xerial "snappy-java" block stream that Kafka's Java client and librdkafka write (a 16-byte
  header ``\\x82SNAPPY\\0`` + version + compat, then big-endian length-prefixed raw snappy blocks of at most
  32 KiB input each); a payload without that header is one raw snappy block, which librdkafka also accepts;
* 3 lz4: the LZ4 *frame* format with independent blocks (Kafka's KafkaLZ4BlockInputStream refuses linked
  blocks);
* 4 zstd: one or more zstd frames.

Compression bombs: :func:`decompress` takes a ``limit`` and never holds much more than that in memory: gzip
streams through zlib with an output bound, lz4 and zstd decompress into a buffer of a guessed size, on overflow
into one four times larger, and so on up to one of ``limit + 1`` bytes, snappy checks each block's declared length
before decompressing it (see metaq/broker/log/validator.py for the limit).

The first guess comes from the frame headers where they tell the size (:func:`_size_hint`): a zstd frame's
Frame_Content_Size (RFC 8878 section 3.1.1.1), which librdkafka, Kafka's Java client and cramjam write; an lz4
frame's content size, or else a bound from its block headers (each block decodes to at most the frame's block
maximum and to at most 255 bytes per compressed byte, LZ4's own limit). Without a hint (no such field, or a
header that does not parse) the guess is 16x the payload. An exact first guess decompresses once: a guess too
small cost a failed try and a second buffer, for a batch of repetitive values every time (about 2x the
decompression's own time).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator

import cramjam

from metaq.errors import CorruptRecordError, MessageSizeTooLargeError, UnsupportedCompressionError

__all__ = ["CODECS", "codec_id", "codec_name", "compress", "decompress", "lz4_frame_without_content_checksum"]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
"""Kafka's ``compression.type`` names and the codec ids a batch's attributes carry."""
_NAMES = {v: k for k, v in CODECS.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with 1 (as snappy-java)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_BLOCK_LENGTH = struct.Struct(">i")
_GZIP_LEVEL = 6  # zlib's default, as Kafka's Java client and librdkafka use
_FIRST_GUESS_RATIO = 16
_FIRST_GUESS_EXTRA = 64 * 1024
_GROWTH = 4
_BUFFER_FULL = "failed to write whole buffer"  # cramjam's error when the output buffer is too small


def codec_name(codec: int) -> str:
    """The codec's ``compression.type`` name; UnsupportedCompressionError for an unknown id."""
    try:
        return _NAMES[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None


def codec_id(name: str) -> int:
    """The codec id for a ``compression.type`` name; UnsupportedCompressionError naming the choices."""
    try:
        return CODECS[name]
    except KeyError:
        raise UnsupportedCompressionError(
            f"unknown compression.type {name!r}: one of {', '.join(CODECS)}") from None


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed as Kafka frames codec ``codec`` inside a batch (module doc)."""
    return _COMPRESSORS[codec](data) if codec else bytes(data)


def decompress(codec: int, payload: bytes, limit: int | None = None) -> bytes:
    """The records of a batch payload compressed with ``codec``.

    Raises UnsupportedCompressionError for an unknown codec, CorruptRecordError (naming the codec) for a
    payload that does not decompress, and MessageSizeTooLargeError if the output exceeds ``limit``."""
    name = codec_name(codec)
    if not codec:
        return bytes(payload)
    try:
        body = _DECOMPRESSORS[codec](payload, limit)
    except (CorruptRecordError, MessageSizeTooLargeError):
        raise
    except Exception as e:  # cramjam raises its DecompressionError, zlib its error, struct its error
        raise CorruptRecordError(f"{name} payload does not decompress ({type(e).__name__}: {e})") from e
    if limit is not None and len(body) > limit:
        raise MessageSizeTooLargeError(f"{name} payload decompresses to more than {limit} bytes")
    return body


def _gzip(data: bytes) -> bytes:
    return bytes(cramjam.gzip.compress(data, level=_GZIP_LEVEL))


def _gunzip(payload: bytes, limit: int | None) -> bytes:
    """Every gzip member of ``payload``, stopping as soon as the output exceeds ``limit`` (zlib streams
    with an output bound; cramjam's gzip does not)."""
    bound = (limit + 1) if limit is not None else 0
    out = bytearray()
    rest = payload
    while rest:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += stream.decompress(rest, bound - len(out) if bound else 0)
        if bound and len(out) >= bound:
            raise MessageSizeTooLargeError(f"gzip payload decompresses to more than {limit} bytes")
        if not stream.eof:
            raise CorruptRecordError("gzip payload is truncated")
        rest = stream.unused_data
    return bytes(out)


def _snappy(data: bytes) -> bytes:
    """The xerial block stream (module doc): what Kafka's Java producer writes and every client reads."""
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _unsnappy(payload: bytes, limit: int | None) -> bytes:
    data = bytes(payload)
    if not data.startswith(_XERIAL_MAGIC) or len(data) < len(_XERIAL_HEADER):
        _check_snappy_block(data, 0, limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = len(_XERIAL_HEADER)  # version and compat are ignored, as snappy-java and kafka-python do
    while pos < len(data):
        if pos + _BLOCK_LENGTH.size > len(data):
            raise CorruptRecordError(f"snappy block length at byte {pos} is cut off")
        (size,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += _BLOCK_LENGTH.size
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(f"snappy block of {size} bytes at byte {pos} runs past the payload")
        block = data[pos:pos + size]
        _check_snappy_block(block, len(out), limit)
        out += cramjam.snappy.decompress_raw(block)
        pos += size
    return bytes(out)


def _check_snappy_block(block: bytes, before: int, limit: int | None) -> None:
    """A raw snappy block starts with its decompressed length: refuse it before it is decompressed."""
    if limit is not None and before + cramjam.snappy.decompress_raw_len(block) > limit:
        raise MessageSizeTooLargeError(f"snappy payload decompresses to more than {limit} bytes")


def _bounded(decompress_into: Callable[[bytes, bytearray], int], name: str) -> Callable[[bytes, int | None], bytes]:
    """A decompressor that writes into a fixed buffer, so a bomb costs at most ``limit + 1`` bytes."""
    plain = getattr(cramjam, name).decompress

    def run(payload: bytes, limit: int | None) -> bytes:
        if limit is None:
            return bytes(plain(payload))
        hint = _size_hint(payload, name)
        first = max(hint, 1) if hint is not None else _FIRST_GUESS_RATIO * len(payload) + _FIRST_GUESS_EXTRA
        for size in _buffer_sizes(min(first, limit + 1), limit + 1):
            out = bytearray(size)
            try:
                written = decompress_into(payload, out)
            except cramjam.DecompressionError as e:
                if _BUFFER_FULL not in str(e):
                    raise
                continue
            return bytes(memoryview(out)[:written])
        raise MessageSizeTooLargeError(f"{name} payload decompresses to more than {limit} bytes")

    return run


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_FCS_BYTES = (0, 2, 4, 8)  # by Frame_Content_Size_flag; flag 0 with Single_Segment_flag: 1 byte
_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
_ZSTD_BLOCK_MAX = 128 << 10
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # by the BD byte's Block MaxSize field
_LZ4_MAX_RATIO = 255  # a match length extension byte (255) per compressed byte, at most
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_UINT32 = struct.Struct("<I")


def _size_hint(payload: bytes, name: str) -> int | None:
    """A first buffer size from the frame headers (module doc), or None."""
    try:
        return _zstd_size_bound(payload) if name == "zstd" else _lz4_size_bound(payload)
    except (IndexError, struct.error, KeyError):  # a header cut off or not as expected: guess as before
        return None


def _zstd_size_bound(payload: bytes) -> int | None:
    """The decompressed size of every zstd frame in ``payload`` (RFC 8878 section 3.1.1): its Frame_Content_Size
    if the header carries one, else the sum over its blocks (a raw or RLE block's Block_Size; a compressed block at
    most Block_Maximum_Size, the smaller of the window and 128 KiB). librdkafka's frames carry no content size."""
    total = 0
    pos = 0
    while pos < len(payload):
        if payload[pos:pos + 4] != _ZSTD_MAGIC:
            return None
        descriptor = payload[pos + 4]
        single_segment = descriptor >> 5 & 1
        pos += 5
        if single_segment:
            window = None
        else:
            exponent, mantissa = payload[pos] >> 3, payload[pos] & 7
            window = (1 << (10 + exponent)) + ((1 << (10 + exponent)) >> 3) * mantissa
            pos += 1
        pos += _ZSTD_DICT_ID_BYTES[descriptor & 3]
        size_bytes = _ZSTD_FCS_BYTES[descriptor >> 6] or single_segment
        content_size = None
        if size_bytes:
            field = payload[pos:pos + size_bytes]
            if len(field) != size_bytes:
                return None
            content_size = int.from_bytes(field, "little") + (256 if size_bytes == 2 else 0)
            pos += size_bytes
        block_max = min(_ZSTD_BLOCK_MAX, window if window is not None else content_size or _ZSTD_BLOCK_MAX)
        bound = 0
        last = False
        while not last:
            if pos + 3 > len(payload):
                return None
            header = int.from_bytes(payload[pos:pos + 3], "little")
            last, kind, size = bool(header & 1), header >> 1 & 3, header >> 3
            pos += 3
            if kind == 0:  # raw
                bound += size
                pos += size
            elif kind == 1:  # RLE: one byte repeated Block_Size times
                bound += size
                pos += 1
            elif kind == 2:
                bound += block_max
                pos += size
            else:
                return None
        pos += 4 * (descriptor >> 2 & 1)  # content checksum
        total += bound if content_size is None else content_size
    return total if pos == len(payload) else None


def _lz4_size_bound(payload: bytes) -> int | None:
    """The decompressed size of every lz4 frame in ``payload``: its content size field if it has one, else the
    bound its block headers give (LZ4 frame format 1.6.x: FLG, BD, optional content size and dictionary id, header
    checksum, then blocks of a 4-byte length, the top bit "stored uncompressed", each followed by a 4-byte checksum
    if the FLG says so, ended by a zero length and an optional 4-byte content checksum)."""
    total = 0
    pos = 0
    while pos < len(payload):
        if payload[pos:pos + 4] != _LZ4_MAGIC:
            return None
        flags, block_max = payload[pos + 4], _LZ4_BLOCK_MAX[payload[pos + 5] >> 4 & 7]
        block_checksum, content_checksum = 4 * (flags >> 4 & 1), 4 * (flags >> 2 & 1)
        pos += 6
        if flags & 0x08:  # content size
            content_size = int.from_bytes(payload[pos:pos + 8], "little")
            pos += 8
        else:
            content_size = None
        pos += 4 * (flags & 0x01) + 1  # dictionary id, header checksum
        bound = 0
        while True:
            (word,) = _UINT32.unpack_from(payload, pos)
            pos += 4
            if word == 0:
                break
            size = word & ~_LZ4_UNCOMPRESSED_BLOCK
            bound += size if word & _LZ4_UNCOMPRESSED_BLOCK else min(block_max, _LZ4_MAX_RATIO * size)
            pos += size + block_checksum
        pos += content_checksum
        total += bound if content_size is None else content_size
    return total if pos == len(payload) else None


def _buffer_sizes(first: int, last: int) -> Iterator[int]:
    """``first``, then ``_GROWTH`` times more each try, ending at ``last``: a batch of repetitive values
    (thousands of times smaller compressed) costs a few small tries, not one ``limit``-sized buffer (tens of
    MiB zeroed per batch), and a bomb still costs at most about ``_GROWTH / (_GROWTH - 1)`` times ``limit``."""
    size = first
    while size < last:
        yield size
        size *= _GROWTH
    yield last


def _lz4(data: bytes) -> bytes:
    compressor = cramjam.lz4.Compressor(block_linked=False)  # independent blocks (module doc)
    compressor.compress(data)
    return bytes(compressor.finish())


def lz4_frame_without_content_checksum(data: bytes) -> bytes:
    """An lz4 frame as Kafka 0.8-0.9 read one: independent blocks and no content checksum, which their
    KafkaLZ4BlockInputStream refuses ("Content checksum is unsupported"), as kafka-python's ``lz4_encode``
    writes it (python-lz4's default). The caller still rewrites the header checksum (metaq/protocol/legacy.py)."""
    compressor = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _zstd(data: bytes) -> bytes:
    return bytes(cramjam.zstd.compress(data))


_COMPRESSORS: dict[int, Callable[[bytes], bytes]] = {1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}
_DECOMPRESSORS: dict[int, Callable[[bytes, int | None], bytes]] = {
    1: _gunzip,
    2: _unsnappy,
    3: _bounded(cramjam.lz4.decompress_into, "lz4"),
    4: _bounded(cramjam.zstd.decompress_into, "zstd"),
}
