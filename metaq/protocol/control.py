"""Control batches: the commit and abort markers of transactions (KIP-98; docs/transactions.md).

A control batch is a record batch v2 with the control and transactional attribute bits set, the producer's id
and epoch, no sequence, and one record whose key is ``int16 version (0), int16 type`` (0 abort, 1 commit)
and whose value is ``int16 version (0), int32 coordinator epoch`` (Kafka's ``ControlRecordType`` and
``EndTransactionMarker``). Readers never hand them to applications.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import crc32c

from metaq.errors import CorruptRecordError
from metaq.protocol.batches import BATCH_HEADER_SIZE, read_header
from metaq.protocol.builder import varint as _varint
from metaq.protocol.messages import ApiStruct

__all__ = ["ABORT", "COMMIT", "aborted_ranges", "build_marker", "in_ranges", "marker_is_abort"]

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


def aborted_ranges(data: bytes, aborted: Iterable[ApiStruct]) -> list[tuple[int, int]]:
    """The offset ranges (first, last) of the batches of ``data`` that belong to aborted transactions, from a
    read_committed Fetch answer's ``aborted_transactions`` (each with ``producer_id`` and ``first_offset``):
    Kafka's consumer logic (``CompletedFetch``): a producer's aborted transaction starts at its first
    offset and ends at its abort marker; its transactional batches in between are dropped."""
    pending = sorted(aborted, key=lambda a: int(a.first_offset))
    active: set[int] = set()
    ranges: list[tuple[int, int]] = []
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        try:
            header = read_header(data, pos)
        except CorruptRecordError:
            break  # the decoder reports it
        if pos + header.size > len(data):
            break  # cut off by the fetch size
        while pending and pending[0].first_offset <= header.last_offset:
            active.add(int(pending.pop(0).producer_id))
        if header.is_control:
            if header.producer_id in active and marker_is_abort(data[pos:pos + header.size]):
                active.discard(header.producer_id)
        elif header.is_transactional and header.producer_id in active:
            ranges.append((header.base_offset, header.last_offset))
        pos += header.size
    return ranges


def in_ranges(offset: int, ranges: Sequence[tuple[int, int]]) -> bool:
    """Whether ``offset`` is in one of the (first, last) ranges :func:`aborted_ranges` gives."""
    return any(first <= offset <= last for first, last in ranges)
