"""A broker under a low open-file limit (``ulimit -n`` 512): many partitions and segments, a connection flood and a
kill -9 must not exhaust its descriptors (docs/architecture.md, "Open files").

Before: every partition with data held 4 descriptors and every segment one or more, so a few hundred partitions
with ``segment.bytes=100`` exhausted the limit; appends and new connections then failed (asyncio logged
"socket.accept() out of system resource" thousands of times), and after kill -9 the broker could not start again
(recovery opened every segment). Beside each attack a well-behaved confluent-kafka client produces and fetches
back; the broker's open descriptors (/proc/<pid>/fd) and RSS are measured."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest

from metaq.testing.broker import SharedBroker, shared_broker
from metaq.testing.probes import RssSampler, WellBehavedClient, closed_by_peer
from metaq.testing.wait import wait_until

NOFILE = 512
PARTITIONS = 200
MESSAGES_PER_PARTITION = 2  # segment.bytes=100: every batch after the first rolls a segment
CHUNK = 20


@pytest.fixture(scope="module")
def shared(zk_server, tmp_path_factory) -> Iterator[SharedBroker]:
    properties = {"log.segment.bytes": 100, "offsets.topic.num.partitions": 1}
    with shared_broker(zk_server.connect_string, tmp_path_factory.mktemp("file-limits"), "metaq-file-limits",
                       properties=properties, nofile_limit=NOFILE) as s:
        s.topic("probe")
        s.topic("wide", PARTITIONS)
        yield s


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def log_lines(shared: SharedBroker, text: str) -> int:
    return Path(shared.broker.log_path).read_text(errors="replace").count(text)


def produce_wide(bootstrap: str, rounds: range) -> None:
    """One batch per message (so each fits the 100-byte segments), ``rounds`` messages to every partition of
    ``wide``."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                         "batch.num.messages": 1, "message.timeout.ms": 30000})
    failures: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for n in rounds:
        for p in range(PARTITIONS):
            producer.produce("wide", f"m{n}".encode(), partition=p, on_delivery=delivered)
            if p % CHUNK == CHUNK - 1:  # a request rolling 200 segments would hold up the event loop for seconds
                assert producer.flush(60) == 0, "produces not acknowledged"
    assert producer.flush(60) == 0, "produces not acknowledged"
    assert not failures, failures[:3]


def count_wide(bootstrap: str) -> int:
    """Messages read back from every partition of ``wide`` (every segment is read: reopened on demand)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "counter",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("wide", p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < PARTITIONS * MESSAGES_PER_PARTITION and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
    finally:
        consumer.close()
    return seen


def test_many_partitions_and_segments_stay_within_the_limit(shared: SharedBroker) -> None:
    pid = shared.broker.pid
    assert pid is not None
    before = open_fds(pid)
    with RssSampler(pid) as rss:
        # the first message of each partition creates its log (creating 200 logs holds up the event loop a while
        # on a busy machine, whatever the descriptors: so the probe starts after)
        produce_wide(shared.broker.bootstrap, range(1))
        with WellBehavedClient(shared.broker.bootstrap, "probe") as client:
            produce_wide(shared.broker.bootstrap, range(1, MESSAGES_PER_PARTITION))  # each rolls a segment
            wait_until(lambda: len(client.latencies) >= 10, 30, "probes beside the produces")
    assert not client.failures, client.failures[:3]
    assert count_wide(shared.broker.bootstrap) == PARTITIONS * MESSAGES_PER_PARTITION
    after = open_fds(pid)
    # 400 segments of 200 partitions: before, about 1,000 descriptors were needed (over the 512 limit)
    assert after < NOFILE * 3 // 4, f"open descriptors {before} -> {after} (limit {NOFILE})"
    assert rss.growth_mb < 150, f"broker RSS grew {rss.growth_mb:.0f} MB"
    assert log_lines(shared, "Too many open files") == 0


def test_a_connection_flood_is_refused_before_the_limit(shared: SharedBroker) -> None:
    pid = shared.broker.pid
    assert pid is not None
    host, port = shared.broker.bootstrap.rsplit(":", 1)
    flood: list[socket.socket] = []
    with WellBehavedClient(shared.broker.bootstrap, "probe") as client:
        try:
            for _ in range(NOFILE + 100):
                flood.append(socket.create_connection((host, int(port)), timeout=10))
            # those over the cap the limit leaves for connections are closed at once, not left hanging
            wait_until(lambda: sum(closed_by_peer(s) for s in flood) >= 100, 30, "connections over the cap closed")
            assert open_fds(pid) < NOFILE
            wait_until(lambda: len(client.latencies) >= 10, 30, "probes beside the flood")
        finally:
            for s in flood:
                s.close()
    assert not client.failures, client.failures[:3]
    assert log_lines(shared, "refused connection") <= 3  # one line per 10 s, with a count
    assert log_lines(shared, "out of system resource") == 0
    assert count_wide(shared.broker.bootstrap) == PARTITIONS * MESSAGES_PER_PARTITION  # new clients served


def test_restarts_after_kill_under_the_low_limit(shared: SharedBroker) -> None:
    """Recovery after kill -9 validates the segments from the recovery point on, one at a time."""
    broker = shared.broker
    broker.kill()
    broker.start(timeout=60)  # before: "cannot read index ...: Too many open files", and the start failed
    assert broker.pid is not None
    assert count_wide(broker.bootstrap) == PARTITIONS * MESSAGES_PER_PARTITION
    assert open_fds(broker.pid) < NOFILE * 3 // 4
    with WellBehavedClient(broker.bootstrap, "probe") as client:
        wait_until(lambda: len(client.latencies) >= 5, 30, "probes after the restart")
    assert not client.failures, client.failures[:3]
