"""metaq's ZooKeeper consumer group reading the old message formats as real Apache Kafka brokers store them.

confluent-kafka produces keyed records (one batch gzip-compressed) to a real broker whose log holds message set
v0 (Kafka 0.8.2.2), v1 (0.10.2.2; 1.1.1 with ``log.message.format.version=0.10.2``), or v1 then v2 in one
partition (3.9.2 at ``inter.broker.protocol.version=2.8``, the topic's ``message.format.version`` raised from
0.10.2 to 2.8 between two rounds of produce). The test reads the magic bytes of the broker's own segment files, so
each case proves the format it claims; metaq's consumer (docs/legacy-wire.md: Fetch v0 and ListOffsets v0 through
``broker.version.fallback`` on 0.8) must then deliver every key, value, offset and timestamp (none in v0), commit,
and ``metaq groups describe --json`` must show the committed offsets with lag 0.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, untyped
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.kafka_fixtures import kafka_params
from metaq.testing.kafka_versions import V0_8, V0_10, V1_1, V3_9
from metaq.testing.spark import local_session
from metaq.testing.wait import wait_until

CAPABILITY = "metaq consumer group reads old message formats"
PARTITIONS = 2
NO_TIMESTAMP = -1


@dataclass(frozen=True)
class LegacyCase:
    """A broker (version and properties), the topic's configs and the message formats its log must hold."""

    version: str
    properties: dict[str, str]
    topic_configs: dict[str, str]
    magics: frozenset[int]
    switch_format_to: str | None = None
    fallback: str | None = None


CASES = {
    V0_10: LegacyCase(V0_10, {}, {}, frozenset({1})),
    V0_8: LegacyCase(V0_8, {}, {}, frozenset({0}), fallback="0.8.2"),
    "1.1.1-format-0.10.2": LegacyCase(V1_1, {"log.message.format.version": "0.10.2"}, {}, frozenset({1})),
    "3.9.2-ibp-2.8-format-switch": LegacyCase(
        V3_9, {"inter.broker.protocol.version": "2.8"}, {"message.format.version": "0.10.2"}, frozenset({1, 2}),
        switch_format_to="2.8"),
}


def _param(case_id: str, peer: str) -> Any:
    version = CASES[case_id].version
    return pytest.param(case_id, id=case_id, marks=[pytest.mark.apache_kafka(version),
                                                    pytest.mark.compat(CAPABILITY, peer)])


PARAMS = [*(pytest.param(p.values[0], id=p.id, marks=p.marks) for p in kafka_params(CAPABILITY, (V0_10, V0_8))),
          _param("1.1.1-format-0.10.2", "Kafka 1.1.1 (format 0.10.2)"),
          _param("3.9.2-ibp-2.8-format-switch", "Kafka 3.9.2 (IBP 2.8, format 0.10.2 then 2.8)")]


@dataclass(frozen=True)
class Sent:
    """One acknowledged record: what the consumer must give back at ``(partition, offset)``."""

    key: bytes
    value: bytes
    timestamp: int


def _produce(broker: ApacheKafkaBroker, topic: str, prefix: str, count: int, *, compression: str = "none"
             ) -> dict[tuple[int, int], Sent]:
    """``count`` keyed records with explicit CreateTime timestamps, alternating partitions; the acknowledged
    ``(partition, offset)`` of each."""
    acked: dict[tuple[int, int], Sent] = {}
    errors: list[str] = []
    producer = Producer({**broker.librdkafka_config(), "compression.type": compression, "linger.ms": 50})
    base_ts = int(time.time() * 1000) - 60_000

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        acked[(msg.partition(), msg.offset())] = Sent(msg.key(), msg.value(), msg.timestamp()[1])

    for i in range(count):
        producer.produce(topic, value=b"%s-value-%d" % (prefix.encode(), i), key=b"%s-key-%d" % (prefix.encode(), i),
                         partition=i % PARTITIONS, timestamp=base_ts + i, on_delivery=on_delivery)
    assert producer.flush(60) == 0, "records left unacknowledged"
    assert not errors, errors
    assert len(acked) == count
    return acked


def _segment_magics(broker: ApacheKafkaBroker, topic: str) -> list[int]:
    """The magic byte of every top-level entry of partition 0's first segment, in order: message sets v0/v1 and
    record batches v2 all put it at byte 16 after a (offset int64, size int32) header (Kafka's log format,
    https://kafka.apache.org/documentation/#messageformat)."""
    segment = Path(broker.dir, "data", f"{topic}-0", "00000000000000000000.log").read_bytes()
    magics, pos = [], 0
    while pos + 17 <= len(segment):
        (size,) = struct.unpack_from(">i", segment, pos + 8)
        magics.append(segment[pos + 16])
        pos += 12 + size
    return magics


def _switch_format(broker: ApacheKafkaBroker, topic: str, version: str) -> dict[tuple[int, int], Sent]:
    """Alter the topic's ``message.format.version`` and produce single records until the broker writes them in
    the new format (it applies a config change asynchronously, from ZooKeeper's change notification)."""
    admin = AdminClient(broker.librdkafka_config())
    entry = ConfigEntry("message.format.version", version, incremental_operation=AlterConfigOpType.SET)
    futures = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[entry])])
    for future in futures.values():
        future.result(60)
    probes: dict[tuple[int, int], Sent] = {}

    def written_as_v2() -> bool:
        probes.update(_produce(broker, topic, f"probe{len(probes)}", 1))
        return _segment_magics(broker, topic)[-1] == 2

    wait_until(written_as_v2, timeout=60, what=f"{topic} written in format {version}", interval=0.5)
    return probes


def _consume(broker: ApacheKafkaBroker, group: str, topic: str, expected: int, fallback: str | None
             ) -> dict[tuple[int, int], Sent]:
    """Read ``expected`` records with a metaq group member, then commit; each once, by ``(partition, offset)``."""
    got: dict[tuple[int, int], Sent] = {}
    config: dict[str, Any] = {"group.id": group, "zookeeper.connect": broker.zk_connect,
                              "consumer.timeout.ms": 3000, "auto.offset.reset": "smallest"}
    if fallback:
        config["broker.version.fallback"] = fallback
    with Consumer(config) as consumer:
        [stream] = consumer.create_message_streams({topic: 1})[topic]

        def read_all() -> bool:
            try:
                for message in stream:
                    where = (message.partition, message.offset)
                    assert where not in got, f"{where} delivered twice"
                    got[where] = Sent(message.key, message.value, message.timestamp)
                    if len(got) == expected:
                        return True
            except ConsumerTimeoutError:
                pass
            return len(got) >= expected

        wait_until(read_all, timeout=90, what=lambda: f"{len(got)} of {expected} records read", interval=0)
        consumer.commit_offsets()
    return got


@pytest.mark.parametrize("case_id", PARAMS)
def test_metaq_group_reads_old_message_formats(apache_kafka: Callable[..., ApacheKafkaBroker], case_id: str
                                                ) -> None:
    case = CASES[case_id]
    broker = apache_kafka(case.version, properties=case.properties)
    topic = f"legacy-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS, configs=case.topic_configs)
    sent = _produce(broker, topic, "plain", 10)
    sent.update(_produce(broker, topic, "gzip", 10, compression="gzip"))
    if case.switch_format_to:
        sent.update(_switch_format(broker, topic, case.switch_format_to))
        sent.update(_produce(broker, topic, "after", 10))
        sent.update(_produce(broker, topic, "after-gzip", 10, compression="gzip"))
    assert set(_segment_magics(broker, topic)) == case.magics

    for partition in range(PARTITIONS):
        offsets = sorted(o for p, o in sent if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition}: {offsets}"
    if 0 in case.magics:
        sent = {where: Sent(s.key, s.value, NO_TIMESTAMP) for where, s in sent.items()}

    group = f"legacy-{case_id}"
    got = _consume(broker, group, topic, len(sent), case.fallback)
    assert got == sent

    # what an operator sees: the CLI's own log-end lookups (ListOffsets v0 on 0.8, whatever the fallback)
    described = subprocess.run([sys.executable, "-m", "metaq", "groups", "describe", group, "--json",
                                "--zookeeper", broker.zk_connect], capture_output=True, text=True, timeout=120)
    assert described.returncode == 0, described.stderr
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in range(PARTITIONS)}
    rows = {r["partition"]: r for r in json.loads(described.stdout)["partitions"] if r["topic"] == topic}
    assert {p: (r["offset"], r["log_end_offset"], r["lag"]) for p, r in rows.items()} == {
        p: (end, end, 0) for p, end in ends.items()}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("metaq-spark-legacy") as session:
        yield session


def _console_lines(broker: ApacheKafkaBroker, topic: str, expected: int, fallback: str | None) -> set[str]:
    """``metaq console-consumer`` from the beginning, one kcat-style line per record."""
    argv = [sys.executable, "-m", "metaq", "console-consumer", "--zookeeper", broker.zk_connect, "--topic", topic,
            "--from-beginning", "--max-messages", str(expected), "--timeout-ms", "60000",
            "--format", "%p|%o|%T|%k|%s\\n"]
    if fallback:
        argv += ["--property", f"broker.version.fallback={fallback}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == expected, lines
    return set(lines)


def _spark_rows(spark: Any, broker: ApacheKafkaBroker, topic: str, fallback: str | None
                ) -> dict[tuple[int, int], Sent]:
    """A batch read of the whole topic by metaq's Spark source, by ``(partition, offset)``."""
    reader = (spark.read.format("metaq").option("zookeeper.connect", broker.zk_connect).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if fallback:
        reader = reader.option("broker.version.fallback", fallback)
    rows = reader.load().selectExpr("partition", "offset", "key", "value",
                                    "unix_millis(timestamp) AS ms").collect()
    got = {(r.partition, r.offset): Sent(bytes(r.key), bytes(r.value), r.ms) for r in rows}
    assert len(got) == len(rows), "a record read twice"
    return got


@pytest.mark.parametrize("case_id", PARAMS)
def test_console_consumer_and_spark_read_old_message_formats(apache_kafka: Callable[..., ApacheKafkaBroker],
                                                            spark: Any, case_id: str) -> None:
    """The same brokers and formats as above, read by the console consumer and the Spark source: every key, value,
    offset and timestamp (v0 messages have none: -1, which Spark shows as 1 ms before the epoch, as its Kafka source
    does with the Java consumer's -1)."""
    case = CASES[case_id]
    broker = apache_kafka(case.version, properties=case.properties)
    topic = f"legacy-readers-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS, configs=case.topic_configs)
    sent = _produce(broker, topic, "plain", 10)
    sent.update(_produce(broker, topic, "gzip", 10, compression="gzip"))
    if case.switch_format_to:
        sent.update(_switch_format(broker, topic, case.switch_format_to))
        sent.update(_produce(broker, topic, "after-gzip", 10, compression="gzip"))
    assert set(_segment_magics(broker, topic)) == case.magics
    no_timestamps = 0 in case.magics

    lines = _console_lines(broker, topic, len(sent), case.fallback)
    shown = NO_TIMESTAMP if no_timestamps else None
    assert lines == {f"{p}|{o}|{shown if shown is not None else s.timestamp}|{s.key.decode()}|{s.value.decode()}"
                     for (p, o), s in sent.items()}

    assert _spark_rows(spark, broker, topic, case.fallback) == {
        where: Sent(s.key, s.value, NO_TIMESTAMP if no_timestamps else s.timestamp) for where, s in sent.items()}
