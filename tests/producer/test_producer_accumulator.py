"""The v2 batch builder (checked against kafka-python's) and the accumulator's batching rules."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metaq.errors import MessageSizeTooLargeError, MetaqError
from metaq.producer.accumulator import RecordAccumulator, TopicPartition
from metaq.protocol.builder import BatchBuilder

TP = TopicPartition("t", 0)
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


def make_acc(**kw) -> tuple[RecordAccumulator, list[int]]:
    wakes: list[int] = []
    options = {"batch_size": 1000, "buffer_memory": 1 << 20, "linger_ms": 50, "max_block_ms": 100}
    options.update(kw)
    return RecordAccumulator(wakeup=lambda: wakes.append(1), **options), wakes


def test_linger_makes_a_batch_ready():
    acc, wakes = make_acc(linger_ms=50)
    acc.append(TP, TS, None, b"v")
    acc.append(TP, TS, None, b"v")
    assert len(wakes) == 1  # only the new batch wakes the sender
    now = time.monotonic()
    ready, next_check = acc.ready_partitions(now)
    assert ready == [] and now < next_check <= now + 0.05
    assert acc.ready_partitions(now + 0.051)[0] == [TP]


def test_a_full_batch_is_ready_at_once():
    acc, wakes = make_acc(batch_size=200, linger_ms=10000)
    for _ in range(20):
        acc.append(TP, TS, None, b"x" * 30)
    assert len(wakes) > 1
    assert acc.ready_partitions(time.monotonic())[0] == [TP]
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())
    assert len(batches) == 1 and batches[0].sealed and batches[0].record_count == 3  # 61 + 3 * 39 <= 200


def test_flush_makes_everything_ready():
    acc, _ = make_acc(linger_ms=10000)
    acc.append(TP, TS, None, b"v")
    assert acc.ready_partitions(time.monotonic())[0] == []
    pending = acc.begin_flush()
    assert len(pending) == 1
    assert acc.ready_partitions(time.monotonic())[0] == [TP]
    acc.end_flush()


def test_drain_mutes_until_done_and_keeps_order_on_retry():
    acc, _ = make_acc(batch_size=100, linger_ms=0)
    for i in range(10):
        acc.append(TP, TS, None, b"%02d" % i * 10)
    now = time.monotonic()
    (first,) = acc.drain([[TP]], 1 << 20, now)
    assert acc.ready_partitions(now)[0] == []  # muted while in flight
    acc.reenqueue(first[0], retry_at=now + 10)
    assert acc.ready_partitions(now)[0] == []  # the retry waits; later batches must not overtake it
    assert acc.drain([[TP]], 1 << 20, now) == [[]]
    (again,) = acc.drain([[TP]], 1 << 20, now + 11)
    assert again[0] is first[0]
    acc.done_with(again[0])
    assert acc.ready_partitions(now)[0] == [TP]


def test_drain_respects_max_request_size_but_sends_at_least_one_batch():
    acc, _ = make_acc(batch_size=1000, linger_ms=0)
    tps = [TopicPartition("t", p) for p in range(3)]
    for tp in tps:
        acc.append(tp, TS, None, b"x" * 800)
    (taken,) = acc.drain([tps], 100, time.monotonic())
    assert [b.tp for b in taken] == [tps[0]]
    (taken,) = acc.drain([tps[1:]], 2000, time.monotonic())
    assert [b.tp for b in taken] == tps[1:]


def test_record_larger_than_max_request_size_is_rejected():
    acc, _ = make_acc(max_record_size=1000)
    with pytest.raises(MessageSizeTooLargeError, match="max.request.size"):
        acc.append(TP, TS, None, b"x" * 1000)


def test_full_buffer_blocks_then_times_out():
    acc, _ = make_acc(buffer_memory=1000, batch_size=1000, max_block_ms=100)
    acc.append(TP, TS, None, b"x" * 900)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="buffer.memory"):
        acc.append(TP, TS, None, b"y" * 500)
    assert time.monotonic() - started > 0.09  # blocked for max.block.ms before giving up


def test_full_buffer_unblocks_when_memory_is_released():
    acc, _ = make_acc(buffer_memory=1000, batch_size=1000, max_block_ms=5000, linger_ms=0)
    acc.append(TP, TS, None, b"x" * 900)
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())

    def release():
        time.sleep(0.1)
        batches[0].complete(0)
        acc.done_with(batches[0])

    threading.Thread(target=release).start()
    future = acc.append(TP, TS, None, b"y" * 500)
    assert not future.done()
    assert batches[0].wait(1) and batches[0]._futures[0].result().offset == 0


def test_close_releases_blocked_appends():
    acc, _ = make_acc(buffer_memory=1000, batch_size=1000, max_block_ms=5000)
    acc.append(TP, TS, None, b"x" * 900)
    threading.Timer(0.1, acc.begin_close).start()
    with pytest.raises(MetaqError, match="closed"):
        acc.append(TP, TS, None, b"y" * 500)


def test_complete_assigns_offsets_and_timestamps():
    acc, _ = make_acc(linger_ms=0)
    futures = [acc.append(TP, TS + i, b"k", b"v") for i in range(3)]
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())
    batches[0].complete(40)
    assert [f.result() for f in futures] == [("t", 0, 40 + i, TS + i) for i in range(3)]
    batches[0].complete(-1)  # idempotent for already-resolved futures
