"""What a batch must satisfy inside its CRC before the log appends it (Kafka's LogValidator).

:func:`metaq.protocol.batches.validate_batches` checks what every batch needs to be stored and served
(sizes, magic 2, CRC-32C). A CRC only proves the bytes arrived as the client sent them, not that they make
sense: a batch with garbage records, a record count that lies or a codec nobody can read would be stored
and then stall every consumer of the partition. So, as Kafka's broker does, every batch is also opened:

* attributes: no control batches (only the broker writes transaction markers), a transactional batch only
  with a producer id (docs/transactions.md), no LogAppendTime type (the broker sets that), no unknown bits,
  a known codec (all four are installed: cramjam);
* a record count of at least 1 that matches ``lastOffsetDelta + 1``; a producer id only with a sequence;
* the records (decompressed first) walked by :func:`metaq.protocol.records.check_records`: well formed,
  offset deltas 0..n-1, filling the batch exactly;
* ``maxTimestamp`` equal to the largest record timestamp (the time index and retention trust it).

The walk runs on aiokafka's compiled record reader where it is installed (about 0.2 us a 100-byte record,
0.7 us in pure Python: ``python -m bench.decode``). Like Kafka's broker, it reads a key or value length
below -1 as null, which librdkafka would refuse to read; no client writes one, and refusing them as the
pure-Python walk does would cost that walk's time on every batch.

Errors: InvalidRecordError (INVALID_RECORD), UnsupportedCompressionError (UNSUPPORTED_COMPRESSION_TYPE),
CorruptRecordError for a payload that does not decompress (CORRUPT_MESSAGE), MessageSizeTooLargeError for
a payload that decompresses to more than :func:`decompressed_limit` (a compression bomb).
"""

from __future__ import annotations

from collections.abc import Sequence

from metaq.errors import CorruptRecordError, InvalidRecordError, MessageSizeTooLargeError
from metaq.protocol.batches import BATCH_HEADER_SIZE, BatchHeader, Buffer
from metaq.protocol.compression import decompress
from metaq.protocol.records import check_records

__all__ = ["decompressed_limit", "validate_records"]

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_KNOWN_ATTRIBUTES = 0x3F
_MIN_DECOMPRESSED_LIMIT = 64 << 20
_DECOMPRESSION_RATIO = 32


def decompressed_limit(max_message_bytes: int) -> int:
    """Most bytes one compressed batch may expand to: 32x ``message.max.bytes``, at least 64 MiB.

    Kafka streams the records out of a compressed batch; metaq decompresses the whole payload, so without a
    bound a 1 MB gzip bomb would cost the broker a gigabyte."""
    return max(_MIN_DECOMPRESSED_LIMIT, _DECOMPRESSION_RATIO * max_message_bytes)


def validate_records(buf: Buffer, headers: Sequence[BatchHeader], limit: int) -> None:
    """Check the contents of the batches ``headers`` describe (already size-, magic- and CRC-checked); a
    compressed batch may expand to ``limit`` bytes (see :func:`decompressed_limit`).

    Raises one of the errors in the module doc, naming the batch's byte position and the problem."""
    data = buf if type(buf) is bytes else bytes(buf)
    pos = 0
    for header in headers:
        try:
            _validate_batch(data, pos, header, limit)
        except (CorruptRecordError, MessageSizeTooLargeError) as e:
            raise type(e)(f"batch at byte {pos}: {e}") from None
        pos += header.size


def _validate_batch(data: bytes, pos: int, header: BatchHeader, limit: int) -> None:
    _check_attributes(header.attributes)
    if header.attributes & _TRANSACTIONAL and header.producer_id < 0:
        raise InvalidRecordError("transactional batch without a producer id")
    count = header.record_count
    if count < 1:
        raise InvalidRecordError(f"record count {count}: a batch holds at least one record")
    if header.last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"last offset delta {header.last_offset_delta} does not match the record count {count}")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(f"producer id {header.producer_id} with base sequence {header.base_sequence}")
    body, start, stop = data, pos + BATCH_HEADER_SIZE, pos + header.size
    codec = header.attributes & _CODEC_MASK
    if codec:
        body = decompress(codec, data[start:stop], limit)  # UnsupportedCompressionError for an unknown id
        start, stop = 0, len(body)
    max_timestamp = header.base_timestamp + check_records(body, start, stop, count)
    if max_timestamp != header.max_timestamp:
        raise InvalidRecordError(
            f"max timestamp {header.max_timestamp} is not the largest record timestamp {max_timestamp}")


def _check_attributes(attributes: int) -> None:
    if attributes & _CONTROL:
        raise InvalidRecordError("control batch: clients may not write control records")
    if attributes & _LOG_APPEND_TIME:
        raise InvalidRecordError("LogAppendTime timestamp type: only a broker sets it")
    if attributes & ~_KNOWN_ATTRIBUTES & 0xFFFF:
        raise InvalidRecordError(f"unknown attribute bits in {attributes & 0xFFFF:#06x}")
