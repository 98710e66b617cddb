"""Kafka Streams 3.9 (Maven) in exactly-once mode on a metaq broker: a word count with
``processing.guarantee=exactly_once_v2`` (transactional producer, read_committed consumer, offsets committed in the
transaction, a repartition topic and a compacted changelog topic created by Streams itself) is killed with SIGKILL
while it works through the input, restarted, and its output topic, read with read_committed, holds exactly the
right count of every word (docs/transactions.md §5).

One broker (internal topics with replication factor 1) and two JVM starts of the program.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import topic_leaders
from metaq.testing.java_peers import JAVA, JAVA_PROGRAMS, JVM_OPTIONS, STREAMS_3_9
from metaq.testing.maven import classpath
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from zk_layout import ZkLayout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

LINES = 3000
WORDS = [f"w{i}" for i in range(13)]


def line(i: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 5))


@pytest.fixture(scope="module")
def broker(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    zk_connect = f"{zk_server.connect_string}/metaq-streams-{uuid.uuid4().hex}"
    process = BrokerProcess(zk_connect, 0, tmp_path_factory.mktemp("streams-eos"), properties={
        "transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}).start()
    try:
        yield process, zk_connect
    finally:
        process.stop()


def make_topic(bootstrap: str, zk_connect: str, name: str, partitions: int) -> None:
    with session(zk_connect) as client:
        create_topic(ZkLayout(client), name, partitions)
    wait_until(lambda: len(topic_leaders(bootstrap, name)) == partitions, 20, f"topic {name}")


def produce_lines(bootstrap: str, topic: str, first: int, end: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, end):
        producer.produce(topic, line(i).encode(), str(i).encode())
    assert producer.flush(30) == 0


class WordCountApp:
    """The Streams program as a child JVM; its output goes to a file that failures show."""

    def __init__(self, bootstrap: str, app_id: str, state_dir: Path, log: Path, source: str, sink: str) -> None:
        self.command = [JAVA, *JVM_OPTIONS, "-cp", classpath(STREAMS_3_9.directory()),
                        str(JAVA_PROGRAMS / "StreamsWordCount.java"), bootstrap, app_id, str(state_dir), source, sink]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, sleep_ms: int) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([*self.command, str(sleep_ms)], stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            self.process.wait(timeout=30)

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"Kafka Streams exited {self.process.returncode}:\n{self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-60:])


class CountReader:
    """The output topic read with read_committed from the start: the latest count of each word."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"counts-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        self.counts: dict[str, int] = {}
        self.records = 0

    def poll(self) -> dict[str, int]:
        for msg in self.consumer.consume(1000, 0.5):
            if msg.error() is None:
                self.counts[msg.key().decode()] = int(msg.value().decode())
                self.records += 1
        return self.counts

    def close(self) -> None:
        self.consumer.close()


def committed_input(bootstrap: str, app_id: str, topic: str, partitions: int) -> int:
    """The input offsets the application committed (in its transactions), summed over the partitions."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": app_id})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], 10)
        return sum(max(tp.offset, 0) for tp in found)
    finally:
        consumer.close()


@pytest.mark.compat("Kafka Streams exactly_once_v2 word count through a SIGKILL", STREAMS_3_9.label)
def test_word_count_exactly_once_through_kill(broker: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    process, zk_connect = broker
    bootstrap = process.bootstrap
    source, sink, app_id = "lines", "word-counts", f"wordcount-{uuid.uuid4().hex[:6]}"
    make_topic(bootstrap, zk_connect, source, 2)
    make_topic(bootstrap, zk_connect, sink, 2)
    expected = collections.Counter(word for i in range(LINES) for word in line(i).split())
    produce_lines(bootstrap, source, 0, LINES // 2)
    app = WordCountApp(bootstrap, app_id, tmp_path / "state", tmp_path / "streams.log", source, sink)
    reader = CountReader(bootstrap, sink, 2)
    try:
        app.start(sleep_ms=3)  # ~5 s for the first half: the kill lands mid-way

        def some_output() -> bool:
            app.check_alive()
            return reader.poll() != {}
        wait_until(some_output, 180, lambda: f"the first committed counts:\n{app.tail()}")
        app.kill()  # SIGKILL: no close, transactions left open
        at_kill = dict(reader.poll())
        produce_lines(bootstrap, source, LINES // 2, LINES)
        app.start(sleep_ms=0)

        def all_counted() -> bool:
            app.check_alive()
            return reader.poll() == dict(expected) and committed_input(bootstrap, app_id, source, 2) == LINES
        wait_until(all_counted, 240, lambda: (f"exact counts of every word: counts {reader.counts}\nexpected "
                                              f"{dict(expected)}\nat the kill {at_kill}\n{app.tail()}"), interval=0.5)
        assert reader.poll() == dict(expected)  # nothing after the input was all committed either
    finally:
        reader.close()
        app.kill()
