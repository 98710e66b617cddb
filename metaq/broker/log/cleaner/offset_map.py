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

import hashlib
import mmap
import struct

__all__ = ["ENTRY_SIZE", "OffsetMap"]

HASH_SIZE = 16
ENTRY_SIZE = HASH_SIZE + 8
_OFFSET = struct.Struct(">q")
_EMPTY = bytes(HASH_SIZE)


class OffsetMap:
    """Key -> latest offset over ``size_bytes`` bytes; ``load_factor`` as Kafka's
    ``log.cleaner.io.buffer.load.factor`` (0.9)."""

    def __init__(self, size_bytes: int, load_factor: float = 0.9) -> None:
        self.slots = max(1, size_bytes // ENTRY_SIZE)
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

    def _slot(self, digest: bytes) -> tuple[int, bool]:
        """Position of ``digest``'s slot and whether it is taken by that digest (else it is empty)."""
        data = self._bytes
        slot = int.from_bytes(digest[:8], "big") % self.slots
        while True:
            position = slot * ENTRY_SIZE
            stored = data[position:position + HASH_SIZE]
            if stored == digest:
                return position, True
            if stored == _EMPTY:
                return position, False
            slot = slot + 1 if slot + 1 < self.slots else 0

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as ``key``'s latest; False (nothing changed) if the key is new and the map is full."""
        digest = _digest(key)
        position, found = self._slot(digest)
        if not found:
            if self.full:
                return False
            self._bytes[position:position + HASH_SIZE] = digest
            self.size += 1
        _OFFSET.pack_into(self._bytes, position + HASH_SIZE, offset)
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1."""
        position, found = self._slot(_digest(key))
        return int(_OFFSET.unpack_from(self._bytes, position + HASH_SIZE)[0]) if found else -1


def _digest(key: bytes) -> bytes:
    digest = hashlib.md5(key, usedforsecurity=False).digest()
    # an all-zero hash marks an empty slot: the one key hashing to it is moved to another value
    return digest if digest != _EMPTY else b"\x00" * (HASH_SIZE - 1) + b"\x01"
