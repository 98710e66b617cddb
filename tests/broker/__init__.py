"""Broker tests, and helpers they share to build and decode record batches."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

BASE_TS = 1_600_000_000_000


def make_batch(
    values: Sequence[bytes | None],
    *,
    timestamps: Sequence[int] | None = None,
    base_ts: int = BASE_TS,
    keys: Sequence[bytes | None] | None = None,
    compression: int = 0,
    base_offset: int = 0,
    transactional: bool = False,
    producer: tuple[int, int, int] | None = None,
) -> bytes:
    """A v2 record batch as a producer would send it (base offset 0 unless given); ``producer`` is an
    idempotent producer's (producer id, epoch, base sequence)."""
    if producer is None:
        producer = (7, 0, 0) if transactional else (-1, -1, -1)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=int(transactional),
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        timestamp = timestamps[i] if timestamps is not None else base_ts + i
        key = keys[i] if keys is not None else None
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def make_values(count: int, size: int = 20, tag: str = "v") -> list[bytes]:
    return [f"{tag}{i:08d}".encode().ljust(size, b".") for i in range(count)]


def decode(data: bytes | bytearray | memoryview) -> list[tuple[int, int, bytes | None]]:
    """``(offset, timestamp, value)`` of every record of the complete batches in ``data`` (a fetch slice may
    end in a partial batch, which consumers skip)."""
    records = MemoryRecords(bytes(data))
    out: list[tuple[int, int, bytes | None]] = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.extend((record.offset, record.timestamp, record.value) for record in batch)
    return out
