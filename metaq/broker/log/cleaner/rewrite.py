"""Filtering one stored record batch (v2) for the cleaner, as Kafka's ``MemoryRecords.filterTo``.

A batch whose records are all kept, and that needs no delete horizon, is copied byte for byte. Otherwise the
kept records are written into a new batch with the original's base offset *and* last offset delta (so offsets,
and the producer sequence range the batch stands for, never change), producer id, epoch, base sequence,
partition leader epoch, codec and timestamp type. A batch that keeps no record is dropped, unless it is the
last batch of a still-active idempotent producer: then its header is kept with no records (Kafka's
``RETAIN_EMPTY``) so that the producer's sequence state survives a restart.

Tombstones (records with a null value) get a delete horizon the first time the cleaner passes them (KIP-534):
attribute bit 6 set and the base timestamp field holding ``now + delete.retention.ms``; record timestamps stay
the same because their deltas are taken from that field. Later passes drop them once the horizon is past.
A transaction marker (control batch) that may go gets a delete horizon the same way (:func:`with_delete_horizon`)
and is dropped by a later pass once it is past (docs/compaction.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from metaq.protocol.batches import BATCH_HEADER_SIZE, BatchHeader
from metaq.protocol.builder import BATCH_HEADER, encode_headers, varint
from metaq.protocol.compression import compress
from metaq.protocol.record_types import Record
from metaq.protocol.records import decode_records

__all__ = ["DELETE_HORIZON_FLAG", "FilteredBatch", "delete_horizon", "filter_batch", "keys_of", "with_delete_horizon"]

DELETE_HORIZON_FLAG = 0x40
"""Attribute bit: the base timestamp field holds the delete horizon (KIP-534)."""
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21

RecordTest = Callable[[BatchHeader, Record], bool]


@dataclass(frozen=True)
class FilteredBatch:
    """What to write for one batch: ``data`` (empty: drop the batch) and how many records it keeps."""

    data: bytes
    kept: int
    dropped: int


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms), or None if the cleaner has not set one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def keys_of(raw: bytes) -> list[tuple[int, bytes | None, bool]]:
    """``(offset, key, is_tombstone)`` of each record of one data batch."""
    return [(offset, key, value is None) for offset, _, key, value, _ in decode_records(raw).records]


def filter_batch(raw: bytes, header: BatchHeader, keep: RecordTest, *, retain_empty: bool,
                 new_horizon_ms: int) -> FilteredBatch:
    """Filter the data batch ``raw`` (described by ``header``) with ``keep``; ``new_horizon_ms`` is the delete
    horizon given to a batch that keeps a tombstone and has none yet."""
    records = decode_records(raw).records
    kept = [record for record in records if keep(header, record)]
    horizon = delete_horizon(header)
    needs_horizon = horizon is None and any(record[3] is None for record in kept)
    dropped = len(records) - len(kept)
    if not dropped and not needs_horizon:
        return FilteredBatch(raw, len(kept), 0)
    if not kept:
        return FilteredBatch(_empty_batch(header) if retain_empty else b"", 0, dropped)
    return FilteredBatch(_build(header, kept, new_horizon_ms if needs_horizon else horizon), len(kept), dropped)


def with_delete_horizon(raw: bytes, header: BatchHeader, horizon_ms: int) -> bytes:
    """The transaction marker ``raw`` with the delete horizon ``horizon_ms``: attribute bit and base timestamp
    set, CRC computed again, its record bytes unchanged. The marker record's timestamp delta (0) then counts
    from the horizon; nothing reads a control record's timestamp (readers skip control batches, and producer
    state goes by the max timestamp, which stays)."""
    out = bytearray(raw)
    BATCH_HEADER.pack_into(out, 0, header.base_offset, len(out) - 12, header.partition_leader_epoch, 2, 0,
                           header.attributes | DELETE_HORIZON_FLAG, header.last_offset_delta, horizon_ms,
                           header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
                           header.record_count)
    _CRC.pack_into(out, _CRC_OFFSET, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _build(header: BatchHeader, records: list[Record], horizon: int | None) -> bytes:
    base_ts = horizon if horizon is not None else min(record[1] for record in records)
    if header.attributes & _LOG_APPEND_TIME:
        max_ts = header.max_timestamp
    else:
        max_ts = max(record[1] for record in records)
    body = bytearray()
    for offset, timestamp, key, value, headers in records:
        record = bytearray(b"\x00")  # attributes, unused
        record += varint(timestamp - base_ts)
        record += varint(offset - header.base_offset)
        record += b"\x01" if key is None else varint(len(key)) + key
        record += b"\x01" if value is None else varint(len(value)) + value
        record += encode_headers(headers) if headers else b"\x00"
        body += varint(len(record))
        body += record
    codec = header.attributes & _CODEC_MASK
    payload = compress(codec, bytes(body)) if codec else bytes(body)
    attributes = header.attributes | (DELETE_HORIZON_FLAG if horizon is not None else 0)
    return _finish(header, attributes, base_ts, max_ts, len(records), payload)


def _empty_batch(header: BatchHeader) -> bytes:
    """The header alone, as Kafka's ``DefaultRecordBatch.writeEmptyHeader``: no records, the original offsets,
    producer fields and max timestamp."""
    attributes = header.attributes & ~_CODEC_MASK & ~DELETE_HORIZON_FLAG
    return _finish(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _finish(header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes) -> bytes:
    out = bytearray(BATCH_HEADER_SIZE) + payload
    BATCH_HEADER.pack_into(out, 0, header.base_offset, len(out) - 12, header.partition_leader_epoch, 2, 0,
                           attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id,
                           header.producer_epoch, header.base_sequence, count)
    _CRC.pack_into(out, _CRC_OFFSET, crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    return bytes(out)
