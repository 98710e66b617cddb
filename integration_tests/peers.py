"""Real Kafka clients as peers: produce and read back with kcat, confluent-kafka and kafka-python."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass

import confluent_kafka
import kafka

from zk_layout import ZkLayout

KCAT = shutil.which("kcat") or "kcat"
FORMAT = "%p|%o|%T|%k|%s\\n"


@dataclass(frozen=True, order=True)
class Msg:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


# ---- producers -------------------------------------------------------------------------------------


def kcat_produce(bootstrap: str, topic: str, partition: int, pairs: list[tuple[str, str]], **conf: str) -> None:
    """``conf``: librdkafka properties, dots as underscores (compression_codec="lz4")."""
    data = "".join(f"{k}:{v}\n" for k, v in pairs)
    extra = [arg for k, v in conf.items() for arg in ("-X", f"{k.replace('_', '.')}={v}")]
    subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", ":",
                    "-X", "linger.ms=5", *extra], input=data.encode(), check=True, timeout=60)


def confluent_produce(bootstrap: str, topic: str, partition: int, items: list[tuple[bytes, bytes, int]],
                      **conf: object) -> list[Msg]:
    acked: list[Msg] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(Msg(msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(), msg.value()))

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for key, value, ts in items:
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return sorted(acked)


def kafka_python_produce(bootstrap: str, topic: str, partition: int,
                         items: list[tuple[bytes, bytes, int]], **conf: object) -> list[Msg]:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **{"linger_ms": 5, **conf})
    futures = [producer.send(topic, value=v, key=k, partition=partition, timestamp_ms=ts) for k, v, ts in items]
    producer.flush(30)
    acked = []
    for (key, value, ts), fut in zip(items, futures, strict=True):
        md = fut.get(timeout=30)
        acked.append(Msg(md.partition, md.offset, ts, key, value))
    producer.close(10)
    return acked


# ---- consumers -------------------------------------------------------------------------------------


def kcat_consume(bootstrap: str, topic: str, partition: int, offset: str, count: int | None = None,
                 timeout: float = 30, **conf: str) -> list[Msg]:
    """offset: beginning | end | N | s@ts. Without count, read to the end (-e). ``conf`` as for
    :func:`kcat_produce`."""
    extra = [arg for k, v in conf.items() for arg in ("-X", f"{k.replace('_', '.')}={v}")]
    args = [KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", offset, "-f", FORMAT, "-q",
            *extra]
    args += ["-c", str(count)] if count is not None else ["-e"]
    out = subprocess.run(args, capture_output=True, check=True, timeout=timeout).stdout
    return [_parse_kcat(line) for line in out.decode().splitlines() if line]


def kcat_consume_async(bootstrap: str, topic: str, partition: int, offset: str, count: int,
                       quiet: bool = True) -> subprocess.Popen:
    """Without ``quiet``, kcat reports on stderr when it reaches the end of the partition."""
    args = [KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", offset, "-f", FORMAT,
            *(["-q"] if quiet else []), "-c", str(count)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def parse_kcat_output(out: bytes) -> list[Msg]:
    return [_parse_kcat(line) for line in out.decode().splitlines() if line]


def _parse_kcat(line: str) -> Msg:
    p, o, t, k, v = line.split("|", 4)
    return Msg(int(p), int(o), int(t), k.encode(), v.encode())


def confluent_consume(bootstrap: str, topic: str, partition: int, offset: int, count: int,
                      timeout: float = 30) -> list[Msg]:
    """offset may be an absolute offset or confluent_kafka.OFFSET_BEGINNING / OFFSET_END."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "peer-test",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, offset)])
        return _confluent_read(consumer, count, timeout)
    finally:
        consumer.close()


def confluent_offset_for_time(bootstrap: str, topic: str, partition: int, ts: int) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "peer-test"})
    try:
        found = consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, partition, ts)], timeout=10)
        return found[0].offset
    finally:
        consumer.close()


def _confluent_read(consumer: confluent_kafka.Consumer, count: int, timeout: float) -> list[Msg]:
    out: list[Msg] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append(Msg(msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(), msg.value()))
    return out


def kafka_python_consumer(bootstrap: str) -> kafka.KafkaConsumer:
    return kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                               fetch_max_wait_ms=100, consumer_timeout_ms=10000)


def kafka_python_read(consumer: kafka.KafkaConsumer, count: int) -> list[Msg]:
    out = []
    for record in consumer:
        out.append(Msg(record.partition, record.offset, record.timestamp, record.key, record.value))
        if len(out) >= count:
            break
    return out


class AckLog:
    """A confluent-kafka ``on_delivery`` callback keeping acknowledged offset -> value and the errors."""

    def __init__(self) -> None:
        self.acked: dict[int, bytes] = {}
        self.errors: list[object] = []

    def __call__(self, err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[msg.offset()] = msg.value()


def confluent_commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` of ``topic``-0 for ``group`` (outside any group generation)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


# ---- committed offsets ---------------------------------------------------------------------------------


def confluent_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """What a standard client reads back from the group coordinator (confluent-kafka: FindCoordinator +
    OffsetFetch); partitions without a committed offset are left out."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
    finally:
        consumer.close()


def zk_committed(layout: ZkLayout, group: str, topic: str) -> dict[int, int]:
    """The group's offsets of ``topic`` in ZooKeeper (``/consumers/<g>/offsets``)."""
    return {p: o for (t, p), o in layout.offsets(group).items() if t == topic and o >= 0}
