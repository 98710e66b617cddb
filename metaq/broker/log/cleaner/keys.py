"""Produce to a compacted topic: every record needs a key (Kafka's ``LogValidator.validateKey``)."""

from __future__ import annotations

from metaq.errors import InvalidRecordError
from metaq.protocol.batches import Buffer
from metaq.protocol.records import decode_records

__all__ = ["require_keys"]


def require_keys(records: Buffer, partition: str) -> None:
    """InvalidRecordError (INVALID_RECORD, as Kafka 3.9) if a record of ``records`` has no key."""
    for offset, _, key, _, _ in decode_records(records).records:
        if key is None:
            raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic partition "
                                     f"{partition} (record {offset} of the request)")
