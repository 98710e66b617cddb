"""Encoding of Fetch responses (v0..v11) around record slices that stay on disk.

kafka-python's FetchResponse encoder needs the records as bytes; to send log bytes from file to socket
(sendfile) the broker encodes the fixed fields itself and leaves a hole for each partition's records.
The byte layout is checked against kafka-python's decoder in tests/protocol/test_fetch_response.py.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset

MIN_VERSION = 0
MAX_VERSION = 11
_PARTITION_V0 = struct.Struct(">ihq")  # partition_index, error_code, high_watermark


class RecordSource(Protocol):
    """Where a partition's record bytes come from: a slice of a segment file."""

    @property
    def size(self) -> int: ...


@dataclass(slots=True)
class PartitionPart:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: RecordSource | bytes | None
    aborted_transactions: list[tuple[int, int]] | None = None
    """(producer id, first offset) of the aborted transactions in the records (read_committed, v4+)."""


@dataclass(slots=True)
class TopicPart:
    topic: str
    partitions: list[PartitionPart]


def encode_fetch_response(
    version: int, correlation_id: int, topics: Sequence[TopicPart], *, throttle_time_ms: int = 0
) -> list[bytes | RecordSource]:
    """The response as a list of chunks: bytes to write, and record sources to copy in between.

    The first chunk starts with the 4-byte frame size, which counts every chunk after it.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch response v{version} is not supported by this encoder")
    chunks: list[bytes | RecordSource] = []
    head = bytearray(_I32.pack(correlation_id))
    if version >= 1:
        head += _I32.pack(throttle_time_ms)
    if version >= 7:
        head += _I16.pack(0) + _I32.pack(0)  # error_code, session_id (0: no fetch session)
    head += _I32.pack(len(topics))
    for topic in topics:
        name = topic.topic.encode("utf-8")
        head += _I16.pack(len(name)) + name + _I32.pack(len(topic.partitions))
        for part in topic.partitions:
            if version < 4:
                head += _PARTITION_V0.pack(part.partition, part.error_code, part.high_watermark)
            else:
                head += _PARTITION_V4.pack(
                    part.partition, part.error_code, part.high_watermark, part.last_stable_offset
                )
            if version >= 5:
                head += _I64.pack(part.log_start_offset)
            if version >= 4:
                aborted = part.aborted_transactions
                if aborted is None:
                    head += _I32.pack(-1)
                else:
                    head += _I32.pack(len(aborted))
                    for producer_id, first_offset in aborted:
                        head += _ABORTED.pack(producer_id, first_offset)
            if version >= 11:
                head += _I32.pack(-1)  # preferred_read_replica
            records = part.records
            if records is None:
                head += _I32.pack(-1)
            elif isinstance(records, bytes | bytearray | memoryview):
                head += _I32.pack(len(records))
                head += records
            else:
                head += _I32.pack(records.size)
                chunks.append(bytes(head))
                chunks.append(records)
                head = bytearray()
    if head:
        chunks.append(bytes(head))
    total = sum(c.size if not isinstance(c, bytes) else len(c) for c in chunks)
    first = chunks[0]
    assert isinstance(first, bytes)
    chunks[0] = _I32.pack(total) + first
    return chunks
