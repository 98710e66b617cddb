"""The accumulator's batching rules (the v2 batch builder is tested in tests/protocol/test_builder.py)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
from kafka.record.memory_records import MemoryRecords

from metaq.errors import MessageSizeTooLargeError, MetaqError
from metaq.producer import accumulator
from metaq.producer.accumulator import RecordAccumulator, TopicPartition
from metaq.protocol.builder import CompiledBatchBuilder, PyBatchBuilder

TP = TopicPartition("t", 0)
TS = 1700000000000


def make_acc(**kw) -> tuple[RecordAccumulator, list[int]]:
    wakes: list[int] = []
    options = {"batch_size": 1000, "buffer_memory": 1 << 20, "linger_ms": 50, "max_block_ms": 100}
    options.update(kw)
    return RecordAccumulator(wakeup=lambda: wakes.append(1), **options), wakes


def test_linger_makes_a_batch_ready():
    acc, wakes = make_acc(linger_ms=50)
    acc.append(*TP, TS, None, b"v")
    acc.append(*TP, TS, None, b"v")
    assert len(wakes) == 1  # only the new batch wakes the sender
    now = time.monotonic()
    ready, next_check = acc.ready_partitions(now)
    assert ready == [] and now < next_check <= now + 0.05
    assert acc.ready_partitions(now + 0.051)[0] == [TP]


def test_a_full_batch_is_ready_at_once():
    acc, wakes = make_acc(batch_size=200, linger_ms=10000)
    for _ in range(20):
        acc.append(*TP, TS, None, b"x" * 30)
    assert len(wakes) > 1
    assert acc.ready_partitions(time.monotonic())[0] == [TP]
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())
    assert len(batches) == 1 and batches[0].sealed and batches[0].record_count == 3  # 61 + 3 * 39 <= 200


def test_flush_makes_everything_ready():
    acc, _ = make_acc(linger_ms=10000)
    acc.append(*TP, TS, None, b"v")
    assert acc.ready_partitions(time.monotonic())[0] == []
    pending = acc.begin_flush()
    assert len(pending) == 1
    assert acc.ready_partitions(time.monotonic())[0] == [TP]
    acc.end_flush()


def test_drain_mutes_until_done_and_keeps_order_on_retry():
    acc, _ = make_acc(batch_size=100, linger_ms=0)
    for i in range(10):
        acc.append(*TP, TS, None, b"%02d" % i * 10)
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
        acc.append(*tp, TS, None, b"x" * 800)
    (taken,) = acc.drain([tps], 100, time.monotonic())
    assert [b.tp for b in taken] == [tps[0]]
    (taken,) = acc.drain([tps[1:]], 2000, time.monotonic())
    assert [b.tp for b in taken] == tps[1:]


def test_record_larger_than_max_request_size_is_rejected():
    acc, _ = make_acc(max_record_size=1000)
    with pytest.raises(MessageSizeTooLargeError, match="max.request.size"):
        acc.append(*TP, TS, None, b"x" * 1000)


def test_full_buffer_blocks_then_times_out():
    acc, _ = make_acc(buffer_memory=1000, batch_size=1000, max_block_ms=100)
    acc.append(*TP, TS, None, b"x" * 900)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="buffer.memory"):
        acc.append(*TP, TS, None, b"y" * 500)
    assert time.monotonic() - started > 0.09  # blocked for max.block.ms before giving up


def test_full_buffer_unblocks_when_memory_is_released():
    acc, _ = make_acc(buffer_memory=1000, batch_size=1000, max_block_ms=5000, linger_ms=0)
    first = acc.append(*TP, TS, None, b"x" * 900)
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())

    def release():
        time.sleep(0.1)
        batches[0].complete(0)
        acc.done_with(batches[0])

    threading.Thread(target=release).start()
    future = acc.append(*TP, TS, None, b"y" * 500)
    assert not future.done()
    assert batches[0].wait(1) and first.result().offset == 0


def test_close_releases_blocked_appends():
    acc, _ = make_acc(buffer_memory=1000, batch_size=1000, max_block_ms=5000)
    acc.append(*TP, TS, None, b"x" * 900)
    threading.Timer(0.1, acc.begin_close).start()
    with pytest.raises(MetaqError, match="closed"):
        acc.append(*TP, TS, None, b"y" * 500)


def test_complete_assigns_offsets_and_timestamps():
    acc, _ = make_acc(linger_ms=0)
    futures = [acc.append(*TP, TS + i, b"k", b"v") for i in range(3)]
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())
    batches[0].complete(40)
    assert [f.result() for f in futures] == [("t", 0, 40 + i, TS + i) for i in range(3)]
    batches[0].complete(-1)  # idempotent for already-resolved futures


def test_a_pending_batch_does_not_keep_dropped_futures_alive():
    """Fire-and-forget sends leave nothing per record for the cyclic GC: the batch holds no futures."""
    acc, _ = make_acc(linger_ms=10000)
    futures = [acc.append(*TP, TS, None, b"v") for _ in range(3)]
    refs = [weakref.ref(f) for f in futures]
    gc.disable()
    try:
        del futures
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()


@pytest.mark.parametrize("builder", [PyBatchBuilder, CompiledBatchBuilder])
def test_batches_read_back_with_either_builder(monkeypatch, builder):
    monkeypatch.setattr(accumulator, "BatchBuilder", builder)
    acc, _ = make_acc(linger_ms=0)
    futures = [acc.append(*TP, TS + i, b"k", b"v%d" % i, [("h", b"x")] if i == 1 else None) for i in range(3)]
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())
    (batch,) = list(MemoryRecords(batches[0].seal()))
    assert [(r.offset, r.timestamp, r.value, list(r.headers)) for r in batch] == [
        (0, TS, b"v0", []), (1, TS + 1, b"v1", [("h", b"x")]), (2, TS + 2, b"v2", [])]
    batches[0].complete(7)
    assert [f.result(0).offset for f in futures] == [7, 8, 9]


@pytest.mark.parametrize("builder", [PyBatchBuilder, CompiledBatchBuilder])
def test_buffer_memory_is_never_exceeded_and_counts_exactly_the_batches(monkeypatch, builder):
    """The inline path adds without a size check only while batch.size fits in what is left."""
    monkeypatch.setattr(accumulator, "BatchBuilder", builder)
    acc, _ = make_acc(buffer_memory=3000, batch_size=1000, linger_ms=10000, max_block_ms=50)
    tps = [TopicPartition("t", p) for p in range(3)]
    appended = 0
    with pytest.raises(TimeoutError, match="buffer.memory"):
        while True:
            acc.append(*tps[appended % 3], TS, b"k", b"x" * (appended % 97))
            appended += 1
            assert acc.buffered_bytes <= 3000
    assert appended > 30 and acc.buffered_bytes > 3000 - 61 - 21 - 97  # the last record found no room
    batches = acc.unsent_batches()
    assert acc.buffered_bytes == sum(b.size for b in batches) == sum(len(b.seal()) for b in batches)
    assert sum(b.record_count for b in batches) == appended
    for batch in batches:
        acc.done_with(batch)
    assert acc.buffered_bytes == 0


@pytest.mark.parametrize("builder", [PyBatchBuilder, CompiledBatchBuilder])
def test_a_record_without_a_timestamp_is_stamped_by_the_builder(monkeypatch, builder):
    monkeypatch.setattr(accumulator, "BatchBuilder", builder)
    acc, _ = make_acc(linger_ms=0)
    before = time.time() * 1000
    futures = [acc.append(*TP, None, None, b"v%d" % i) for i in range(3)]
    after = time.time() * 1000
    (batches,) = acc.drain([[TP]], 1 << 20, time.monotonic())
    batches[0].complete(7)
    records = list(MemoryRecords(batches[0].seal()).next_batch())
    assert [f.result().timestamp_ms for f in futures] == [r.timestamp for r in records]
    assert all(before - 1 <= r.timestamp <= after + 1 for r in records)
    assert [f.result().offset for f in futures] == [7, 8, 9]


def test_a_closed_accumulator_refuses_appends_to_an_open_batch():
    acc, _ = make_acc(linger_ms=10000)
    acc.append(*TP, TS, None, b"v")
    acc.begin_close()
    with pytest.raises(MetaqError, match="closed"):
        acc.append(*TP, TS, None, b"v")
