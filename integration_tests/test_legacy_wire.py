"""The legacy wire against a real broker process: Produce v0..2 carrying message sets v0/v1 (written by
kafka-python's legacy builder, plain and every codec) up-converted and stored, Fetch v0..3 answered in the
old formats (checked byte by byte: the magic, the wrapper layout), Fetch v4 reading the same records as v2,
malformed old sets refused with CORRUPT_MESSAGE and nothing appended, and kafka-python's producer and
consumer pinned to api_version (0, 8, 2), (0, 9) and (0, 10, 2)."""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import cramjam
import kafka
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from integration_tests import peers
from metaq.childproc import die_with_parent, stop_process
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.errors import ErrorCode
from metaq.protocol import legacy
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.records import decode_records
from metaq.testing.broker import SharedBroker, request, shared_broker
from metaq.testing.kafka_tools import java_command, run_kafka_class
from metaq.testing.kafka_versions import V1_1
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from zk_layout import ZkLayout

TS = 1_700_000_000_000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


Shared = SharedBroker


@pytest.fixture(scope="module")
def shared(zk_server, tmp_path_factory) -> Iterator[SharedBroker]:
    """One broker for the module (a topic per test), on a ZooKeeper chroot of its own."""
    with shared_broker(zk_server.connect_string, tmp_path_factory.mktemp("legacy"), "metaq-legacy") as s:
        yield s


def message_set(magic: int, codec: int, items: list[tuple[bytes | None, bytes | None, int]]) -> bytes:
    """What kafka-python's producer sends with an old api_version: relative offsets 0..n-1."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (key, value, ts) in enumerate(items):
        assert builder.append(i, ts, key, value) is not None
    return bytes(builder.build())


def produce(bootstrap: str, version: int, topic: str, records: bytes) -> tuple[int, int]:
    """(error code, base offset) of one Produce ``version`` request."""
    data = ProduceRequest.TopicProduceData
    req = ProduceRequest[version](transactional_id=None, acks=1, timeout_ms=10000, topic_data=[data(
        name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)])])
    (part,) = request(bootstrap, req, ProduceResponse, version).responses[0].partition_responses
    return part.error_code, part.base_offset


def fetch(bootstrap: str, version: int, topic: str, offset: int, max_bytes: int = 1 << 20) -> tuple[int, bytes]:
    """(error code, record bytes) of one Fetch ``version`` request for partition 0."""
    req = FetchRequest[version](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                    FetchRequest.FetchTopic.FetchPartition(
                                        partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])
    part = request(bootstrap, req, FetchResponse, version).responses[0].partitions[0]
    return part.error_code, part.records or b""


def items(n: int, tag: str) -> list[tuple[bytes | None, bytes | None, int]]:
    """Values long enough to compress (the broker stores a batch uncompressed when that is smaller)."""
    return [(None if i % 4 == 0 else b"k%d" % i, None if i == 5 else f"{tag}-{i}-".encode() * 20, TS + i)
            for i in range(n)]


def magics(data: bytes) -> list[int]:
    """The magic byte of each complete entry (v0/v1 message or v2 batch) of a fetch answer."""
    return [data[pos + 16] for pos in _positions(data)]


@pytest.mark.parametrize("codec", list(CODECS))
def test_old_produce_is_stored_and_served_in_every_format(shared: Shared, codec: str) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic(f"legacy-{codec}")
    sent = []
    for version, magic in ((0, 0), (1, 0), (2, 1)):
        batch = items(6, f"p{version}")
        assert produce(bootstrap, version, topic, message_set(magic, CODECS[codec], batch)) == (0, len(sent))
        sent += [(key, value, ts if magic else -1) for key, value, ts in batch]
    expected = [(offset, ts, key, value) for offset, (key, value, ts) in enumerate(sent)]

    error, v2 = fetch(bootstrap, 4, topic, 0)
    assert error == 0 and set(magics(v2)) == {2}
    assert [r[:4] for r in decode_records(v2).records] == expected
    for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
        error, old = fetch(bootstrap, version, topic, 0)
        assert error == 0
        assert set(magics(old)) == {magic}
        if codec != "none":  # one wrapper per stored batch: compression kept
            assert len(magics(old)) == 3
            assert all(old[pos + 17] & 0x07 == CODECS[codec] for pos in _positions(old))
        assert [r[:4] for r in decode_records(old).records] == [
            (o, ts if magic else -1, k, v) for o, ts, k, v in expected]
    # a fetch into the middle of a stored batch: the old-format answer starts at the offset asked for
    error, old = fetch(bootstrap, 2, topic, 8)
    assert [r[0] for r in decode_records(old, 8).records] == list(range(8, 18))
    assert decode_records(old).records[0][0] == 8


def _positions(data: bytes) -> list[int]:
    out, pos = [], 0
    while len(data) - pos >= 17:
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        if pos + size > len(data):
            break
        out.append(pos)
        pos += size
    return out


def test_headers_are_dropped_and_a_small_fetch_gets_a_whole_first_message(shared: Shared) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic("legacy-headers")
    builder = BatchBuilder(1 << 20)
    for i in range(20):
        builder.append(TS + i, b"k", b"x" * 300, [("h", b"v")])
    assert produce(bootstrap, 3, topic, builder.build()) == (0, 0)
    error, old = fetch(bootstrap, 3, topic, 0, max_bytes=100)  # less than one converted batch
    records = decode_records(old).records
    assert error == 0 and records and records[0][:4] == (0, TS, b"k", b"x" * 300)
    assert all(r[4] == () for r in records)
    error, v2 = fetch(bootstrap, 4, topic, 0)
    assert decode_records(v2).records[0][4] == (("h", b"v"),)


def _corrupt_crc() -> bytes:
    data = bytearray(message_set(1, 0, items(3, "bad")))
    data[-1] ^= 1
    return bytes(data)


def _backwards() -> bytes:
    inner = b"".join(legacy.encode_message(o, 1, 0, TS, None, b"v") for o in (0, 2, 1))
    return legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(inner)))


def _nested() -> bytes:
    inner = legacy.build_message_set(1, 1, [(0, TS, None, b"v")])
    return legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(inner)))


def _magic3() -> bytes:
    data = bytearray(message_set(1, 0, items(1, "m3")))
    data[16] = 3
    return bytes(data)


@pytest.mark.parametrize("make", [_corrupt_crc, _backwards, _nested, _magic3], ids=lambda f: f.__name__[1:])
def test_malformed_old_message_sets_are_refused_and_nothing_is_appended(shared: Shared, make) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic(f"legacy-bad-{make.__name__[1:]}")
    assert produce(bootstrap, 2, topic, message_set(1, 0, items(2, "ok"))) == (0, 0)
    error, _ = produce(bootstrap, 2, topic, make())
    assert error == ErrorCode.CORRUPT_MESSAGE
    assert produce(bootstrap, 0, topic, message_set(0, 1, items(2, "after"))) == (0, 2)
    error, old = fetch(bootstrap, 1, topic, 0)
    assert [r[3] for r in decode_records(old).records] == [b"ok-0-" * 20, b"ok-1-" * 20, b"after-0-" * 20,
                                                           b"after-1-" * 20]


def test_zstd_batches_cannot_be_down_converted(shared: Shared) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic("legacy-zstd")
    peers.confluent_produce(bootstrap, topic, 0, [(b"k", b"z" * 1000, TS)], **{"compression.type": "zstd"})
    assert fetch(bootstrap, 3, topic, 0)[0] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert fetch(bootstrap, 4, topic, 0)[0] == 0


@pytest.mark.compat("old clients: produce and consume", "kafka-python")
@pytest.mark.parametrize("api_version", [(0, 8, 2), (0, 9), (0, 10, 2)], ids=lambda v: ".".join(map(str, v)))
def test_kafka_python_with_an_old_api_version(shared: Shared, api_version: tuple[int, ...]) -> None:
    bootstrap = shared.broker.bootstrap
    name = "-".join(map(str, api_version))
    topic = shared.topic(f"kp-{name}")
    timestamps = api_version >= (0, 10)
    codecs = ["none", "gzip", "snappy", "lz4"]
    sent = []
    for codec in codecs:
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, linger_ms=20,
                                       compression_type=None if codec == "none" else codec)
        try:
            futures = [producer.send(topic, partition=0, key=b"k%d" % i if i % 3 else None,
                                     value=f"{codec}-{i}".encode(), timestamp_ms=TS + i)
                       for i in range(5)]
            producer.flush(30)
            offsets = [f.get(timeout=30).offset for f in futures]
        finally:
            producer.close(10)
        assert offsets == list(range(len(sent), len(sent) + 5))
        sent += [(len(sent) + i, b"k%d" % i if i % 3 else None, f"{codec}-{i}".encode(),
                  TS + i if timestamps else None) for i in range(5)]
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, group_id=None,
                                   enable_auto_commit=False, consumer_timeout_ms=15000, fetch_max_wait_ms=100)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = [(r.offset, r.key, r.value, r.timestamp if timestamps else None)
               for _, r in zip(range(len(sent)), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == sent


@pytest.mark.compat("old clients: produce and consume", "kcat")
@pytest.mark.parametrize("fallback", ["0.8.2", "0.9.0"])
def test_kcat_without_api_versions(shared: Shared, fallback: str) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic(f"kcat-{fallback}")
    old = {"api_version_request": "false", "broker_version_fallback": fallback}
    sent = []
    for codec in ("gzip", "snappy"):
        pairs = [(f"k{i}", f"{codec}-{i}") for i in range(5)]
        peers.kcat_produce(bootstrap, topic, 0, pairs, compression_codec=codec, **old)
        sent += pairs
    got = peers.kcat_consume(bootstrap, topic, 0, "beginning", **old)
    assert {m.timestamp for m in got} == {0}  # magic 0 has none: kcat prints 0
    assert [(m.offset, m.key, m.value) for m in got] == [
        (i, k.encode(), v.encode()) for i, (k, v) in enumerate(sent)]


@pytest.mark.compat("old clients: offsets", "kafka-python")
@pytest.mark.parametrize("api_version", [(0, 8, 1), (0, 8, 2), (0, 9)], ids=lambda v: ".".join(map(str, v)))
def test_kafka_python_old_offset_commit_and_fetch(shared: Shared, api_version: tuple[int, ...]) -> None:
    bootstrap = shared.broker.bootstrap
    name = "-".join(map(str, api_version))
    topic = shared.topic(f"kp-offsets-{name}")
    assert produce(bootstrap, 0, topic, message_set(0, 0, items(10, "o"))) == (0, 0)
    tp = kafka.TopicPartition(topic, 0)
    for committed in (7, 9):
        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, group_id=f"g-{name}",
                                       enable_auto_commit=False, consumer_timeout_ms=10000)
        try:
            consumer.assign([tp])
            assert consumer.committed(tp) == (None if committed == 7 else 7)
            consumer.commit({tp: kafka.OffsetAndMetadata(committed, "", -1)})
            assert consumer.committed(tp) == committed
        finally:
            consumer.close()
    if api_version == (0, 8, 1):  # OffsetCommit v0: stored in ZooKeeper, where 0.8 consumers keep offsets
        with session(shared.zk_connect) as client:
            assert ZkLayout(client).read_offset(f"g-{name}", topic, 0) == 9


def test_list_offsets_v0_answers_segment_offsets(shared: Shared) -> None:
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

    bootstrap = shared.broker.bootstrap
    topic = shared.topic("legacy-list-offsets")
    assert produce(bootstrap, 0, topic, message_set(0, 0, items(4, "l"))) == (0, 0)
    answers = {}
    for ts, max_num in ((-1, 1), (-2, 1), (-1, 10)):
        part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=ts,
                                                                        max_num_offsets=max_num)
        req = ListOffsetsRequest[0](replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[part])])
        (p,) = request(bootstrap, req, ListOffsetsResponse, 0).topics[0].partitions
        answers[(ts, max_num)] = (p.error_code, list(p.old_style_offsets))
    assert answers == {(-1, 1): (0, [4]), (-2, 1): (0, [0]), (-1, 10): (0, [4, 0])}


PYKAFKA_SCRIPT = r"""
import json, sys, time
from pykafka import KafkaClient
from pykafka.common import OffsetType

bootstrap, zk, topic, group = sys.argv[1:5]
client = KafkaClient(hosts=bootstrap, broker_version="0.9.0")
t = client.topics[topic.encode()]
with t.get_sync_producer(min_queued_messages=1) as producer:
    for i in range(10):
        producer.produce(b"pykafka-%d" % i, partition_key=b"k%d" % i)
simple = t.get_simple_consumer(auto_offset_reset=OffsetType.EARLIEST, reset_offset_on_start=True,
                               consumer_timeout_ms=5000)
got_simple = [(m.partition_id, m.offset, m.partition_key.decode() if m.partition_key else None, m.value.decode())
              for m in simple]
simple.stop()
balanced = t.get_balanced_consumer(consumer_group=group.encode(), zookeeper_connect=zk,
                                   auto_offset_reset=OffsetType.EARLIEST, reset_offset_on_start=True,
                                   consumer_timeout_ms=5000, auto_commit_enable=False)
got_balanced = []
deadline = time.time() + 60
while len(got_balanced) < len(got_simple) and time.time() < deadline:
    m = balanced.consume(block=True)
    if m is not None:
        got_balanced.append((m.partition_id, m.offset, m.value.decode()))
balanced.commit_offsets()
balanced.stop()
print(json.dumps({"simple": got_simple, "balanced": got_balanced}))
"""


@pytest.mark.compat("old clients: produce and consume", "pykafka")
def test_pykafka_produces_and_its_simple_and_balanced_consumers_read_everything(shared: Shared) -> None:
    from metaq.testing.pypeer import peer_python

    python = peer_python("pykafka-2.8.0")  # pins kazoo 2.5.0: not in metaq's environment
    bootstrap = shared.broker.bootstrap
    topic = shared.topic("pykafka", partitions=2)
    out = subprocess.run([str(python), "-c", PYKAFKA_SCRIPT, bootstrap, shared.zk_connect, topic, "pk-group"],
                         capture_output=True, timeout=180)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    values = sorted(v for _, _, _, v in result["simple"])
    assert values == sorted(f"pykafka-{i}" for i in range(10))
    assert sorted(v for _, _, v in result["balanced"]) == values
    # a metaq group beside pykafka's (another group id, the same ZooKeeper) reads everything too
    got = [(m.partition, m.offset, m.value.decode())
           for m in _metaq_read(shared, "metaq-beside-pykafka", topic, len(values))]
    assert sorted(got) == sorted((p, o, v) for p, o, _, v in result["simple"])
    # offsets per partition run 0..n-1, as stored
    for partition in (0, 1):
        offsets = sorted(o for p, o, _, _ in result["simple"] if p == partition)
        assert offsets == list(range(len(offsets)))


def _metaq_read(shared: Shared, group: str, topic: str, count: int) -> list[Any]:
    """Up to ``count`` messages of ``topic`` read from the start by a metaq group member (one stream)."""
    consumer = Consumer({"group.id": group, "zookeeper.connect": shared.zk_connect, "consumer.timeout.ms": 5000,
                         "auto.offset.reset": "smallest"})
    got: list[Any] = []
    try:
        [stream] = consumer.create_message_streams({topic: 1})[topic]
        with contextlib.suppress(ConsumerTimeoutError):
            for message in stream:
                got.append(message)
                if len(got) == count:
                    break
    finally:
        consumer.shutdown()
    return got


def test_metaq_offset_commit_at_the_versions_of_kafka_0_8(shared: Shared) -> None:
    """What metaq's offsets channel sends a Kafka 0.8.2 (v1: stored by the broker) or 0.8.1 (v0: stored in
    ZooKeeper) coordinator, against the metaq broker."""
    from kafka.protocol.consumer import OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    from metaq.client.offsets_channel import commit_request

    bootstrap = shared.broker.bootstrap
    topic = shared.topic("legacy-commit")

    def coordinator_found() -> bool:  # v0: Kafka 0.8.2's ConsumerMetadata; creates the offsets topic
        return request(bootstrap, FindCoordinatorRequest[0](key="mg"), FindCoordinatorResponse, 0).error_code == 0

    wait_until(coordinator_found, 30, "a coordinator for group mg")
    for version, offset in ((1, 5), (0, 6)):
        def committed(version: int = version, offset: int = offset) -> bool:
            response = request(bootstrap, commit_request("mg", {(topic, 0): offset}, version),
                               OffsetCommitResponse, version)
            codes = [p.error_code for t in response.topics for p in t.partitions]
            loading = ([ErrorCode.COORDINATOR_NOT_AVAILABLE], [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
            assert codes == [0] or codes in loading, codes
            return codes == [0]

        wait_until(committed, 30, f"OffsetCommit v{version}")
        fetch = OffsetFetchRequest[version](group_id="mg", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
        (p,) = request(bootstrap, fetch, OffsetFetchResponse, version).topics[0].partitions
        assert (p.error_code, p.committed_offset) == (0, offset)
    with session(shared.zk_connect) as client:
        assert ZkLayout(client).read_offset("mg", topic, 0) == 6


OLD_CONSUMER = Path(__file__).parent / "java" / "OldConsumer.java"


@pytest.mark.compat("old clients: produce and consume", "Kafka 1.1.1 Scala console producer and old consumer")
def test_kafka_1_1_1_scala_old_producer_and_old_consumer(shared: Shared, tmp_path: Path) -> None:
    """Kafka 1.1.1's ConsoleProducer ``--old-producer`` (kafka.producer.Producer: Metadata v0, Produce v2 with
    gzip magic-1 wrappers) and its ZooKeeper-based old consumer (integration_tests/java/OldConsumer.java:
    Metadata v0, ListOffsets v0, Fetch v3, offsets committed to ZooKeeper), one JVM each."""
    bootstrap = shared.broker.bootstrap
    topic = shared.topic("scala-old-clients")
    lines = [f"k{i}:scala-{i}" for i in range(8)]
    before = int(time.time() * 1000)
    produced = run_kafka_class(V1_1, "kafka.tools.ConsoleProducer", [
        "--old-producer", "--sync", "--broker-list", bootstrap, "--topic", topic, "--compression-codec", "gzip",
        "--request-required-acks", "1", "--property", "parse.key=true", "--property", "key.separator=:"],
        input="\n".join(lines) + "\n")
    after = int(time.time() * 1000)
    assert produced.returncode == 0, produced.stderr[-3000:]
    error, stored = fetch(bootstrap, 4, topic, 0)
    records = decode_records(stored).records
    assert error == 0 and [(o, k, v) for o, _, k, v, _ in records] == [
        (i, f"k{i}".encode(), f"scala-{i}".encode()) for i in range(8)]
    assert all(before <= ts <= after for _, ts, _, _, _ in records)  # the producer's clock: CreateTime

    group = "scala-old-consumer"
    out_path, log_path = tmp_path / "old-consumer.jsonl", tmp_path / "old-consumer.log"
    log4j = tmp_path / "log4j.properties"
    log4j.write_text("log4j.rootLogger=WARN, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
                     "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n")
    # the single-file source launcher: no javac step, one JVM
    command = java_command(V1_1, str(OLD_CONSUMER), [shared.zk_connect, group, topic, "c1", "range",
                                                     str(len(records))], log4j=log4j)
    with open(out_path, "wb") as out, open(log_path, "wb") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, preexec_fn=die_with_parent())
    try:
        def events() -> list[dict[str, Any]]:
            return [json.loads(line) for line in out_path.read_text().splitlines() if line.endswith("}")]

        def idle() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            return any(e["event"] == "idle" for e in events())

        wait_until(idle, 120, "the old consumer reading every record")
    finally:
        stop_process(proc, 30)  # SIGTERM: the connector commits its offsets to ZooKeeper
    got = [(e["offset"], e["key"], e["value"], e["timestamp"], e["timestamp_type"])
           for e in events() if e["event"] == "record"]
    assert got == [(o, k.decode(), v.decode(), ts, "CreateTime") for o, ts, k, v, _ in records]
    with session(shared.zk_connect) as client:
        assert ZkLayout(client).read_offset(group, topic, 0) == len(records)


def _confluent_read(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes | None, bytes, int, int]]:
    """(offset, key, value, timestamp type, timestamp) of the first ``count`` records, as confluent-kafka reports
    them."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "fetch.wait.max.ms": 100,
                                         "enable.auto.commit": False})
    got = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])

        def read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.key(), msg.value(), *msg.timestamp()))
            return len(got) >= count

        wait_until(read, 30, f"{count} records of {topic}")
    finally:
        consumer.close()
    return got


def _confluent_produce(bootstrap: str, topic: str) -> list[tuple[Any, int, int, int]]:
    """(error, offset, timestamp type, timestamp) of three records' delivery reports (the producer is freed on
    return, so librdkafka does not keep reconnecting once the module's broker stops)."""
    acked = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(3):
        producer.produce(topic, key=b"c%d" % i, value=b"confluent-%d" % i, partition=0, timestamp=TS + i,
                         on_delivery=lambda err, msg: acked.append((err, msg.offset(), *msg.timestamp())))
    assert producer.flush(30) == 0
    return acked


@pytest.mark.compat("message.timestamp.type=LogAppendTime", "confluent-kafka")
def test_log_append_time_topic(shared: Shared) -> None:
    """``message.timestamp.type=LogAppendTime``: a v2 batch from confluent-kafka and a v1 set (Produce v2) get the
    broker's time, answered in the Produce response; confluent-kafka reads (TIMESTAMP_LOG_APPEND_TIME, that time),
    kafka-python at api_version (0, 10, 2) reads down-converted v1 messages of timestamp type 1, metaq's consumer
    the same timestamps."""
    bootstrap = shared.broker.bootstrap
    topic = shared.topic("log-append-time", config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    acked = _confluent_produce(bootstrap, topic)
    data = ProduceRequest.TopicProduceData
    req = ProduceRequest[2](transactional_id=None, acks=1, timeout_ms=10000, topic_data=[data(
        name=topic, partition_data=[data.PartitionProduceData(index=0, records=message_set(1, 1, items(2, "v1")))])])
    (part,) = request(bootstrap, req, ProduceResponse, 2).responses[0].partition_responses
    after = int(time.time() * 1000)
    assert (part.error_code, part.base_offset) == (0, 3) and before <= part.log_append_time_ms <= after
    assert [a[:3] for a in sorted(acked, key=lambda a: a[1])] == [
        (None, i, confluent_kafka.TIMESTAMP_LOG_APPEND_TIME) for i in range(3)]
    confluent_time = acked[0][3]
    assert before <= confluent_time <= part.log_append_time_ms and {a[3] for a in acked} == {confluent_time}
    expected_ts = [confluent_time] * 3 + [part.log_append_time_ms] * 2

    got = _confluent_read(bootstrap, topic, 5)
    assert [(o, t, ts) for o, _, _, t, ts in got] == [
        (o, confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, ts) for o, ts in enumerate(expected_ts)]
    assert [k for _, k, _, _, _ in got] == [b"c0", b"c1", b"c2", None, b"k1"]

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, api_version=(0, 10, 2), group_id=None,
                                   enable_auto_commit=False, consumer_timeout_ms=15000, fetch_max_wait_ms=100)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        old = [(r.offset, r.timestamp_type, r.timestamp) for _, r in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert old == [(o, 1, ts) for o, ts in enumerate(expected_ts)]

    mine = [(m.offset, m.timestamp) for m in _metaq_read(shared, "metaq-log-append-time", topic, 5)]
    assert mine == list(enumerate(expected_ts))
