"""metaq's Spark data source against real ZooKeeper-mode Apache Kafka brokers: a batch read from a ZooKeeper
group's offsets, a streaming query that commits its offsets to ZooKeeper, and the writer into a real Kafka topic,
each checked with confluent-kafka and with the offsets Kafka's broker reports; and both reads with only
``bootstrap.servers``, the group's offsets in ``__consumer_offsets``.

One SparkSession for the module (its start is the costly part) and one broker per version (harness:
metaq/testing/apache_kafka.py); topics are made with Kafka's CreateTopics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]  # re-exported, untyped

from integration_tests.peers import Msg, confluent_consume, confluent_produce
from metaq.errors import DataLossError
from metaq.spark.fetch import FetchSettings, read_range
from metaq.spark.planning import OffsetRange
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.kafka_fixtures import kafka_matrix
from metaq.testing.kafka_versions import V1_1, V3_9
from metaq.testing.spark import local_session
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

pyspark = pytest.importorskip("pyspark")

import metaq.spark  # noqa: E402  (after the skip: needs pyspark)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("metaq-spark-apache-kafka") as session:
        yield session


def read_rows(df: Any) -> list[Msg]:
    rows = df.selectExpr("partition", "offset", "unix_millis(timestamp) AS ts", "key", "value").collect()
    return sorted(Msg(r.partition, r.offset, r.ts, bytes(r.key) if r.key is not None else None,
                      bytes(r.value) if r.value is not None else None) for r in rows)


def produce(broker: ApacheKafkaBroker, topic: str, partitions: int, count: int) -> list[Msg]:
    base = int(time.time() * 1000) - 60_000  # recent: Kafka's 7-day retention deletes older records (and logs)
    produced: list[Msg] = []
    for p in range(partitions):
        items = [(f"k{i % 5}".encode(), f"{topic}-{p}-{i}".encode(), base + 1000 * p + i) for i in range(count)]
        produced += confluent_produce(broker.bootstrap, topic, p, items)
    return sorted(produced)


# 3.9.2 and 1.1.1 only: the newest and the oldest required Kafka; each version costs the Spark queries ~1 min
@kafka_matrix("Spark batch and streaming reads from ZooKeeper offsets, and the writer", versions=[V3_9, V1_1])
def test_spark_reads_and_writes(spark: Any, kafka_broker: ApacheKafkaBroker, kafka_zk_layout: ZkLayout) -> None:
    zk = kafka_broker.zk_connect
    kafka_broker.create_topic("ledger", partitions=2)
    kafka_broker.create_topic("ledger.copy", partitions=2)
    produced = produce(kafka_broker, "ledger", 2, 60)

    # batch: from the offsets a ZooKeeper group committed, up to the log ends the real broker reports
    kafka_zk_layout.write_offset("ledger-job", "ledger", 0, 12)
    options = {"zookeeper.connect": zk, "subscribe": "ledger", "group.id": "ledger-job"}
    bounds = metaq.spark.snapshot_offsets(options)
    assert bounds.starting == {("ledger", 0): 12, ("ledger", 1): 0}
    assert bounds.ending == {("ledger", 0): 60, ("ledger", 1): 60}
    batch = read_rows(spark.read.format("metaq").options(**{**options, **bounds.read_options()}).load())
    assert batch == [m for m in produced if m.partition == 1 or m.offset >= 12]
    assert metaq.spark.commit_offsets(options, bounds.ending) == bounds.ending
    assert kafka_zk_layout.offsets("ledger-job") == bounds.ending

    # streaming: several micro-batches, each batch's end committed to ZooKeeper
    stream_options = {"zookeeper.connect": zk, "subscribe": "ledger", "group.id": "ledger-stream",
                      "auto.offset.reset": "earliest", "maxOffsetsPerTrigger": "50"}
    kafka_zk_layout.write_offset("ledger-stream", "ledger", 1, 20)  # the group already read part of partition 1
    query = (spark.readStream.format("metaq").options(**stream_options).load()
             .writeStream.format("memory").queryName(f"ledger_{kafka_broker.version.replace('.', '_')}").start())
    try:
        query.processAllAvailable()
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert len(batches) >= 2 and max(batches) <= 50 and sum(batches) == 100
        wait_until(lambda: kafka_zk_layout.offsets("ledger-stream") == bounds.ending, 30,
                   "the last micro-batch's offsets in ZooKeeper")
    finally:
        query.stop()
    seen = spark.sql(f"SELECT partition, offset FROM {query.name}").collect()
    assert sorted((r.partition, r.offset) for r in seen) == sorted(
        (m.partition, m.offset) for m in produced if m.partition == 0 or m.offset >= 20)
    assert kafka_zk_layout.consumer_ids("ledger-stream") == []

    # the writer: into a real Kafka topic, read back by confluent-kafka
    frame = spark.read.format("metaq").options(**{"zookeeper.connect": zk, "subscribe": "ledger"}).load()
    (frame.selectExpr("'ledger.copy' AS topic", "partition", "key", "value")
     .write.format("metaq").options(**{"zookeeper.connect": zk}).mode("append").save())
    copied = []
    for p in range(2):
        copied += confluent_consume(kafka_broker.bootstrap, "ledger.copy", p, confluent_kafka.OFFSET_BEGINNING, 60)
    assert sorted((m.partition, m.key, m.value) for m in copied) == sorted(
        (m.partition, m.key, m.value) for m in produced)
    assert sorted(m.offset for m in copied if m.partition == 0) == list(range(60))


@kafka_matrix("Spark batch and streaming reads with bootstrap.servers only, offsets in __consumer_offsets",
              versions=[V3_9])
def test_spark_reads_without_zookeeper(spark: Any, kafka_broker: ApacheKafkaBroker) -> None:
    """Only ``bootstrap.servers`` (as on Kafka 4, which has no ZooKeeper): topics and leaders from Metadata, the
    logs' ends from ListOffsets, the group's offsets from OffsetFetch and committed by OffsetCommit, which
    confluent-kafka's ``committed()`` sees; an executor looks a leader up by Metadata too."""
    kafka_broker.create_topic("tally", partitions=2)
    produced = produce(kafka_broker, "tally", 2, 30)
    options = {"bootstrap.servers": kafka_broker.bootstrap, "subscribe": "tally", "group.id": "tally-job",
               "group.coordination": "kafka"}
    assert metaq.spark.commit_offsets(options, {("tally", 0): 10}) == {("tally", 0): 10}
    expected = [m for m in produced if m.partition == 1 or m.offset >= 10]
    assert read_rows(spark.read.format("metaq").options(**options).load()) == expected  # 1: no offset, earliest

    query = (spark.readStream.format("metaq").options(**options, **{"auto.offset.reset": "earliest"}).load()
             .writeStream.format("memory").queryName("tally_no_zk").start())
    peer = confluent_kafka.Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "tally-job"})
    try:
        query.processAllAvailable()

        def committed() -> list[tuple[int, int]]:
            found = peer.committed([confluent_kafka.TopicPartition("tally", p) for p in range(2)], timeout=30)
            return sorted((tp.partition, tp.offset) for tp in found)

        wait_until(lambda: committed() == [(0, 30), (1, 30)], 30, "the stream's offsets in __consumer_offsets")
    finally:
        query.stop()
        peer.close()
    assert read_rows(spark.sql("SELECT * FROM tally_no_zk")) == expected

    unplanned = OffsetRange("tally", 1, 5, 30)  # no leader planned: the executor asks Metadata
    chunks = read_range(unplanned, FetchSettings(bootstrap_servers=kafka_broker.bootstrap))
    assert [o for chunk in chunks for o in chunk.offsets] == list(range(5, 30))


@kafka_matrix("Spark reads past records Kafka deleted (failOnDataLoss)", versions=[V3_9, V1_1])
def test_fetch_reports_records_kafka_deleted(kafka_broker: ApacheKafkaBroker) -> None:
    """A range that starts below the log start: Kafka answers OFFSET_OUT_OF_RANGE with -1 for the log start
    and end, so the reader must ask the leader where the log starts to report (or skip) what was deleted."""
    kafka_broker.create_topic("trimmed", partitions=1)
    produce(kafka_broker, "trimmed", 1, 40)
    admin = AdminClient(kafka_broker.librdkafka_config())
    [done] = admin.delete_records([confluent_kafka.TopicPartition("trimmed", 0, 25)]).values()
    assert done.result(30).low_watermark == 25
    leader = ("127.0.0.1", kafka_broker.port)
    lost = OffsetRange("trimmed", 0, 10, 40, *leader)
    with pytest.raises(DataLossError, match=r"offsets \[10, 25\) of trimmed-0 cannot be read: retention deleted"):
        list(read_range(lost, FetchSettings(zookeeper_connect=kafka_broker.zk_connect)))
    kept = read_range(lost, FetchSettings(zookeeper_connect=kafka_broker.zk_connect, fail_on_data_loss=False))
    assert [o for chunk in kept for o in chunk.offsets] == list(range(25, 40))
