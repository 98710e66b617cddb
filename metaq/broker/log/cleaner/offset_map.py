"""A fixed-size map of record key -> offset of its latest record, as Kafka's ``SkimpyOffsetMap``.

Memory is one private anonymous mapping of the configured size, reserved once; its pages are zero until written
and are given back by :meth:`OffsetMap.clear`, so an idle broker does not hold the 128 MiB default. Slots of 24
bytes: a 16-byte MD5 hash of the key and the 8-byte offset, open addressing with linear probing. Keys are never
stored, so a key of any size costs 24 bytes, and two keys with the same MD5 would share an entry (Kafka accepts the
same risk). The map refuses entries beyond ``load_factor`` of its slots (:attr:`full`): the cleaner then cleans
what it has mapped and continues in another pass, so memory never grows with the number of keys
(docs/compaction.md).
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import struct

__all__ = ["ENTRY_SIZE", "OffsetMap"]

HASH_SIZE = 16
ENTRY_SIZE = HASH_SIZE + 8
_OFFSET = struct.Struct(">q")
_HEAD = struct.Struct(">Q")
_EMPTY = bytes(HASH_SIZE)
_NOT_EMPTY = b"\x00" * (HASH_SIZE - 1) + b"\x01"
"""An all-zero hash marks an empty slot: the one key hashing to it is given this value instead."""

try:  # CPython's own MD5: hashlib's OpenSSL constructor costs about twice as much per call (OpenSSL 3 looks the
    # algorithm up each time), and the cleaner hashes every record's key twice (docs/compaction.md, "Cost")
    from _md5 import md5 as _md5
except ImportError:  # an interpreter built without it
    _md5 = functools.partial(hashlib.md5, usedforsecurity=False)


class OffsetMap:
    """Key -> latest offset over ``size_bytes`` bytes; ``load_factor`` as Kafka's
    ``log.cleaner.io.buffer.load.factor`` (0.9)."""

    def __init__(self, size_bytes: int, load_factor: float = 0.9) -> None:
        self.slots = max(1, size_bytes // ENTRY_SIZE)
        self._end = self.slots * ENTRY_SIZE
        self.max_entries = max(1, int(self.slots * load_factor))
        self._bytes = mmap.mmap(-1, self.slots * ENTRY_SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.size = 0
        self.latest_offset = -1
        """The largest offset put since the last :meth:`clear` (-1: none)."""

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def clear(self) -> None:
        """Empty: the pages are dropped (a private anonymous page reads as zero again), not rewritten."""
        self._bytes.madvise(mmap.MADV_DONTNEED)
        self.size = 0
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as ``key``'s latest; False (nothing changed) if the key is new and the map is full."""
        digest = _md5(key).digest()
        if digest == _EMPTY:
            digest = _NOT_EMPTY
        data, end = self._bytes, self._end
        position = _HEAD.unpack_from(digest)[0] % self.slots * ENTRY_SIZE
        while True:  # linear probing, inlined: this runs once per record of the dirty section
            stored = data[position:position + HASH_SIZE]
            if stored == digest:
                break
            if stored == _EMPTY:
                if self.size >= self.max_entries:
                    return False
                data[position:position + HASH_SIZE] = digest
                self.size += 1
                break
            position += ENTRY_SIZE
            if position == end:
                position = 0
        _OFFSET.pack_into(data, position + HASH_SIZE, offset)
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1."""
        digest = _md5(key).digest()
        if digest == _EMPTY:
            digest = _NOT_EMPTY
        data, end = self._bytes, self._end
        position = _HEAD.unpack_from(digest)[0] % self.slots * ENTRY_SIZE
        while True:  # once per record of every cleaned segment
            stored = data[position:position + HASH_SIZE]
            if stored == digest:
                return int(_OFFSET.unpack_from(data, position + HASH_SIZE)[0])
            if stored == _EMPTY:
                return -1
            position += ENTRY_SIZE
            if position == end:
                position = 0
