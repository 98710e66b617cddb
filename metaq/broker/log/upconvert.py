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
messages stays plain). Offsets are then assigned by the log like any produced batch.
"""

from __future__ import annotations

from metaq.errors import CorruptRecordError
from metaq.protocol import legacy
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.compression import codec_name

__all__ = ["upconvert"]

_CLIENT_ATTRIBUTES = legacy.CODEC_MASK
"""The attribute bits a producer may set on a v0/v1 message: the codec (bit 3, LogAppendTime, is the
broker's; higher bits are unused)."""
_UNLIMITED_BATCH = 1 << 62


def upconvert(records: bytes, limit: int) -> bytes:
    """The v0/v1 message set ``records`` as one record batch v2 (module doc); a wrapper may decompress to
    ``limit`` bytes."""
    messages: list[legacy.LegacyMessage] = []
    codec = 0
    magic = -1
    for entry in legacy.walk_message_set(records):
        where = f"message at byte {entry.position} (offset {entry.offset})"
        if magic < 0:
            magic = entry.magic
        elif entry.magic != magic:
            raise CorruptRecordError(f"{where}: magic {entry.magic} after messages of magic {magic}")
        if entry.attributes & ~_CLIENT_ATTRIBUTES & 0xFF:
            raise CorruptRecordError(f"{where}: attributes {entry.attributes:#04x} a producer may not set")
        if not entry.attributes & legacy.CODEC_MASK:
            messages.append(entry)
            continue
        codec = entry.attributes & legacy.CODEC_MASK
        codec_name(codec)  # UnsupportedCompressionError for an unknown codec id
        messages.extend(_inner(entry, limit, where))
    if not messages:
        raise CorruptRecordError("an empty message set")
    builder = BatchBuilder(_UNLIMITED_BATCH, codec_name(codec))
    for message in messages:
        builder.append(message.timestamp, message.key, message.value)
    return builder.build()


def _inner(wrapper: legacy.LegacyMessage, limit: int, where: str) -> list[legacy.LegacyMessage]:
    """A wrapper's inner messages, checked (module doc)."""
    if wrapper.value is None:
        raise CorruptRecordError(f"{where}: a compressed message with a null value")
    inner = legacy.inflate(wrapper.attributes & legacy.CODEC_MASK, wrapper.magic, wrapper.value, where, limit)
    try:
        messages = list(legacy.walk_message_set(inner))
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{where}: {e}") from None
    if not messages:
        raise CorruptRecordError(f"{where}: a compressed message holding no message")
    for i, message in enumerate(messages):
        if message.attributes & legacy.CODEC_MASK:
            raise CorruptRecordError(f"{where}: inner message {i} is compressed too (nested compression)")
        if message.magic != wrapper.magic:
            raise CorruptRecordError(f"{where}: inner message {i} has magic {message.magic}, "
                                     f"the wrapper {wrapper.magic}")
    try:
        legacy.check_inner_offsets(messages, where)
    except CorruptRecordError as e:
        raise CorruptRecordError(str(e)) from None  # a CORRUPT_MESSAGE for Produce v0..2 clients
    return messages
