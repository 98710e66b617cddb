"""Control batches: the commit and abort markers of transactions (KIP-98; docs/transactions.md).

A control batch is a record batch v2 with the control and transactional attribute bits set, the producer's id
and epoch, no sequence, and one record whose key is ``int16 version (0), int16 type`` (0 abort, 1 commit)
and whose value is ``int16 version (0), int32 coordinator epoch`` (Kafka's ``ControlRecordType`` and
``EndTransactionMarker``). Readers never hand them to applications.
"""

from __future__ import annotations

import struct

import crc32c

from metaq.protocol.batches import BATCH_HEADER_SIZE
from metaq.protocol.builder import varint as _varint

__all__ = ["ABORT", "COMMIT", "build_marker", "marker_is_abort"]

ABORT, COMMIT = 0, 1
_CONTROL_ATTRIBUTES = 0x20 | 0x10  # control | transactional
_HEADER = struct.Struct(">qiibIhiqqqhii")
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CRC_FROM = 21  # the CRC covers the batch from its attributes on


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """A control batch holding one end-transaction marker (base offset 0: the log assigns it)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    body = (b"\x00" + _varint(0) + _varint(0) + _varint(len(key)) + key + _varint(len(value)) + value
            + _varint(0))
    record = _varint(len(body)) + body
    size = BATCH_HEADER_SIZE + len(record)
    batch = bytearray(_HEADER.pack(0, size - 12, -1, 2, 0, _CONTROL_ATTRIBUTES, 0, timestamp_ms, timestamp_ms,
                                   producer_id, producer_epoch, -1, 1))
    batch += record
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[_CRC_FROM:])))
    return bytes(batch)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def marker_is_abort(batch: bytes) -> bool | None:
    """Whether the control batch starting ``batch`` is an abort marker (True) or a commit (False); None if it
    holds no readable end-transaction marker (an unknown control type is not a marker)."""
    try:
        pos = BATCH_HEADER_SIZE
        _, pos = _read_varint(batch, pos)  # record length
        pos += 1  # attributes
        _, pos = _read_varint(batch, pos)  # timestamp delta
        _, pos = _read_varint(batch, pos)  # offset delta
        key_length, pos = _read_varint(batch, pos)
        if key_length < _KEY.size or pos + _KEY.size > len(batch):
            return None
        _, kind = _KEY.unpack_from(batch, pos)
    except ValueError:
        return None
    if kind == ABORT:
        return True
    if kind == COMMIT:
        return False
    return None
