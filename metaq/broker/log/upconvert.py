"""Produce v0..2: a v0/v1 message set, validated and converted to one record batch v2 before it is appended
(Kafka's LogValidator, its convert path; docs/legacy-wire.md).

What is checked, as Kafka's broker checks a v0/v1 set: every entry's size and CRC-32, one magic byte for the
whole set (0 or 1), attributes a client may set (a codec, no LogAppendTime: only a broker sets it), a
compressed wrapper holding at least one message, none of them compressed, of the wrapper's magic, with
inner offsets that never go backwards, and decompressing to no more than the bound the v2
path has (:func:`metaq.broker.log.validator.decompressed_limit`). Anything else refuses the whole set:
CorruptRecordError (a Produce v0..2 client knows CORRUPT_MESSAGE; INVALID_RECORD came with Produce v8) or
MessageSizeTooLargeError for a compression bomb.

The batch gets the records in order with their timestamps (-1 for v0 messages, which have none: Kafka
keeps ``NO_TIMESTAMP``), no headers, and the codec of the set's wrappers (compression kept; a set of plain
messages stays plain). Offsets are then assigned by the log like any produced batch, and on a LogAppendTime
topic the log gives it the append time as it does a v2 batch (docs/legacy-wire.md).
"""

from __future__ import annotations

from metaq.protocol import legacy
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.compression import codec_name

__all__ = ["upconvert"]

_UNLIMITED_BATCH = 1 << 62


def upconvert(records: bytes, limit: int) -> bytes:
    """The v0/v1 message set ``records`` as one record batch v2 (module doc); a wrapper may decompress to
    ``limit`` bytes."""
    produced = legacy.read_produced(records, limit)
    codec_name(produced.codec)  # UnsupportedCompressionError (a CorruptRecordError) for an unknown codec id
    builder = BatchBuilder(_UNLIMITED_BATCH, codec_name(produced.codec))
    append = builder.append
    for _offset, timestamp, key, value, _headers in produced.records:
        append(timestamp, key, value)
    return builder.build()
