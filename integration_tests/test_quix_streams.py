"""A Python stream processor on a metaq broker: Quix Streams counting words by key in exactly-once mode, its state
in a compacted changelog topic it creates itself, through two kill -9 crashes and a lost state directory.

Quix Streams pins confluent-kafka below metaq's, so it runs from a virtualenv of its own in the peer cache
(:mod:`metaq.testing.pypeer`). Its exactly-once mode puts the output records, the changelog writes and the
consumed offsets of each checkpoint in one Kafka transaction (docs/transactions.md); the changelog is created
``cleanup.policy=compact`` (docs/compaction.md). Read with read_committed, the output must hold, per word,
every running count 1..N exactly once: a lost record is a gap, a replayed one a duplicate, and a state restored
wrongly from the changelog restarts or skips counts.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from metaq.broker.process import BrokerProcess
from metaq.testing.pypeer import peer_python
from metaq.testing.wait import wait_until
from zk_layout import split_connect

PEER = "Quix Streams 3.28"
WORDS = [f"w{i}" for i in range(7)]
TIMEOUT = 90

APP = """\
import sys
from quixstreams import Application

bootstrap, state_dir, source, sink = sys.argv[1:5]
app = Application(broker_address=bootstrap, consumer_group="word-count", auto_offset_reset="earliest",
                  state_dir=state_dir, processing_guarantee="exactly-once", commit_interval=0.2)
words = app.topic(source, key_deserializer="str", value_deserializer="str")
counts = app.topic(sink, key_serializer="str", value_serializer="json")


def count(word, state):
    n = state.get("count", 0) + 1
    state.set("count", n)
    return {"word": word, "count": n}


app.dataframe(words).apply(count, stateful=True).to_topic(counts)
app.run()
"""


@pytest.fixture(scope="module")
def quix_python() -> Path:
    """Quix Streams' interpreter (installed once into the peer cache); pip's error fails the test."""
    return peer_python("quixstreams-3.28.1")


@pytest.fixture(scope="module")
def broker(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    hosts, base = split_connect(zk_server.connect_string)
    properties = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2,
                  "log.cleaner.backoff.ms": 200}
    process = BrokerProcess(f"{hosts}{base}/quix-{uuid.uuid4().hex}", 0, tmp_path_factory.mktemp("quix"),
                            properties=properties).start()
    try:
        yield process
    finally:
        process.stop()


class WordCountApp:
    """The Quix application as a child process: started, and killed the hard way."""

    def __init__(self, python: Path, bootstrap: str, workdir: Path, source: str, sink: str) -> None:
        self._argv = [str(python), str(workdir / "app.py"), bootstrap, str(workdir / "state"), source, sink]
        self._workdir = workdir
        (workdir / "app.py").write_text(APP)
        self._process: subprocess.Popen[bytes] | None = None
        self._runs = 0

    def start(self) -> None:
        self._runs += 1
        log = (self._workdir / f"run-{self._runs}.log").open("wb")
        self._process = subprocess.Popen(self._argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def kill(self) -> None:
        assert self._process is not None
        assert self._process.poll() is None, f"the app died by itself:\n{self.log_tail()}"
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(30)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(30)

    def forget_state(self) -> None:
        """The local state store gone, as on a new machine: only the changelog can bring the counts back."""
        shutil.rmtree(self._workdir / "state", ignore_errors=True)

    def log_tail(self) -> str:
        return (self._workdir / f"run-{self._runs}.log").read_text(errors="replace")[-3000:]


def produce(bootstrap: str, topic: str, words: list[str]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failures: list[str] = []
    for word in words:
        producer.produce(topic, key=word, value=word,
                         on_delivery=lambda err, _msg: failures.append(str(err)) if err else None)
    assert producer.flush(30) == 0
    assert not failures, failures


class CommittedReader:
    """The output topic as read_committed sees it, read incrementally."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        self._consumer.subscribe([topic])
        self.records: list[dict[str, object]] = []

    def read_until(self, at_least: int) -> list[dict[str, object]]:
        def enough() -> bool:
            for message in self._consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                self.records.append(json.loads(message.value()))
            return len(self.records) >= at_least

        wait_until(enough, timeout=TIMEOUT, what=lambda: f"{at_least} committed counts, {len(self.records)} read")
        return self.records

    def close(self) -> None:
        self._consumer.close()


def sequence_per_word(records: list[dict[str, object]]) -> dict[str, list[object]]:
    seen: dict[str, list[object]] = {}
    for record in records:
        seen.setdefault(str(record["word"]), []).append(record["count"])
    return seen


@pytest.mark.compat("exactly-once stream processing, state restored from a compacted changelog", PEER)
def test_word_count_is_exact_through_crashes_and_a_lost_state_store(quix_python, broker, tmp_path):  # type: ignore[no-untyped-def]
    source, sink = f"words-{uuid.uuid4().hex[:8]}", f"counts-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for created in admin.create_topics([NewTopic(source, 2, 1), NewTopic(sink, 1, 1)]).values():
        created.result(30)
    first = [WORDS[i % len(WORDS)] for i in range(300)]
    second = [WORDS[(i * 3) % len(WORDS)] for i in range(400)]
    produce(broker.bootstrap, source, first)
    app = WordCountApp(quix_python, broker.bootstrap, tmp_path, source, sink)
    reader = CommittedReader(broker.bootstrap, sink)
    try:
        app.start()
        reader.read_until(len(first))
        app.kill()
        app.forget_state()  # the next run restores every count from the changelog
        produce(broker.bootstrap, source, second)
        app.start()
        reader.read_until(len(first) + 50)
        app.kill()  # mid-stream: whatever this run had not committed is aborted, and done again
        app.start()
        records = reader.read_until(len(first) + len(second))
        totals = Counter(first + second)
        assert sequence_per_word(records) == {word: list(range(1, n + 1)) for word, n in totals.items()}, \
            app.log_tail()
        changelogs = [t for t in admin.list_topics(timeout=30).topics if t.startswith("changelog__word-count")]
        assert changelogs, "Quix created no changelog topic"
        resource = ConfigResource(ConfigResource.Type.TOPIC, changelogs[0])
        config = admin.describe_configs([resource])[resource].result(30)
        assert config["cleanup.policy"].value == "compact"
    finally:
        app.stop()
        reader.close()
