"""The hand-written Fetch response encoder must produce exactly what kafka-python's codec decodes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metaq.protocol.fetch_response import PartitionPart, TopicPart, encode_fetch_response


@dataclass
class FileSlice:
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def _batch(base_offset: int, n: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1700000000000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
    return struct.pack(">q", base_offset) + bytes(b.build())[8:]


def _flatten(chunks: list) -> bytes:
    return b"".join(c if isinstance(c, bytes) else c.data for c in chunks)


@pytest.mark.parametrize("version", range(12))
def test_decodes_with_kafka_python(version: int) -> None:
    raw = _batch(42, 3)
    topics = [
        TopicPart("t1", [
            PartitionPart(0, 0, 45, 45, 40, FileSlice(raw)),
            PartitionPart(1, 1, 10, 10, 5, None),
            PartitionPart(2, 0, 7, 7, 0, b""),
        ]),
        TopicPart("ünïcode", [PartitionPart(3, 6, -1, -1, -1, None)]),
    ]
    wire = _flatten(encode_fetch_response(version, 99, topics, throttle_time_ms=3))
    (size,) = struct.unpack_from(">i", wire)
    assert size == len(wire) - 4
    resp = FetchResponse.decode(memoryview(wire)[4:], version=version, header=True)
    assert resp.header.correlation_id == 99
    if version >= 1:
        assert resp.throttle_time_ms == 3
    p0, p1, p2 = resp.responses[0].partitions
    assert resp.responses[0].topic == "t1"
    assert (p0.partition_index, p0.error_code, p0.high_watermark) == (0, 0, 45)
    if version >= 4:
        assert p0.last_stable_offset == 45
    if version >= 5:
        assert p0.log_start_offset == 40
    records = [(r.offset, r.key, r.value) for b in MemoryRecords(bytes(p0.records)) for r in b]
    assert records == [(42, b"k0", b"v0"), (43, b"k1", b"v1"), (44, b"k2", b"v2")]
    assert p1.error_code == 1 and p1.records is None
    assert p2.records == b""
    assert resp.responses[1].topic == "ünïcode" and resp.responses[1].partitions[0].error_code == 6
    # and kafka-python re-encodes the decoded response to the same bytes
    resp.with_header(correlation_id=99)
    assert resp.encode(header=True, framed=True) == wire


def test_rejects_versions_it_cannot_encode() -> None:
    with pytest.raises(ValueError):
        encode_fetch_response(12, 1, [])
