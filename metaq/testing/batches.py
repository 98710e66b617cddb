"""Record batches that pass the CRC but are invalid inside, for tests of the broker's batch validation.

    batch, code = INVALID_BATCHES["codec-7"]()   # bytes with a valid CRC-32C, Kafka's error code for them

Each is built with metaq's BatchBuilder (or kafka-python's, for offset deltas BatchBuilder never writes),
then changed and given a fresh CRC, as a buggy or hostile client would send it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from metaq.errors import ErrorCode
from metaq.protocol.batches import BATCH_HEADER_SIZE
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.compression import compress

__all__ = ["INVALID_BATCHES", "good_batch", "idempotent_batch", "recrc", "set_field"]

_FIELDS = {  # name -> (byte position, struct format) in the 61-byte header
    "attributes": (21, ">h"), "last_offset_delta": (23, ">i"), "base_timestamp": (27, ">q"),
    "max_timestamp": (35, ">q"), "producer_id": (43, ">q"), "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"),
    "record_count": (57, ">i"),
}


def recrc(batch: bytearray) -> bytes:
    """The batch with its length and CRC-32C made to fit its (changed) bytes."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def set_field(batch: bytes | bytearray, field: str, value: int) -> bytearray:
    """A copy with one header field changed (CRC not fixed: see :func:`recrc`)."""
    out = bytearray(batch)
    pos, fmt = _FIELDS[field]
    struct.pack_into(fmt, out, pos, value)
    return out


def good_batch(count: int = 3, *, value: bytes = b"value", compression: str = "none",
               headers: list[tuple[str, bytes | None]] | None = None) -> bytes:
    """A valid batch of ``count`` records, timestamps now + i."""
    builder = BatchBuilder(1 << 30, compression)
    now = int(time.time() * 1000)
    for i in range(count):
        builder.append(now + i, b"k%d" % i, value + b"-%d" % i, headers)
    return builder.build()


def idempotent_batch(producer_id: int, epoch: int, sequence: int, count: int = 3, *, value: bytes = b"value") -> bytes:
    """A valid batch of ``count`` records as an idempotent producer sends it (its id, epoch, base sequence)."""
    batch = set_field(good_batch(count, value=value), "producer_id", producer_id)
    batch = set_field(batch, "producer_epoch", epoch)
    return recrc(set_field(batch, "base_sequence", sequence))


def _with_records(records: bytes, **fields: int) -> bytes:
    """A good batch's header over other record bytes, with ``fields`` changed."""
    batch = bytearray(good_batch()[:BATCH_HEADER_SIZE]) + records
    for field, value in fields.items():
        struct.pack_into(_FIELDS[field][1], batch, _FIELDS[field][0], value)
    return recrc(batch)


def _changed(**fields: int) -> bytes:
    batch = bytearray(good_batch())
    for field, value in fields.items():
        batch = set_field(batch, field, value)
    return recrc(batch)


def _offset_gap() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    now = int(time.time() * 1000)
    for delta in (0, 2, 4):
        builder.append(delta, now, None, b"gap", [])
    return recrc(set_field(builder.build(), "last_offset_delta", 2))  # count 3 agrees, the records do not


def _bad_header_key() -> bytes:
    batch = bytearray(good_batch(1, headers=[("hkey", b"v")]))
    pos = batch.index(b"hkey")
    batch[pos:pos + 4] = b"\xff\xfe\xfd\xfc"
    return recrc(batch)


def _records(batch: bytes) -> bytes:
    return batch[BATCH_HEADER_SIZE:]


INVALID_BATCHES: dict[str, Callable[[], tuple[bytes, int]]] = {
    "garbage-gzip": lambda: (_with_records(b"\x1f\x8b\x08\x00garbage" * 5, attributes=1), ErrorCode.CORRUPT_MESSAGE),
    "truncated-gzip": lambda: (_with_records(compress(1, _records(good_batch()))[:-6], attributes=1),
                               ErrorCode.CORRUPT_MESSAGE),
    "garbage-snappy": lambda: (_with_records(b"\x82SNAPPY\x00garbage" * 5, attributes=2),
                               ErrorCode.CORRUPT_MESSAGE),
    "garbage-lz4": lambda: (_with_records(b"\x04\x22\x4d\x18garbage" * 5, attributes=3),
                            ErrorCode.CORRUPT_MESSAGE),
    "garbage-zstd": lambda: (_with_records(b"\x28\xb5\x2f\xfdgarbage" * 5, attributes=4),
                             ErrorCode.CORRUPT_MESSAGE),
    "codec-7": lambda: (_changed(attributes=7), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    "garbage-records": lambda: (_with_records(b"\xff" * 40), ErrorCode.INVALID_RECORD),
    "count-too-high": lambda: (_changed(record_count=4, last_offset_delta=3), ErrorCode.INVALID_RECORD),
    "count-too-low": lambda: (_changed(record_count=2, last_offset_delta=1), ErrorCode.INVALID_RECORD),
    "empty-batch": lambda: (_with_records(b"", record_count=0, last_offset_delta=0), ErrorCode.INVALID_RECORD),
    "control-flag": lambda: (_changed(attributes=0x20), ErrorCode.INVALID_RECORD),
    "transactional-without-producer-id": lambda: (_changed(attributes=0x10), ErrorCode.INVALID_RECORD),
    "last-offset-delta-max": lambda: (_changed(last_offset_delta=2**31 - 1), ErrorCode.INVALID_RECORD),
    "offset-delta-gap": lambda: (_offset_gap(), ErrorCode.INVALID_RECORD),
    "max-timestamp-lie": lambda: (_changed(max_timestamp=0), ErrorCode.INVALID_RECORD),
    "log-append-time-flag": lambda: (_changed(attributes=0x08), ErrorCode.INVALID_RECORD),
    "producer-id-without-sequence": lambda: (_changed(producer_id=7, base_sequence=-1), ErrorCode.INVALID_RECORD),
    "header-key-not-utf8": lambda: (_bad_header_key(), ErrorCode.INVALID_RECORD),
}
"""name -> () -> (batch bytes with a valid CRC, the Kafka error code a broker must answer for it)."""
