"""The client jobs the benchmark sections time: producing and fetching with confluent-kafka, kcat and
metaq.Producer. A leaf module: it imports no other bench module."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import confluent_kafka

KCAT = shutil.which("kcat")
CONFLUENT_BATCH_SIZE = 1_000_000  # librdkafka's default batch.size; metaq_produce uses it too


def produce(config: Mapping[str, Any], topic: str, value: bytes, n: int, partitions: int = 1) -> None:
    """``n`` copies of ``value``, round-robin over ``partitions``, with a new confluent-kafka producer of
    ``config``."""
    send_all(confluent_kafka.Producer(dict(config)), topic, value, n, partitions)


def send_all(producer: confluent_kafka.Producer, topic: str, value: bytes, n: int, partitions: int = 1) -> None:
    """``n`` copies of ``value``, round-robin over ``partitions`` (waiting out a full local queue); raises if not
    every message was acknowledged."""
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError(f"producing to {topic}: not every message was acknowledged")


def confluent_produce(bootstrap: str, topic: str, value: bytes, n: int, compression: str = "none",
                      acks: int | str = 1, idempotence: bool = False) -> None:
    """The broker sections' producer: ``n`` values to partition 0, linger.ms 5, librdkafka's batch.size."""
    produce({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": CONFLUENT_BATCH_SIZE,
             "queue.buffering.max.messages": 2000000, "acks": acks, "compression.type": compression,
             "enable.idempotence": idempotence}, topic, value, n)


def transactional_produce(bootstrap: str, topic: str, value: bytes, n: int, per_transaction: int) -> None:
    """``n`` values to partition 0 in transactions of ``per_transaction`` records (confluent-kafka's transactional
    producer, otherwise as :func:`confluent_produce` with acks=all), each committed before the next begins."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": CONFLUENT_BATCH_SIZE,
        "queue.buffering.max.messages": 2000000, "transactional.id": f"bench-{topic}"})
    producer.init_transactions(30)
    for first in range(0, n, per_transaction):
        producer.begin_transaction()
        send_all(producer, topic, value, min(per_transaction, n - first))
        producer.commit_transaction(60)


def confluent_consume(bootstrap: str, topic: str, n: int, isolation: str = "read_uncommitted") -> None:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                  "fetch.queue.backoff.ms": 10, "isolation.level": isolation})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    while got < n:
        got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    c.close()


def kcat_produce(bootstrap: str, topic: str, value: bytes, n: int, path: Path) -> None:
    subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-X", "linger.ms=5", "-l", str(path)],
                   check=True, timeout=300)


def kcat_consume(bootstrap: str, topic: str, n: int) -> None:
    subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(n), "-q",
                    "-f", "%s\n"],
                   check=True, timeout=300, stdout=subprocess.DEVNULL)


def metaq_produce(zk: str, topic: str, value: bytes, n: int, acks: int | str = 1, idempotence: bool = False) -> None:
    from metaq import Producer

    # batch.size as confluent_produce gives librdkafka (its own default): the same batches on the wire
    with Producer({"zookeeper.connect": zk, "linger.ms": 5, "batch.size": CONFLUENT_BATCH_SIZE, "acks": acks,
                   "enable.idempotence": idempotence}) as producer:
        for _ in range(n):
            producer.send(topic, value, partition=0)
        producer.flush()
