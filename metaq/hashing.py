"""Java-compatible hashes, for decisions that must agree with Kafka's JVM clients (round-robin order,
``__consumer_offsets`` partition, fetcher choice)."""

from __future__ import annotations

from array import array

_MASK = 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as a signed 32-bit int.

    Characters outside the BMP count as two code units (a surrogate pair), as in Java."""
    units = array("H", s.encode("utf-16-le"))
    if array("H", b"\x01\x00")[0] != 1:  # big-endian host: the bytes above are little-endian
        units.byteswap()
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h
