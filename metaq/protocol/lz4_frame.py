"""The LZ4 frame header checksum of Kafka 0.8.2-0.9 (KAFKA-3160), both ways: what magic-0 lz4 wrappers carry
(metaq/protocol/legacy.py reads and writes them through :func:`lz4_frame_fix`; docs/legacy-wire.md)."""

from __future__ import annotations

import struct

from metaq.errors import CorruptRecordError

__all__ = ["lz4_frame_fix", "xxh32"]


def lz4_frame_fix(frame: bytes, *, broken: bool) -> bytes:
    """``frame`` with its header checksum byte rewritten: the standard one (xxh32 of the frame descriptor)
    or, ``broken``, the one Kafka 0.8.2-0.9 wrote (xxh32 of the frame magic and the descriptor), then also
    without the optional content size field, which those versions refuse (as kafka-python writes it)."""
    if len(frame) < 7:
        raise CorruptRecordError("lz4 payload shorter than a frame header")
    flags = frame[4]
    if broken and flags & 0x08:
        frame = b"".join((frame[:4], bytes((flags & ~0x08,)), frame[5:6], frame[14:]))
        flags &= ~0x08
    hc_pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if len(frame) <= hc_pos:
        raise CorruptRecordError("lz4 payload shorter than its frame header")
    covered = frame[0 if broken else 4:hc_pos]
    checksum = (xxh32(covered) >> 8) & 0xFF
    return b"".join((frame[:hc_pos], bytes((checksum,)), frame[hc_pos + 1:]))


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (under 16 bytes, all an LZ4 frame header needs; longer input is refused)."""
    if len(data) >= 16:
        raise ValueError("xxh32 here is only for inputs under 16 bytes")
    h = (seed + _P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, pos)
        h = (h + word * _P3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * _P4 & _M32
        pos += 4
    for b in data[pos:]:
        h = (h + b * _P5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * _P1 & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
