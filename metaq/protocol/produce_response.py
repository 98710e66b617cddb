"""Encoding of Produce responses (v0..v7), framed, with struct packing.

Every Produce request is answered, usually with one topic and one partition; building kafka-python's response
objects and running its generic encoder cost as much as appending a small batch (docs/performance.md, "The
broker's cost per request"). The layout follows Kafka's ProduceResponse schema: per partition ``index``,
``error_code``, ``base_offset``, ``log_append_time_ms`` (v2+), ``log_start_offset`` (v5+); ``throttle_time_ms``
(v1+) after the topics; the response header (v0..v8 are not flexible) is the correlation id alone. The bytes
are checked against kafka-python's encoder in tests/protocol/test_produce_response.py.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

MIN_VERSION = 0
MAX_VERSION = 7

_HEAD = struct.Struct(">ii")  # frame size, correlation_id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = {  # by version: the fixed fields of one partition's answer
    0: struct.Struct(">ihq"), 1: struct.Struct(">ihq"), 2: struct.Struct(">ihqq"), 3: struct.Struct(">ihqq"),
    4: struct.Struct(">ihqq"), 5: struct.Struct(">ihqqq"), 6: struct.Struct(">ihqqq"), 7: struct.Struct(">ihqqq"),
}


class PartitionAnswer(NamedTuple):
    """One partition's outcome as the answer carries it."""

    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


class TopicAnswer(NamedTuple):
    name: str
    partitions: Sequence[PartitionAnswer]


def encode_produce_response(version: int, correlation_id: int, topics: Sequence[TopicAnswer],
                            throttle_time_ms: int = 0) -> bytes:
    """The framed response: size, correlation id, body."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce response v{version} is not supported by this encoder")
    pack = _PARTITION[version].pack
    body = [_I32.pack(len(topics))]
    for topic in topics:
        name = topic.name.encode("utf-8")
        body.append(_I16.pack(len(name)) + name + _I32.pack(len(topic.partitions)))
        if version >= 5:
            body += [pack(*p) for p in topic.partitions]
        elif version >= 2:
            body += [pack(p[0], p[1], p[2], p[3]) for p in topic.partitions]
        else:
            body += [pack(p[0], p[1], p[2]) for p in topic.partitions]
    if version >= 1:
        body.append(_I32.pack(throttle_time_ms))
    payload = b"".join(body)
    return _HEAD.pack(len(payload) + 4, correlation_id) + payload
