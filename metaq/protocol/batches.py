"""Record batch v2 (magic 2) header handling.

The broker stores batches as they came: it parses the 61-byte header, checks size, magic and CRC-32C,
rewrites the base offset (which lies outside the CRC) and stores the bytes unchanged, so a fetch can be
served straight from the file (a LogAppendTime topic's log also rewrites the timestamp type and
``maxTimestamp``, and so the CRC: :func:`log_append_time`). Records are never decoded here, so recovery runs
at memory speed (the ``crc32c`` package is hardware accelerated); a produced batch's records are checked
before it is appended by metaq/broker/log/validator.py.

Layout (big-endian)::

    0  baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
    17 crc uint32 (CRC-32C of bytes 21..end) | 21 attributes int16 | 23 lastOffsetDelta int32
    27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64 | 51 producerEpoch int16
    53 baseSequence int32 | 57 recordCount int32 | 61 records...
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from metaq.errors import CorruptRecordError, UnsupportedMessageFormatError

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "assign_offsets",
    "batch_problem",
    "iter_valid_batches",
    "log_append_time",
    "read_header",
    "total_size_at",
    "valid_prefix",
    "validate_batches",
]

BATCH_HEADER_SIZE = 61
"""Bytes of a v2 batch header, up to and including recordCount."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted by batchLength."""
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
"""Smallest legal batchLength: a header with no records."""

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LENGTH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_MAGIC_POS = 16
_LENGTH_POS = 8
_CRC_START = 21

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of a v2 record batch, as stored (``base_offset`` as found in the buffer)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & _TIMESTAMP_TYPE_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` without checking the CRC (the log trusts data it already validated)."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at byte {pos}: need {BATCH_HEADER_SIZE} header bytes, only {max(0, len(buf) - pos)} left"
        )
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at byte {pos}: batch length {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}"
        )
    return header


def total_size_at(buf: Buffer, pos: int = 0) -> int | None:
    """Total size claimed by the batch at ``pos`` (from its length field), or None if that field is cut off.

    Recovery uses it to tell "the batch continues beyond this chunk" from "the batch is garbage"."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    length: int = _LENGTH.unpack_from(buf, pos + _LENGTH_POS)[0]
    return length + LOG_OVERHEAD


def _check_batch(buf: Buffer, pos: int, end: int) -> BatchHeader:
    """Fully check the batch at ``pos`` (ending no later than ``end``); raise CorruptRecordError naming the
    byte position and the problem."""
    remaining = end - pos
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(f"batch at byte {pos}: truncated, only {remaining} bytes left")
    if remaining > _MAGIC_POS:
        magic = buf[pos + _MAGIC_POS]
        if magic in (0, 1):
            raise UnsupportedMessageFormatError(
                f"batch at byte {pos}: message format v{magic} is not supported, only record batch v2"
            )
        if magic != 2:
            raise CorruptRecordError(f"batch at byte {pos}: unknown magic byte {magic}")
    (length,) = _LENGTH.unpack_from(buf, pos + _LENGTH_POS)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at byte {pos}: batch length {length} is below the minimum {MIN_BATCH_LENGTH}")
    if length + LOG_OVERHEAD > remaining:
        raise CorruptRecordError(
            f"batch at byte {pos}: truncated, batch length {length} needs {length + LOG_OVERHEAD} bytes,"
            f" only {remaining} left"
        )
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    batch_end = pos + header.size
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    computed = crc32c(view[pos + _CRC_START : batch_end])
    if computed != header.crc:
        raise CorruptRecordError(
            f"batch at byte {pos}: CRC mismatch (stored {header.crc:#010x}, computed {computed:#010x})"
        )
    if header.record_count < 0:
        raise CorruptRecordError(f"batch at byte {pos}: negative record count {header.record_count}")
    if header.last_offset_delta < 0:
        raise CorruptRecordError(f"batch at byte {pos}: negative last offset delta {header.last_offset_delta}")
    return header


def validate_batches(buf: Buffer) -> list[BatchHeader]:
    """Check a produce request's records: exactly a sequence of complete, valid v2 batches.

    Raises UnsupportedMessageFormatError for magic 0/1 and CorruptRecordError for anything else wrong, so
    that nothing of an invalid request is ever written."""
    end = len(buf)
    if end == 0:
        raise CorruptRecordError("empty record set: expected at least one record batch")
    view = memoryview(buf)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < end:
        header = _check_batch(view, pos, end)
        headers.append(header)
        pos += header.size
    return headers


def iter_valid_batches(buf: Buffer, start_pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each valid batch from ``start_pos``; stop silently at the first
    incomplete or invalid one (recovery decides what to do with the rest)."""
    end = len(buf)
    view = memoryview(buf)
    pos = start_pos
    while pos < end:
        try:
            header = _check_batch(view, pos, end)
        except CorruptRecordError:
            return
        yield pos, header
        pos += header.size


def valid_prefix(buf: Buffer, start_pos: int = 0) -> tuple[int, list[BatchHeader]]:
    """``(valid_bytes, headers)``: the length of the longest prefix (from ``start_pos``) made of valid
    batches, and their headers. ``valid_bytes`` counts from ``start_pos``."""
    headers = [header for _, header in iter_valid_batches(buf, start_pos)]
    return sum(header.size for header in headers), headers


def batch_problem(buf: Buffer, pos: int = 0) -> str | None:
    """Why the batch at ``pos`` is invalid (None if it is valid), for recovery's log message."""
    try:
        _check_batch(memoryview(buf), pos, len(buf))
    except CorruptRecordError as e:
        return str(e)
    return None


def assign_offsets(buf: bytearray | memoryview, headers: Sequence[BatchHeader], first_offset: int) -> int:
    """Rewrite each batch's base offset in place so the batches get contiguous offsets from
    ``first_offset``; return the next offset. The base offset is outside the CRC, so CRCs stay valid."""
    pos = 0
    offset = first_offset
    pack = _BASE_OFFSET.pack_into
    for header in headers:
        pack(buf, pos, offset)
        offset += header.last_offset_delta + 1
        pos += header.size
    return offset


_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_POSITION = 12  # partition_leader_epoch: after the base offset (8) and the batch length (4)


INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """An idempotent producer's ``sequence + increment``, wrapping past Int32.MAX to 0 (Kafka's
    DefaultRecordBatch.incrementSequence): the last sequence of a batch, or the first of the next one."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_POSITION = 21
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_POSITION = 35
_CRC = struct.Struct(">I")
_CRC_POSITION = 17


def log_append_time(buf: bytearray | memoryview, headers: Sequence[BatchHeader], now_ms: int) -> list[BatchHeader]:
    """Give each batch the broker's time in place, as a ``message.timestamp.type=LogAppendTime`` topic's log does
    (Kafka's LogValidator, ``DefaultRecordBatch.setMaxTimestamp``): the timestamp type bit set, ``maxTimestamp``
    = ``now_ms``, the CRC-32C computed again (both fields are inside it). The records keep their own timestamps,
    which readers ignore for such a batch; the headers as they are now are returned."""
    out = []
    pos = 0
    view = memoryview(buf)
    for header in headers:
        attributes = header.attributes | _TIMESTAMP_TYPE_MASK
        _ATTRIBUTES.pack_into(buf, pos + _ATTRIBUTES_POSITION, attributes)
        _MAX_TIMESTAMP.pack_into(buf, pos + _MAX_TIMESTAMP_POSITION, now_ms)
        crc = crc32c(view[pos + _CRC_START : pos + header.size])
        _CRC.pack_into(buf, pos + _CRC_POSITION, crc)
        out.append(dataclasses.replace(header, attributes=attributes, max_timestamp=now_ms, crc=crc))
        pos += header.size
    return out


def set_leader_epoch(buf: bytearray | memoryview, headers: Sequence[BatchHeader], epoch: int) -> None:
    """Stamp ``partition_leader_epoch`` into each batch in place (a replicated partition's leader does, see
    metaq/broker/replication/leader_epochs.py). The field is outside the CRC, so CRCs stay valid."""
    pos = 0
    for header in headers:
        _LEADER_EPOCH.pack_into(buf, pos + _LEADER_EPOCH_POSITION, epoch)
        pos += header.size
