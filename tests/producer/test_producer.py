"""Producer end to end against FakeBroker (real local sockets), with metadata from an in-memory layout."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait
from typing import Any

import pytest

from metaq.client import cluster as cluster_module
from metaq.errors import (
    BrokerConnectionError,
    MessageSizeTooLargeError,
    MetaqError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceError,
    UnknownTopicError,
)
from metaq.producer import ClusterMetadata, Producer, RecordMetadata
from metaq.producer.partitioner import murmur2_partition
from metaq.producer.sender import THREAD_NAME
from metaq.protocol.batches import read_header
from metaq.testing.wait import wait_until
from tests.client.client_fake_broker import CLOSE, FakeBroker

pytestmark = pytest.mark.timeout(60)


def make_producer(layout, **props) -> Producer:
    config = {"linger.ms": 5, "retry.backoff.ms": 5, "retry.backoff.max.ms": 20, "request.timeout.ms": 5000}
    config.update({k.replace("_", "."): v for k, v in props.items()})
    return Producer(config, metadata=ClusterMetadata(layout))


def produce_requests(fake_broker: FakeBroker) -> list:
    return [r for r in fake_broker.received if r.api_key == 0]


def test_send_flush_and_offsets(fake_broker, layout):
    with make_producer(layout, linger_ms=10000) as producer:
        futures = [producer.send("t1", b"v%d" % i, partition=1, timestamp_ms=1000 + i) for i in range(100)]
        assert not any(f.done() for f in futures)
        producer.flush(timeout=10)
        assert all(f.done() for f in futures)
        assert [f.result() for f in futures] == [RecordMetadata("t1", 1, i, 1000 + i) for i in range(100)]
    assert [r.value for r in fake_broker.records("t1", 1)] == [b"v%d" % i for i in range(100)]
    assert len(produce_requests(fake_broker)) == 1
    assert produce_requests(fake_broker)[0].version == 7


def test_linger_sends_without_flush(fake_broker, layout):
    with make_producer(layout, linger_ms=20) as producer:
        started = time.monotonic()
        metadata = producer.send("t1", b"x", partition=0).result(timeout=5)
        assert metadata.offset == 0 and time.monotonic() - started >= 0.015


def test_one_request_per_broker_for_all_ready_partitions(fake_broker, layout):
    with make_producer(layout, linger_ms=10000) as producer:
        futures = [producer.send("t1", b"v", partition=p) for p in (0, 1, 2, 0)]
        producer.flush(10)
        assert [f.result().partition for f in futures] == [0, 1, 2, 0]
    (request,) = produce_requests(fake_broker)
    assert sorted(p.index for p in request.request.topic_data[0].partition_data) == [0, 1, 2]


def test_keys_are_placed_like_the_java_client(fake_broker, layout):
    keys = [b"user-%d" % i for i in range(30)]
    with make_producer(layout) as producer:
        futures = [producer.send("t1", b"v", key=k) for k in keys]
        producer.flush(10)
        assert [f.result().partition for f in futures] == [murmur2_partition(k, [0, 1, 2]) for k in keys]
        assert producer.partitions_for("t1") == [0, 1, 2]


def test_null_keys_are_spread_round_robin(fake_broker, layout):
    with make_producer(layout) as producer:
        futures = [producer.send("t1", b"v") for _ in range(30)]
        producer.flush(10)
    counts = [sum(1 for f in futures if f.result().partition == p) for p in range(3)]
    assert counts == [10, 10, 10]


def test_headers_and_null_value_arrive(fake_broker, layout):
    with make_producer(layout) as producer:
        producer.send("t1", None, key=b"k", partition=2, headers=[("trace", b"abc"), ("empty", None)]).result(5)
    (record,) = fake_broker.records("t1", 2)
    assert (record.key, record.value, record.headers) == (b"k", None, [("trace", b"abc"), ("empty", None)])


def test_acks_0_resolves_with_offset_minus_1(fake_broker, layout):
    with make_producer(layout, acks=0) as producer:
        futures = [producer.send("t1", b"v%d" % i, partition=0) for i in range(5)]
        producer.flush(10)
        assert [f.result().offset for f in futures] == [-1] * 5
    # nothing tells us when the broker has read them
    wait_until(lambda: len(fake_broker.records("t1", 0)) >= 5, 5, "the fake_broker to read the acks=0 batch")
    assert [r.value for r in fake_broker.records("t1", 0)] == [b"v%d" % i for i in range(5)]
    assert produce_requests(fake_broker)[0].request.acks == 0


def test_gzip_batches_arrive(fake_broker, layout):
    with make_producer(layout, compression_type="gzip", linger_ms=10000) as producer:
        futures = [producer.send("t1", b"compressible %d" % i, partition=0) for i in range(300)]
        producer.flush(10)
        assert futures[-1].result().offset == 299
    assert [r.value for r in fake_broker.records("t1", 0)] == [b"compressible %d" % i for i in range(300)]
    (request,) = produce_requests(fake_broker)
    records = request.request.topic_data[0].partition_data[0].records
    assert records[21:23] == b"\x00\x01"  # attributes: gzip


def test_acks_all_is_sent_as_minus_1(fake_broker, layout):
    with make_producer(layout, acks="all") as producer:
        producer.send("t1", b"v", partition=0).result(5)
    assert produce_requests(fake_broker)[0].request.acks == -1


def test_retriable_error_is_retried_after_a_metadata_refresh(fake_broker, layout):
    fake_broker.produce_errors[("t1", 0)] = [6, 6]  # NOT_LEADER_OR_FOLLOWER twice
    with make_producer(layout) as producer:
        reads = layout.reads
        assert producer.send("t1", b"v", partition=0).result(5).offset == 0
        assert layout.reads > reads  # ZooKeeper was re-read
    assert len(produce_requests(fake_broker)) == 3


def test_retries_exhausted_fail_the_future_with_the_broker_error(fake_broker, layout):
    fake_broker.produce_errors[("t1", 0)] = [6] * 10
    with make_producer(layout, retries=2) as producer:
        future = producer.send("t1", b"v", partition=0)
        with pytest.raises(NotLeaderForPartitionError, match="t1-0"):
            future.result(5)
    assert len(produce_requests(fake_broker)) == 3


def test_fatal_error_is_not_retried(fake_broker, layout):
    fake_broker.produce_errors[("t1", 0)] = [10]  # MESSAGE_TOO_LARGE
    with make_producer(layout) as producer:
        ok = producer.send("t1", b"v", partition=1)
        failed = producer.send("t1", b"v", partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            failed.result(5)
        assert ok.result(5).offset == 0
    assert len(produce_requests(fake_broker)) == 1


def test_broken_connection_is_retried_in_order(fake_broker, layout):
    calls = []

    def drop_first(r):
        calls.append(r)
        return CLOSE if len(calls) == 1 else fake_broker.produce(r)

    fake_broker.handlers[0] = drop_first
    with make_producer(layout, linger_ms=0, batch_size=200) as producer:
        futures = [producer.send("t1", b"%03d" % i, partition=0) for i in range(200)]
        producer.flush(10)
        assert [f.result().offset for f in futures] == list(range(200))
    assert [r.value for r in fake_broker.records("t1", 0)] == [b"%03d" % i for i in range(200)]
    assert fake_broker.connections == 2


def _producer_fields(request) -> list[tuple[int, int, int, int]]:
    """(partition, producer id, epoch, base sequence) of each batch of a Produce request."""
    out = []
    for data in request.request.topic_data[0].partition_data:
        header = read_header(bytes(data.records))
        out.append((data.index, header.producer_id, header.producer_epoch, header.base_sequence))
    return out


def test_batches_carry_the_producer_id_and_per_partition_sequences(fake_broker, layout):
    with make_producer(layout, linger_ms=0, batch_size=200) as producer:
        futures = [producer.send("t1", b"%03d" % i, partition=i % 2) for i in range(60)]
        producer.flush(10)
        assert all(f.result().offset >= 0 for f in futures)
    assert fake_broker.producer_ids == [1000]
    fields = [f for r in produce_requests(fake_broker) for f in _producer_fields(r)]
    for partition in (0, 1):
        mine = [f for f in fields if f[0] == partition]
        assert {(pid, epoch) for _, pid, epoch, _ in mine} == {(1000, 0)}
        counts = [len(b) for b in _batch_records(fake_broker, partition)]
        assert [seq for *_, seq in mine] == [sum(counts[:i]) for i in range(len(counts))]


def _batch_records(fake_broker, partition: int) -> list[list[int]]:
    """The records of each Produce request's batch for ``partition``, by record index."""
    out = []
    for r in produce_requests(fake_broker):
        for data in r.request.topic_data[0].partition_data:
            if data.index == partition:
                out.append(list(range(read_header(bytes(data.records)).record_count)))
    return out


def test_a_retry_resends_the_same_sequence(fake_broker, layout):
    fake_broker.produce_errors[("t1", 0)] = [6]  # NOT_LEADER_OR_FOLLOWER once
    with make_producer(layout) as producer:
        producer.send("t1", b"v", partition=0).result(5)
        producer.send("t1", b"w", partition=0).result(5)
    assert [f[1:] for r in produce_requests(fake_broker) for f in _producer_fields(r)] == [
        (1000, 0, 0), (1000, 0, 0), (1000, 0, 1)]


def test_a_batch_failed_for_good_makes_the_producer_take_a_new_id(fake_broker, layout):
    fake_broker.produce_errors[("t1", 0)] = [45]  # OUT_OF_ORDER_SEQUENCE_NUMBER: fatal for the batch
    with make_producer(layout) as producer:
        with pytest.raises(OutOfOrderSequenceError):
            producer.send("t1", b"v", partition=0).result(5)
        producer.send("t1", b"w", partition=0).result(5)
    assert fake_broker.producer_ids == [1000, 1001]
    assert [f[1:] for r in produce_requests(fake_broker) for f in _producer_fields(r)] == [(1000, 0, 0), (1001, 0, 0)]


def test_without_idempotence_batches_carry_no_producer_id(fake_broker, layout):
    with make_producer(layout, acks=1) as producer:
        producer.send("t1", b"v", partition=0).result(5)
    assert fake_broker.producer_ids == []
    assert _producer_fields(produce_requests(fake_broker)[0]) == [(0, -1, -1, -1)]


def test_leader_moves_to_another_broker(fake_broker, layout):
    with FakeBroker(node_id=1) as other:
        layout.add_broker(1, other.port)
        fake_broker.produce_errors[("t1", 0)] = [6] * 100  # broker 0 no longer leads t1-0

        with make_producer(layout) as producer:
            future = producer.send("t1", b"moved", partition=0)
            wait_until(lambda: produce_requests(fake_broker), what="a first attempt at the old leader")
            layout.move_leader("t1", 0, 1)
            assert future.result(5).offset == 0
        assert [r.value for r in other.records("t1", 0)] == [b"moved"]


def test_unknown_topic_and_bad_arguments(fake_broker, layout):
    with make_producer(layout) as producer:
        with pytest.raises(UnknownTopicError, match="'nope'"):
            producer.send("nope", b"v")
        with pytest.raises(ValueError, match="no partition 9"):
            producer.send("t1", b"v", partition=9)
        with pytest.raises(TypeError, match="value"):
            producer.send("t1", "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key"):
            producer.send("t1", b"v", key=42)  # type: ignore[arg-type]
        with pytest.raises(MessageSizeTooLargeError):
            producer.send("t1", b"x" * 2_000_000)


def test_new_partition_is_found_by_a_refresh(fake_broker, layout):
    with make_producer(layout) as producer:
        producer.partitions_for("t1")
        layout.add_topic("t1", 4)
        assert producer.send("t1", b"v", partition=3).result(5).partition == 3


class _ShiftedClock:
    """``time`` as metaq.client.cluster sees it: the real clock plus what the test moved it forward."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_send_reads_no_metadata_the_sender_refreshes_it_when_old(fake_broker, layout, monkeypatch):
    """send() uses the topic as last read (no ZooKeeper read, no clock per record); the sender re-reads it once
    older than metadata.max.age.ms (or a send names a partition it does not know), and later sends see the
    new partitions, round robin included."""
    clock = _ShiftedClock()
    monkeypatch.setattr(cluster_module, "time", clock)
    config = {"linger.ms": 10000, "request.timeout.ms": 5000}
    with Producer(config, metadata=ClusterMetadata(layout, max_age_ms=60_000)) as producer:
        producer.send("t1", b"v", partition=0)
        producer.flush(5)
        reads = layout.reads
        clock.ahead += 61  # older than max age, but send() does not read it
        layout.add_topic("t1", 4)
        producer.send("t1", b"v", partition=0)
        assert layout.reads == reads
        producer.send("t1", b"v", partition=3)  # a partition it does not know: read now
        assert layout.reads == reads + 1
        clock.ahead += 61
        layout.add_topic("t1", 5)
        producer.flush(5)  # the sender asks for the topic per batch: the old entry is re-read
        assert layout.reads > reads + 1
        futures = [producer.send("t1", b"v", partition=4)] + [producer.send("t1", b"v") for _ in range(10)]
        producer.flush(5)
        assert {f.result(0).partition for f in futures} == {0, 1, 2, 3, 4}


def test_thread_name_and_orderly_close(fake_broker, layout):
    closed = []
    producer = Producer({"linger.ms": 10000}, metadata=ClusterMetadata(layout, on_close=lambda: closed.append(1)))
    assert [t for t in threading.enumerate() if t.name == THREAD_NAME]
    future = producer.send("t1", b"last", partition=0)
    producer.close(timeout=10)
    assert future.result(0).offset == 0  # close flushed it, despite the long linger
    assert closed == [1]
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]
    with pytest.raises(MetaqError, match="closed"):
        producer.send("t1", b"late")
    producer.close()  # a second close does nothing


def test_close_is_bounded_when_the_broker_is_unreachable(fake_broker, layout):
    fake_broker.stop()
    producer = make_producer(layout, retries=1000, retry_backoff_ms=50)
    future = producer.send("t1", b"v", partition=0)
    started = time.monotonic()
    producer.close(timeout=0.5)
    assert time.monotonic() - started < 3
    with pytest.raises((BrokerConnectionError, MetaqError)):
        future.result(0)


def test_close_from_a_callback_does_not_deadlock(fake_broker, layout):
    producer = make_producer(layout)
    done = threading.Event()
    future = producer.send("t1", b"v", partition=0)
    future.add_done_callback(lambda f: (producer.close(), done.set()))
    assert done.wait(5)
    assert future.result(0).offset == 0


def test_full_buffer_blocks_send_up_to_max_block_ms(fake_broker, layout):
    release = threading.Event()
    in_flight = threading.Event()
    fake_broker.handlers[0] = lambda r: (in_flight.set(), release.wait(10), fake_broker.produce(r))[2]
    producer = make_producer(layout, buffer_memory=4096, max_request_size=4096, batch_size=1024, max_block_ms=100,
                             linger_ms=0)
    try:
        producer.send("t1", b"x" * 3000, partition=0)
        assert in_flight.wait(5)  # the first batch is at the broker, its 3000 bytes still held in the buffer
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="max.block.ms"):
            producer.send("t1", b"y" * 3000, partition=1)
        assert time.monotonic() - started >= 0.09
    finally:
        release.set()
        producer.close(5)


def test_many_threads_many_partitions(fake_broker, layout):
    layout.add_topic("t2", 8)
    with make_producer(layout, batch_size=2048) as producer:
        futures = []
        lock = threading.Lock()

        def worker(n):
            mine = [producer.send("t2", b"%d-%d" % (n, i), key=b"%d" % (i % 13)) for i in range(500)]
            with lock:
                futures.extend(mine)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done, _ = wait(futures, timeout=20)
        assert len(done) == 2000
    per_partition: dict[int, list[int]] = {}
    for f in futures:
        md = f.result()
        per_partition.setdefault(md.partition, []).append(md.offset)
    for offsets in per_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
