"""kcat, confluent-kafka and kafka-python against a metaq broker process, unmodified.

Each producer writes its own partition; each consumer then reads every partition from the beginning,
from an offset, from a timestamp and from the end, and must get every message back with the right key,
value, offset and timestamp.
"""

from __future__ import annotations

import threading
import time

import confluent_kafka
import kafka
import pytest

from integration_tests import peers
from integration_tests.peers import Msg
from metaq.testing.wait import wait_until

N = 40


def _produce_all(bootstrap: str, topic: str) -> dict[int, list[Msg]]:
    """Partition 0 from kcat, 1 from confluent-kafka, 2 from kafka-python; returns what each holds."""
    before = int(time.time() * 1000)
    peers.kcat_produce(bootstrap, topic, 0, [(f"k{i}", f"kcat-{i}") for i in range(N)])
    after = int(time.time() * 1000)
    base = before - 10 * N * 1000
    items = [(b"ck%d" % i, b"confluent-%d" % i, base + 1000 * i) for i in range(N)]
    acked_c = peers.confluent_produce(bootstrap, topic, 1, items)
    items = [(b"pk%d" % i, b"kafka-python-%d" % i, base + 1000 * i) for i in range(N)]
    acked_k = peers.kafka_python_produce(bootstrap, topic, 2, items)

    # kcat reports no offsets: read partition 0 back and check it against what was sent
    got0 = peers.confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, N)
    assert [(m.offset, m.key, m.value) for m in got0] == [
        (i, b"k%d" % i, b"kcat-%d" % i) for i in range(N)
    ]
    assert all(before <= m.timestamp <= after + 1000 for m in got0)
    for acked in (acked_c, acked_k):
        assert [m.offset for m in acked] == list(range(N))
    return {0: got0, 1: acked_c, 2: acked_k}


def _from_timestamp(msgs: list[Msg], ts: int) -> list[Msg]:
    return [m for m in msgs if m.offset >= min(x.offset for x in msgs if x.timestamp >= ts)]


@pytest.fixture
def produced(broker, make_topic) -> tuple[str, dict[int, list[Msg]]]:
    topic = make_topic("peers", partitions=3)
    return topic, _produce_all(broker.bootstrap, topic)


def test_kcat_reads_every_way(broker, produced) -> None:
    topic, expected = produced
    for p, msgs in expected.items():
        assert peers.kcat_consume(broker.bootstrap, topic, p, "beginning") == msgs
        assert peers.kcat_consume(broker.bootstrap, topic, p, "17") == msgs[17:]
        ts = msgs[25].timestamp
        assert peers.kcat_consume(broker.bootstrap, topic, p, f"s@{ts}") == _from_timestamp(msgs, ts)
    # from the end: only what is produced after the consumer started
    proc = peers.kcat_consume_async(broker.bootstrap, topic, 1, "end", 3, quiet=False)
    notes: list[str] = []
    reader = threading.Thread(target=lambda: notes.extend(line.decode() for line in proc.stderr),
                              name="kcat-stderr", daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("Reached end" in n for n in notes), 30, "kcat to reach the end of partition 1")
        now = int(time.time() * 1000)
        later = peers.confluent_produce(broker.bootstrap, topic, 1,
                                        [(b"x%d" % i, b"late-%d" % i, now) for i in range(3)])
        proc.wait(timeout=30)
    finally:
        proc.kill()
        reader.join(10)
    with proc:  # closes its pipes
        assert peers.parse_kcat_output(proc.stdout.read()) == later, notes


def test_confluent_kafka_reads_every_way(broker, produced) -> None:
    topic, expected = produced
    for p, msgs in expected.items():
        assert peers.confluent_consume(broker.bootstrap, topic, p, confluent_kafka.OFFSET_BEGINNING, N) == msgs
        assert peers.confluent_consume(broker.bootstrap, topic, p, 17, N - 17) == msgs[17:]
        ts = msgs[25].timestamp
        offset = peers.confluent_offset_for_time(broker.bootstrap, topic, p, ts)
        want = _from_timestamp(msgs, ts)
        assert offset == want[0].offset
        assert peers.confluent_consume(broker.bootstrap, topic, p, offset, len(want)) == want
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "peer-test",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 2, confluent_kafka.OFFSET_END)])
        assert consumer.poll(1.0) is None
        now = int(time.time() * 1000)
        later = peers.kafka_python_produce(broker.bootstrap, topic, 2, [(b"y", b"late", now)])
        assert peers._confluent_read(consumer, 1, 20) == later
    finally:
        consumer.close()


def test_kafka_python_reads_every_way(broker, produced) -> None:
    topic, expected = produced
    consumer = peers.kafka_python_consumer(broker.bootstrap)
    try:
        for p, msgs in expected.items():
            tp = kafka.TopicPartition(topic, p)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            assert peers.kafka_python_read(consumer, N) == msgs
            consumer.seek(tp, 17)
            assert peers.kafka_python_read(consumer, N - 17) == msgs[17:]
            ts = msgs[25].timestamp
            found = consumer.offsets_for_times({tp: ts})[tp]
            want = _from_timestamp(msgs, ts)
            assert found.offset == want[0].offset
            consumer.seek(tp, found.offset)
            assert peers.kafka_python_read(consumer, len(want)) == want
            assert consumer.end_offsets([tp])[tp] == msgs[-1].offset + 1
            assert consumer.beginning_offsets([tp])[tp] == 0
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == N
        now = int(time.time() * 1000)
        later = peers.confluent_produce(broker.bootstrap, topic, 0, [(b"z", b"late", now)])
        assert peers.kafka_python_read(consumer, 1) == later
    finally:
        consumer.close()
