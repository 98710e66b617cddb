"""Producing to brokers before Kafka 0.11: Produce v0..2 and the message sets v0/v1 they carry.

The accumulator always builds record batch v2 (it does not know which broker a batch will go to, and a
batch may be retried to another leader). When the leader's highest Produce version is below v3, the sender
converts each batch just before it is sent, as Kafka's Java producer down-converts a batch built with a
newer magic (``Sender.sendProduceRequest``, 2.8.2)::

    produce_magic(0)  # 0: Produce v0/v1 (Kafka 0.8/0.9) carry magic 0
    produce_magic(2)  # 1: Produce v2 (Kafka 0.10.x) carries magic 1, with timestamps
    message_set_from_batch(batch.seal(), 0)   # the same records as a v0 message set

The records keep their order and relative offsets (0..n-1: the broker assigns the real ones, and its
answer's base offset is the first record's), their timestamps in v1 (v0 has none), and the batch's codec:
a compressed batch becomes one compressed wrapper (gzip, snappy, lz4; magic-0 lz4 with the frame header
checksum Kafka 0.8-0.9 expect, docs/legacy-wire.md). The bytes are written by
:func:`metaq.protocol.legacy.build_message_set`, the encoder the broker's down-conversion uses too (aiokafka's
compiled builder for the messages, metaq's codecs for the wrapper: aiokafka writes the standard lz4 frame
in magic 0, which 0.8/0.9 brokers refuse). Headers have no place in these formats: a batch with any is
refused (Kafka's producer refuses them for magic < 2 too), and so is zstd, which needs Produce v7.
"""

from __future__ import annotations

from metaq.errors import MetaqError
from metaq.protocol import legacy
from metaq.protocol.batches import read_header
from metaq.protocol.records import decode_records

__all__ = ["FIRST_BATCH_PRODUCE_VERSION", "HeadersUnsupportedError", "message_set_from_batch", "produce_magic"]

FIRST_BATCH_PRODUCE_VERSION = 3
"""Produce v3 (Kafka 0.11) is the first to carry record batch v2; v0..2 carry message sets v0/v1."""
_ZSTD = 4


class HeadersUnsupportedError(MetaqError):
    """A record with headers sent to a broker whose Produce version carries message sets v0/v1 (no headers);
    not retriable: the broker cannot store them."""


def produce_magic(version: int) -> int | None:
    """The message format a Produce request version carries: 0 (v0..1), 1 (v2), None (v3+: record batch v2)."""
    if version >= FIRST_BATCH_PRODUCE_VERSION:
        return None
    return 1 if version == 2 else 0


def message_set_from_batch(batch: bytes, magic: int) -> bytes:
    """The producer batch ``batch`` (one v2 record batch, offsets from 0) as a message set of ``magic``
    (module doc). Raises HeadersUnsupportedError for a record with headers, ValueError for zstd."""
    header = read_header(batch)
    codec = header.compression
    if codec == _ZSTD:
        raise ValueError("a zstd batch has no v0/v1 form (the sender refuses zstd below Produce v7)")
    records = decode_records(batch).records
    rows = []
    for offset, timestamp, key, value, headers in records:
        if headers:
            raise HeadersUnsupportedError(
                f"record {offset} has headers: message format v{magic} (Produce below "
                f"v{FIRST_BATCH_PRODUCE_VERSION}, brokers before Kafka 0.11) has no record headers")
        rows.append((offset, timestamp if magic else legacy.NO_TIMESTAMP, key, value))
    return legacy.build_message_set(magic, codec, rows)
