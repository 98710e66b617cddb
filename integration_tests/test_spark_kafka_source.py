"""Spark's own Kafka source (``format("kafka")``, spark-sql-kafka-0-10 from Maven Central) reading a metaq topic,
in batch and in streaming, on the installed PySpark with Spark local[2].

spark-sql-kafka-0-10 4.3.0 is not on Maven Central: the 4.2.0 connector runs on the PySpark 4.3.0 session
(metaq/testing/java_peers.py, ``SPARK_KAFKA``). One SparkSession and one broker serve the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from integration_tests.peers import Msg, confluent_produce
from metaq.broker.process import BrokerProcess
from metaq.testing.broker import topic_leaders
from metaq.testing.java_peers import SPARK_KAFKA, spark_kafka_jars
from metaq.testing.spark import local_session
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import own_chroot

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def broker(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with own_chroot(zk_server, "metaq-spark-kafka") as connect:
        with BrokerProcess(connect, 0, tmp_path_factory.mktemp("spark-kafka")) as process:
            yield process


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("metaq-spark-kafka-source", spark_kafka_jars()) as session:
        yield session


def make_topic(broker: BrokerProcess, name: str, partitions: int) -> str:
    """Created over the wire (CreateTopics), as a Spark user's admin tool would."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the answer is in
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=30)
    wait_until(lambda: len(topic_leaders(broker.bootstrap, name)) == partitions, 15, f"topic {name} served")
    return name


def produce(broker: BrokerProcess, topic: str, partition: int, first: int, count: int) -> list[Msg]:
    items = [(f"k{i}".encode(), f"{topic}-{partition}-{i}".encode(), 1_700_000_000_000 + i)
             for i in range(first, first + count)]
    return confluent_produce(broker.bootstrap, topic, partition, items)


def rows(df: Any) -> list[tuple[int, int, bytes, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value))
                  for r in df.select("partition", "offset", "key", "value").collect())


def kafka_source(reader: Any, broker: BrokerProcess, topic: str) -> Any:
    return (reader.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest"))


@pytest.mark.compat("Spark Kafka source: batch read", SPARK_KAFKA.label)
def test_batch_read(spark: Any, broker: BrokerProcess) -> None:
    topic = make_topic(broker, "spark-kafka-batch", 2)
    produced = produce(broker, topic, 0, 0, 5) + produce(broker, topic, 1, 0, 3)
    df = kafka_source(spark.read, broker, topic).option("endingOffsets", "latest").load()
    assert rows(df) == sorted((m.partition, m.offset, m.key, m.value) for m in produced)


@pytest.mark.compat("Spark Kafka source: streaming read", SPARK_KAFKA.label)
def test_streaming_read(spark: Any, broker: BrokerProcess) -> None:
    topic = make_topic(broker, "spark-kafka-stream", 2)
    produced = produce(broker, topic, 0, 0, 4) + produce(broker, topic, 1, 0, 2)
    query = (kafka_source(spark.readStream, broker, topic).load().writeStream.format("memory")
             .queryName("spark_kafka_stream").start())
    try:
        query.processAllAvailable()
        assert rows(spark.table("spark_kafka_stream")) == sorted((m.partition, m.offset, m.key, m.value)
                                                                 for m in produced)
        produced += produce(broker, topic, 1, 2, 3)  # the next micro-batch carries only the new records
        query.processAllAvailable()
        assert rows(spark.table("spark_kafka_stream")) == sorted((m.partition, m.offset, m.key, m.value)
                                                                 for m in produced)
    finally:
        query.stop()
