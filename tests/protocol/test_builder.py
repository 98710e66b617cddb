"""The v2 batch builder, checked byte for byte against kafka-python's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metaq.protocol.builder import BatchBuilder, CompiledBatchBuilder, PyBatchBuilder

BUILDERS = [PyBatchBuilder, CompiledBatchBuilder]  # BatchBuilder is the compiled one where aiokafka has it

TS = 1700000000000


def reference(records, batch_size=1 << 24) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=batch_size)
    for i, (ts, key, value, headers) in enumerate(records):
        assert b.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(b.build())


def ours(records, batch_size=1 << 24, builder=BatchBuilder) -> bytes:
    b = builder(batch_size)
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
    assert ours(records, builder=PyBatchBuilder) == reference(records)
    assert ours(records, builder=CompiledBatchBuilder) == reference(records)


def test_the_compiled_builder_is_the_default():
    assert BatchBuilder is CompiledBatchBuilder


@pytest.mark.parametrize("builder", BUILDERS)
def test_builder_beyond_the_varint_table(builder):
    records = [(TS + i * 7, None, b"v" * (i % 50), []) for i in range(20000)]  # offset deltas > 16383
    records.append((TS - 5, b"k" * 20000, None, [("h", None)]))  # negative delta, long key
    assert ours(records, builder=builder) == reference(records)


@pytest.mark.parametrize("builder", BUILDERS)
def test_builder_output_reads_back(builder):
    data = ours([(TS, b"k1", b"v1", [("h", b"x")]), (TS + 3, None, None, [])], builder=builder)
    (batch,) = list(MemoryRecords(data))
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(0, TS, b"k1", b"v1", [("h", b"x")]), (1, TS + 3, None, None, [])]


@pytest.mark.parametrize("builder", BUILDERS)
def test_builder_respects_batch_size_but_takes_a_first_record(builder):
    b = builder(200)
    assert b.append(TS, None, b"x" * 500)  # first record always fits
    assert not b.append(TS, None, b"y")
    assert b.count == 1
    b = builder(200)
    added = 0
    while b.append(TS, None, b"z" * 20):
        added += 1
    assert added == 5 and b.size <= 200
    (batch,) = list(MemoryRecords(b.build()))
    assert len(list(batch)) == 5


@pytest.mark.parametrize("builder", BUILDERS)
def test_gzip_batch_reads_back(builder):
    b = builder(1 << 20, compression="gzip")
    for i in range(100):
        b.append(TS + i, None, b"hello world %d" % i)
    data = b.build()
    (batch,) = list(MemoryRecords(data))
    assert batch.compression_type == 1 and batch.validate_crc()
    assert [r.value for r in batch] == [b"hello world %d" % i for i in range(100)]
    assert len(data) < b.size


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compiled_builder_compresses_like_the_python_one(codec):
    records = [(TS + i, b"k%d" % (i % 3), b"value %d " % i * 5, [("h", b"x")] if i % 7 else []) for i in range(300)]
    built = []
    for builder in BUILDERS:
        b = builder(1 << 20, compression=codec)
        for ts, key, value, headers in records:
            assert b.append(ts, key, value, headers)
        built.append(b.build())
    assert built[0] == built[1]
    (batch,) = list(MemoryRecords(built[1]))
    assert batch.validate_crc() and batch.compression_type != 0
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in batch] == records


@pytest.mark.parametrize("builder", BUILDERS)
def test_incompressible_records_stay_uncompressed(builder):
    b = builder(1 << 20, compression="gzip")
    b.append(TS, None, bytes(range(256)))
    (batch,) = list(MemoryRecords(b.build()))
    assert batch.compression_type == 0 and batch.validate_crc()


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_add_builds_what_append_builds(builder, codec):
    """add(offset, ...) is the producer's per-record path (the compiled append itself where compiled); the
    batch, compressed or not, is the same as append's."""
    records = [(TS + i, b"k%d" % (i % 3), b"value %d " % i * 5, [("h", b"x")] if i % 7 else []) for i in range(50)]
    appended, added = builder(1 << 20, compression=codec), builder(1 << 20, compression=codec)
    for i, (ts, key, value, headers) in enumerate(records):
        assert appended.append(ts, key, value, headers)
        assert added.add(i, ts, key, value, headers) is not None
    assert added.build() == appended.build()
    (batch,) = list(MemoryRecords(added.build()))
    assert batch.compression_type == (1 if codec == "gzip" else 0) and batch.validate_crc()


@pytest.mark.parametrize("builder", BUILDERS)
def test_add_says_none_when_full(builder):
    b = builder(200)
    assert b.add(0, TS, None, b"x" * 500, []) is not None  # a first record always fits
    assert b.add(1, TS, None, b"y", []) is None


def test_the_python_add_refuses_offsets_out_of_order():
    b = PyBatchBuilder(1 << 20)
    with pytest.raises(ValueError, match="record offset 1 out of order: the batch has 0 records"):
        b.add(1, TS, None, b"v", [])
