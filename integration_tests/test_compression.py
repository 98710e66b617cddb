"""Compression in the default install: kcat, confluent-kafka and kafka-python write gzip, snappy, lz4 and zstd
batches that the broker stores compressed and the metaq consumer and Spark range reader decode; metaq.Producer's
compressed batches are read by kcat and confluent-kafka; a batch nobody can decode stops its partition."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest

from integration_tests import peers
from metaq.broker.log import LogConfig, PartitionLog
from metaq.broker.process import BrokerProcess
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.errors import CorruptRecordError
from metaq.producer import Producer
from metaq.protocol.batches import BATCH_HEADER_SIZE
from metaq.protocol.compression import CODECS
from metaq.spark.fetch import FetchSettings, close_connections, read_range
from metaq.spark.planning import OffsetRange
from metaq.testing.batches import INVALID_BATCHES

CODEC_NAMES = ["gzip", "snappy", "lz4", "zstd"]
CLIENTS = ["kcat", "confluent", "kafka-python"]
N = 30
_HEADER = struct.Struct(">qiibIh")  # base offset, length, leader epoch, magic, crc, attributes


def _value(codec: str, client: str, i: int) -> bytes:
    return f"{client}-{codec}-{i}-".encode() + b"x" * 200  # compressible: every client really compresses


def stored_codecs(broker: BrokerProcess, topic: str, partition: int) -> list[int]:
    """The codec id of every batch in the partition's segment files, read from disk."""
    codecs = []
    for path in sorted((Path(broker.data_dir) / f"logs-{broker.broker_id}" / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + BATCH_HEADER_SIZE <= len(data):
            _, length, _, _, _, attributes = _HEADER.unpack_from(data, pos)
            codecs.append(attributes & 0x07)
            pos += 12 + length
    return codecs


def _produce(bootstrap: str, topic: str, partition: int, client: str, codec: str) -> None:
    values = [_value(codec, client, i) for i in range(N)]
    if client == "kcat":
        peers.kcat_produce(bootstrap, topic, partition, [(f"k{i}", v.decode()) for i, v in enumerate(values)],
                           compression_codec=codec)
    elif client == "confluent":
        peers.confluent_produce(bootstrap, topic, partition, [(b"k%d" % i, v, 0) for i, v in enumerate(values)],
                                **{"compression.type": codec})
    else:
        peers.kafka_python_produce(bootstrap, topic, partition, [(b"k%d" % i, v, None) for i, v in enumerate(values)],
                                   compression_type=codec, enable_idempotence=False)


def test_every_client_writes_every_codec_and_metaq_reads_it(broker, make_topic, zk_connect) -> None:
    layout = [(codec, client) for codec in CODEC_NAMES for client in CLIENTS]
    topic = make_topic("codecs", partitions=len(layout))
    for p, (codec, client) in enumerate(layout):
        _produce(broker.bootstrap, topic, p, client, codec)
        stored = stored_codecs(broker, topic, p)
        assert stored and set(stored) == {CODECS[codec]}, (client, codec, stored)

    expected = {(p, i): _value(codec, client, i) for p, (codec, client) in enumerate(layout) for i in range(N)}
    got = {}
    with Consumer({"group.id": "codecs", "zookeeper.connect": zk_connect, "consumer.timeout.ms": 5000,
                   "auto.offset.reset": "smallest"}) as consumer:
        (stream,) = consumer.create_message_streams({topic: 1})[topic]
        try:
            for m in stream:
                got[(m.partition, m.offset)] = m.value
                if len(got) >= len(expected):
                    break
        except ConsumerTimeoutError:
            pass
    assert got == expected

    settings = FetchSettings(zk_connect, fetch_max_bytes=4096)  # several fetches per partition
    try:
        for p, (codec, client) in enumerate(layout):
            r = OffsetRange(topic, p, 3, N, "127.0.0.1", broker.port)
            records = [rec for chunk in read_range(r, settings) for rec in chunk]
            assert [(rec[0], rec[3]) for rec in records] == [(i, _value(codec, client, i)) for i in range(3, N)]
    finally:
        close_connections()


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_metaq_producer_batches_are_read_by_kcat_and_confluent(broker, make_topic, zk_connect, codec) -> None:
    topic = make_topic(f"mq-{codec}", partitions=1)
    values = [_value(codec, "metaq", i) for i in range(N)]
    with Producer({"zookeeper.connect": zk_connect, "compression.type": codec, "linger.ms": 20}) as producer:
        futures = [producer.send(topic, v, key=b"k%d" % i, partition=0) for i, v in enumerate(values)]
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(N))
    stored = stored_codecs(broker, topic, 0)
    assert stored and set(stored) == {CODECS[codec]}
    assert len(stored) < N  # batched, so compression had several records to work on

    by_kcat = peers.kcat_consume(broker.bootstrap, topic, 0, "beginning", N)
    assert [(m.offset, m.key, m.value) for m in by_kcat] == [(i, b"k%d" % i, v) for i, v in enumerate(values)]
    by_confluent = peers.confluent_consume(broker.bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, N)
    assert [(m.offset, m.value) for m in by_confluent] == list(enumerate(values))
    console = subprocess.run([sys.executable, "-m", "metaq", "console-consumer", "--topic", topic, "--partition", "0",
                              "--offset", "earliest", "--zookeeper", zk_connect, "--timeout-ms", "3000"],
                             capture_output=True, text=True, timeout=60)
    assert console.returncode == 0, console.stderr
    assert console.stdout.splitlines() == [v.decode() for v in values]


def test_an_undecodable_batch_stops_its_partition_with_an_error(broker_cluster, make_topic, zk_connect) -> None:
    broker = broker_cluster.add(0)
    topic = make_topic("undecodable", partitions=1)
    peers.confluent_produce(broker.bootstrap, topic, 0, [(b"k", b"v%d" % i, 0) for i in range(3)])
    broker.stop()
    # A zstd batch with a valid CRC but garbage inside, at the log end: what damage on disk looks like (the
    # broker refuses such a batch from a producer).
    log_dir = Path(broker.data_dir) / "logs-0" / f"{topic}-0"
    plog = PartitionLog.open(log_dir, topic, 0, LogConfig(), recover=False)
    end = plog.log_end_offset
    plog.close()
    garbage = bytearray(INVALID_BATCHES["garbage-zstd"]()[0])
    struct.pack_into(">q", garbage, 0, end)
    with open(sorted(log_dir.glob("*.log"))[-1], "ab") as segment:
        segment.write(garbage)
    broker.start()

    with Consumer({"group.id": "undecodable", "zookeeper.connect": zk_connect, "consumer.timeout.ms": 20000,
                   "auto.offset.reset": "smallest"}) as consumer:
        (stream,) = consumer.create_message_streams({topic: 1})[topic]
        got = []
        with pytest.raises(CorruptRecordError, match=rf"{topic}-0: .*offset 3.*cannot be decoded.*zstd"):
            for m in stream:
                got.append(m.value)
        assert got == [b"v0", b"v1", b"v2"]  # everything before the bad batch was delivered first
