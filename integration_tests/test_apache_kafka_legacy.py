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

import cramjam
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, untyped
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse

from metaq.client.metadata import MetadataLayout
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.errors import ConsumerRebalanceFailedError, MetaqError
from metaq.producer import ClusterMetadata, ProducerConfig
from metaq.producer import Producer as MetaqProducer
from metaq.producer.producer import connection_settings as producer_connection_settings
from metaq.protocol import legacy
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.broker import request
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
    config: dict[str, Any] = {"group.id": group, "zookeeper.connect": broker.zk_connect}
    if fallback:
        config["broker.version.fallback"] = fallback
    return _read_as_member(config, topic, expected)


def _read_as_member(config: dict[str, Any], topic: str, expected: int) -> dict[tuple[int, int], Sent]:
    """:func:`_consume` with a member of ``config`` (from the beginning)."""
    got: dict[tuple[int, int], Sent] = {}
    config = {**config, "consumer.timeout.ms": 3000, "auto.offset.reset": "smallest"}
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


def _fetch_v3(bootstrap: str, topic: str, partition: int) -> bytes:
    """The record bytes of one Fetch v3 (message set v1) of ``topic``-``partition`` from offset 0."""
    fetch = FetchRequest[3](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])])
    part = request(bootstrap, fetch, FetchResponse, 3).responses[0].partitions[0]
    assert part.error_code == 0
    return bytes(part.records or b"")


def _entries(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, bytes) of each top-level entry of a v0/v1 message set."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        out.append((offset, data[pos:pos + 12 + size]))
        pos += 12 + size
    return out


@pytest.mark.apache_kafka(V1_1)
@pytest.mark.compat("message.timestamp.type=LogAppendTime", "Kafka 1.1.1 (format 0.10.2)")
def test_log_append_time_as_kafka_stores_it_in_format_v1(apache_kafka: Callable[..., ApacheKafkaBroker]) -> None:
    """A LogAppendTime topic on Kafka 1.1.1 storing message set v1 (the broker of the case above): metaq's group
    reads the broker's times (librdkafka's delivery reports carry them), and Kafka's stored messages are, byte for
    byte, what metaq's broker writes when it down-converts such a batch for Fetch v2/v3 (``legacy.build_message_set``
    with ``log_append_time``): plain messages, and inside a gzip wrapper, with the LogAppendTime bit and time."""
    case = CASES["1.1.1-format-0.10.2"]
    broker = apache_kafka(case.version, properties=case.properties)
    topic = f"legacy-lat-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS, configs={"message.timestamp.type": "LogAppendTime"})
    created = int(time.time() * 1000) - 60_000  # _produce's CreateTime timestamps are at most this
    sent = _produce(broker, topic, "plain", 10)
    sent.update(_produce(broker, topic, "gzip", 10, compression="gzip"))
    assert all(s.timestamp > created + 30_000 for s in sent.values())  # the broker's times, not the producer's
    assert _consume(broker, "legacy-log-append-time", topic, len(sent), None) == sent

    for partition in range(PARTITIONS):
        stored = _entries(_fetch_v3(broker.bootstrap, topic, partition))
        assert stored and {entry[16] for _, entry in stored} == {1}
        for offset, entry in stored:
            attributes, (append_time,) = entry[17], struct.unpack_from(">q", entry, 18)
            assert attributes & 0x08
            if attributes & 0x07 == 0:
                s = sent[(partition, offset)]
                assert entry == legacy.build_message_set(1, 0, [(offset, -1, s.key, s.value)],
                                                         log_append_time=append_time)
                continue
            assert attributes & 0x07 == 1
            (value_size,) = struct.unpack_from(">i", entry, 30)
            inner = _entries(bytes(cramjam.gzip.decompress(entry[34:34 + value_size])))
            first = offset - inner[-1][0]  # relative inner offsets (KIP-31)
            expected = [legacy.encode_message(o, 1, 0x08, append_time, sent[(partition, first + o)].key,
                                              sent[(partition, first + o)].value) for o, _ in inner]
            assert [e for _, e in inner] == expected

# -- metaq's producer to old brokers, over Metadata v0 on 0.8 -------------------------------------------------------

PRODUCER_CAPABILITY = "metaq producer writes old message formats"
PRODUCER_CASES = {V0_10: 1, V0_8: 0}
"""The message format each broker's log must hold after metaq's producer wrote to it (Produce v2 / v0)."""
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
PER_CODEC = 6


def _segment_entries(broker: ApacheKafkaBroker, topic: str, partition: int) -> list[tuple[int, int]]:
    """(magic, codec) of every top-level entry of a partition's first segment (see _segment_magics)."""
    segment = Path(broker.dir, "data", f"{topic}-{partition}", "00000000000000000000.log").read_bytes()
    entries, pos = [], 0
    while pos + 18 <= len(segment):
        (size,) = struct.unpack_from(">i", segment, pos + 8)
        entries.append((segment[pos + 16], segment[pos + 17] & 0x07))
        pos += 12 + size
    return entries


def _metaq_produce(broker: ApacheKafkaBroker, topic: str, fallback: str, magic: int
                   ) -> dict[tuple[int, int], Sent]:
    """PER_CODEC keyed, compressible records per codec, with explicit CreateTime timestamps, through metaq's
    producer whose leaders come from Metadata (v0 on 0.8: bootstrap only, no ZooKeeper); what each future
    acknowledged, with the timestamp the broker keeps (none in v0)."""
    acked: dict[tuple[int, int], Sent] = {}
    base_ts = int(time.time() * 1000) - 60_000
    for codec in CODEC_IDS:
        config = ProducerConfig.from_properties({"compression.type": codec, "broker.version.fallback": fallback,
                                                 "linger.ms": 100})
        settings = producer_connection_settings(config)
        layout = MetadataLayout.connect(broker.bootstrap, settings)
        with MetaqProducer(config, metadata=ClusterMetadata(layout, settings)) as producer:
            futures = []
            for i in range(PER_CODEC):
                key, value = b"%s-key-%d" % (codec.encode(), i), b"%s-value-%d-" % (codec.encode(), i) + b"x" * 300
                ts = base_ts + len(acked) + i
                futures.append((key, value, ts, producer.send(topic, value, key, partition=i % PARTITIONS,
                                                              timestamp_ms=ts)))
            producer.flush(60)
            for key, value, ts, future in futures:
                meta = future.result(0)
                assert meta.timestamp_ms == ts
                acked[(meta.partition, meta.offset)] = Sent(key, value, ts if magic else NO_TIMESTAMP)
    return acked


def _console_partition(broker: ApacheKafkaBroker, topic: str, partition: int, count: int, fallback: str
                       ) -> set[str]:
    """``metaq console-consumer --bootstrap-server`` reading ``count`` messages of one partition from the earliest
    offset, with no group."""
    argv = [sys.executable, "-m", "metaq", "console-consumer", "--bootstrap-server", broker.bootstrap, "--topic",
            topic, "--partition", str(partition), "--offset", "earliest", "--max-messages", str(count),
            "--timeout-ms", "60000",
            "--format", "%o|%k|%s\\n", "--property", f"broker.version.fallback={fallback}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.splitlines())


def _kcat_lines(broker: ApacheKafkaBroker, topic: str, fallback: str) -> set[str]:
    """kcat (librdkafka) reading every partition from the beginning, one line per record."""
    lines: set[str] = set()
    for partition in range(PARTITIONS):
        argv = ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning", "-e",
                "-q", "-f", "%p|%o|%T|%k|%s\\n", "-X", "api.version.request=false",
                "-X", f"broker.version.fallback={fallback}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        lines.update(done.stdout.splitlines())
    return lines


@pytest.mark.parametrize("version", [pytest.param(p.values[0], id=p.id, marks=p.marks)
                                     for p in kafka_params(PRODUCER_CAPABILITY, tuple(PRODUCER_CASES))])
def test_metaq_producer_writes_old_message_formats(apache_kafka: Callable[..., ApacheKafkaBroker], version: str
                                                   ) -> None:
    """metaq's producer negotiates Produce v0 (0.8.2.2, ``broker.version.fallback=0.8.2``) or v2 (0.10.2.2) and
    writes message set v0 / v1 with each codec (the broker's segment files show the magic and codec of every
    entry); metaq's consumer and kcat read back every key, value, offset and (v1) timestamp the futures
    acknowledged. The producer's leaders come from Metadata answers (v0 on 0.8) with no ZooKeeper; so do the
    reading group's on 0.10.2.2 (broker-coordinated; Kafka 0.8.2 has no group protocol, so there the group is
    ZooKeeper-coordinated). Idempotence, on by default, is turned off for these brokers; asked for, it fails."""
    magic = PRODUCER_CASES[version]
    broker = apache_kafka(version)
    fallback = CASES[version].fallback or "0.10.0"
    topic = f"legacy-produce-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS)
    sent = _metaq_produce(broker, topic, fallback, magic)

    for partition in range(PARTITIONS):
        offsets = sorted(o for p, o in sent if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition}: {offsets}"
        entries = _segment_entries(broker, topic, partition)
        assert {m for m, _ in entries} == {magic}
        assert {c for _, c in entries} == set(CODEC_IDS.values()), entries

    if magic:
        got = _read_as_member({"group.id": f"legacy-produce-{version}", "bootstrap.servers": broker.bootstrap,
                               "group.coordination": "kafka"}, topic, len(sent))
    else:
        got = _consume(broker, f"legacy-produce-{version}", topic, len(sent), fallback)
        # without ZooKeeper on 0.8: the console consumer reads a partition with Metadata v0 and Fetch v0
        first = {f"{o}|{s.key.decode()}|{s.value.decode()}" for (p, o), s in sent.items() if p == 0}
        assert _console_partition(broker, topic, 0, len(first), fallback) == first
    assert got == sent

    # kcat's %T shows 0 for a message without a timestamp (librdkafka's "not available")
    assert _kcat_lines(broker, topic, fallback) == {
        f"{p}|{o}|{max(s.timestamp, 0)}|{s.key.decode()}|{s.value.decode()}" for (p, o), s in sent.items()}

    config = ProducerConfig.from_properties({"enable.idempotence": "true", "broker.version.fallback": fallback})
    settings = producer_connection_settings(config)
    with MetaqProducer(config, metadata=ClusterMetadata(MetadataLayout.connect(broker.bootstrap, settings),
                                                   settings)) as producer:
        refused = producer.send(topic, b"never", partition=0).exception(60)
    assert isinstance(refused, MetaqError) and "enable.idempotence" in str(refused), refused


@pytest.mark.apache_kafka(V0_8)
def test_broker_coordinated_group_on_kafka_0_8_is_refused_naming_zookeeper(
        apache_kafka: Callable[..., ApacheKafkaBroker]) -> None:
    """Kafka 0.8.2 has no group protocol (JoinGroup came with 0.9): a ``group.coordination=kafka`` member with
    ``bootstrap.servers`` finds the coordinator (FindCoordinator v0 and Metadata v0 work) and then fails for good,
    saying to use ZooKeeper coordination, instead of retrying."""
    broker = apache_kafka(V0_8)
    topic = f"legacy-no-join-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS)
    config = {"group.id": "legacy-no-join", "bootstrap.servers": broker.bootstrap, "group.coordination": "kafka",
              "broker.version.fallback": "0.8.2", "consumer.timeout.ms": 3000}
    refusal = r"JoinGroup, brokers from Kafka 0\.9 on.*zookeeper\.connect"
    with pytest.raises(ConsumerRebalanceFailedError, match=refusal):
        with Consumer(config) as consumer:
            consumer.create_message_streams({topic: 1})
