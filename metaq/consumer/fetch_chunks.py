"""Cutting a fetched response into chunks: the byte ranges of whole record batches that each hold a bounded number
of records, and the decodable batches before a corrupt one (what a fetcher thread enqueues, metaq/consumer/fetcher.py).
"""

from __future__ import annotations

from metaq.errors import CorruptRecordError
from metaq.protocol.batches import BATCH_HEADER_SIZE, LOG_OVERHEAD
from metaq.protocol.records import DecodeResult, decode_records

_MAGIC_POS = 16  # of a batch: its magic byte


def _batch_groups(data: bytes, limit: int) -> list[tuple[int, int]]:
    """Byte ranges of ``data`` (consecutive, from 0 to its end) that each start with a complete batch and
    hold at least ``limit`` records, the last one the rest (whatever it holds: a batch cut off by the fetch
    size, or bytes that do not look like a batch, which decoding then reports); at most one range when there
    are no more than ``limit`` records in all. Only the headers are read (length, magic, record count)."""
    groups: list[tuple[int, int]] = []
    start = pos = count = 0
    end = len(data)
    while end - pos >= BATCH_HEADER_SIZE:
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True) + LOG_OVERHEAD
        records = int.from_bytes(data[pos + BATCH_HEADER_SIZE - 4:pos + BATCH_HEADER_SIZE], "big", signed=True)
        if size < BATCH_HEADER_SIZE or pos + size > end or data[pos + _MAGIC_POS] != 2 or records < 0:
            break
        pos += size
        count += records
        if count >= limit and pos < end:
            groups.append((start, pos))
            start, count = pos, 0
    groups.append((start, end))
    return groups


def _decodable_prefix(data: bytes, fetch_offset: int) -> DecodeResult | None:
    """The complete batches of ``data`` before the first that does not decode, if they hold offsets at or
    past ``fetch_offset`` (only called once decoding all of ``data`` failed)."""
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= LOG_OVERHEAD:
        size = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True) + LOG_OVERHEAD
        if size <= LOG_OVERHEAD or pos + size > len(view):
            break
        try:
            decode_records(view[pos:pos + size], fetch_offset)
        except CorruptRecordError:
            break
        pos += size
    if not pos:
        return None
    result = decode_records(view[:pos], fetch_offset)
    return result if result.next_offset is not None and result.next_offset > fetch_offset else None
