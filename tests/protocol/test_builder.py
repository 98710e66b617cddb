"""The v2 batch builder, checked byte for byte against kafka-python's."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metaq.protocol.builder import BatchBuilder

TS = 1700000000000


def reference(records, batch_size=1 << 24) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=batch_size)
    for i, (ts, key, value, headers) in enumerate(records):
        assert b.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(b.build())


def ours(records, batch_size=1 << 24) -> bytes:
    b = BatchBuilder(batch_size)
    for ts, key, value, headers in records:
        assert b.append(ts, key, value, headers)
    return b.build()


record = st.tuples(
    st.integers(TS - 10**6, TS + 10**9),
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=20000),
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(record, min_size=1, max_size=30))
def test_builder_is_byte_identical_to_kafka_python(records):
    assert ours(records) == reference(records)


def test_builder_beyond_the_varint_table():
    records = [(TS + i * 7, None, b"v" * (i % 50), []) for i in range(20000)]  # offset deltas > 16383
    records.append((TS - 5, b"k" * 20000, None, [("h", None)]))  # negative delta, long key
    assert ours(records) == reference(records)


def test_builder_output_reads_back():
    data = ours([(TS, b"k1", b"v1", [("h", b"x")]), (TS + 3, None, None, [])])
    (batch,) = list(MemoryRecords(data))
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(0, TS, b"k1", b"v1", [("h", b"x")]), (1, TS + 3, None, None, [])]


def test_builder_respects_batch_size_but_takes_a_first_record():
    b = BatchBuilder(200)
    assert b.append(TS, None, b"x" * 500)  # first record always fits
    assert not b.append(TS, None, b"y")
    assert b.count == 1
    b = BatchBuilder(200)
    added = 0
    while b.append(TS, None, b"z" * 20):
        added += 1
    assert added == 5 and b.size <= 200
    (batch,) = list(MemoryRecords(b.build()))
    assert len(list(batch)) == 5


def test_gzip_batch_reads_back():
    b = BatchBuilder(1 << 20, compression="gzip")
    for i in range(100):
        b.append(TS + i, None, b"hello world %d" % i)
    data = b.build()
    (batch,) = list(MemoryRecords(data))
    assert batch.compression_type == 1 and batch.validate_crc()
    assert [r.value for r in batch] == [b"hello world %d" % i for i in range(100)]
    assert len(data) < b.size
