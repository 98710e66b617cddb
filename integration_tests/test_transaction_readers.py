"""read_committed in metaq's other readers (docs/transactions.md §4): the Spark source (batch and streaming), the
console consumer and ``offsets lookup``, each compared with its Apache peer on the same topic: Spark's own Kafka
source (spark-sql-kafka-0-10, option ``kafka.isolation.level``) and Kafka 3.9.2's kafka-console-consumer
(``--isolation-level``). A transactional confluent-kafka producer writes committed and aborted transactions and
leaves one open on partition 0, so that the last stable offset is below the high watermark there.

Under read_uncommitted every data record is read and no transaction marker ever appears as a row or a line;
under read_committed exactly the committed records, up to the last stable offset. One broker and one
SparkSession (with Spark's Kafka source on its class path) serve the module.
"""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from integration_tests.peers import Msg
from integration_tests.test_transactions import TxnBroker as Cluster  # a broker and topics made in ZooKeeper
from metaq.broker.process import BrokerProcess
from metaq.cli.main import main as cli_main
from metaq.testing.broker import request
from metaq.testing.java_peers import SPARK_KAFKA, spark_kafka_jars
from metaq.testing.kafka_tools import run_kafka_tool
from metaq.testing.kafka_versions import V3_9
from metaq.testing.spark import local_session
from metaq.testing.wait import wait_until

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test starts Spark: 200 s at load 18

Row = tuple[int, int, bytes, bytes]  # partition, offset, key, value


@dataclass
class TxnTopic:
    """A topic written by :func:`write_transactions`: the records of each kind, as the producer's
    delivery reports gave their offsets."""

    name: str
    committed: list[Msg]
    aborted: list[Msg]
    open: list[Msg]

    def rows(self, *kinds: list[Msg]) -> list[Row]:
        return sorted((m.partition, m.offset, m.key, m.value) for kind in kinds for m in kind)


@pytest.fixture(scope="module")
def cluster(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    zk_connect = f"{zk_server.connect_string}/metaq-txnr-{uuid.uuid4().hex}"
    directory: Path = tmp_path_factory.mktemp("txn-readers")
    broker = BrokerProcess(zk_connect, 0, directory, properties={
        "transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}).start()
    try:
        yield Cluster(broker, zk_connect)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("metaq-transaction-readers", spark_kafka_jars()) as s:
        yield s


class TxnWriter:
    """confluent-kafka's transactional producer; each transaction's records with their offsets."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "transactional.id": f"readers-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 900000, "linger.ms": 5})  # the open transaction outlives the module
        self.producer.init_transactions(30)

    def transaction(self, topic: str, tag: str, per_partition: dict[int, int]) -> list[Msg]:
        acked: list[Msg] = []

        def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
            assert err is None, err
            acked.append(Msg(msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(), msg.value()))

        self.producer.begin_transaction()
        for partition, count in per_partition.items():
            for i in range(count):
                self.producer.produce(topic, f"{tag}-{partition}-{i}".encode(), f"k-{tag}-{i}".encode(),
                                      partition=partition, on_delivery=on_delivery)
        self.producer.flush(30)
        assert len(acked) == sum(per_partition.values())
        return acked

    def commit(self) -> None:
        self.producer.commit_transaction(30)

    def abort(self) -> None:
        self.producer.abort_transaction(30)


@pytest.fixture(scope="module")
def txn_topic(cluster: Cluster) -> Iterator[TxnTopic]:
    """Committed, aborted, committed, aborted, then one transaction left open on partition 0 only."""
    name = cluster.topic()
    writer = TxnWriter(cluster.bootstrap)
    committed: list[Msg] = []
    aborted: list[Msg] = []
    for tag, commit, sizes in (("c1", True, {0: 3, 1: 2}), ("a1", False, {0: 2, 1: 3}),
                               ("c2", True, {0: 2, 1: 2}), ("a2", False, {0: 1, 1: 1})):
        (committed if commit else aborted).extend(writer.transaction(name, tag, sizes))
        writer.commit() if commit else writer.abort()
    opened = writer.transaction(name, "open", {0: 2})
    try:
        yield TxnTopic(name, committed, aborted, opened)
    finally:
        writer.abort()


# -- Spark -------------------------------------------------------------------------------------------------------


def spark_rows(df: Any) -> list[Row]:
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value))
                  for r in df.select("partition", "offset", "key", "value").collect())


def metaq_read(spark: Any, cluster: Cluster, topic: str, isolation: str | None) -> list[Row]:
    reader = (spark.read.format("metaq").option("zookeeper.connect", cluster.zk_connect).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if isolation is not None:
        reader = reader.option("isolation.level", isolation)
    return spark_rows(reader.load())


def kafka_read(spark: Any, cluster: Cluster, topic: str, isolation: str) -> list[Row]:
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .option("kafka.isolation.level", isolation).load())
    return spark_rows(df)


@pytest.mark.compat("Spark source: read_committed", SPARK_KAFKA.label)
def test_spark_batch_read_committed(spark: Any, cluster: Cluster, txn_topic: TxnTopic) -> None:
    expected = txn_topic.rows(txn_topic.committed)
    assert metaq_read(spark, cluster, txn_topic.name, "read_committed") == expected
    assert kafka_read(spark, cluster, txn_topic.name, "read_committed") == expected


@pytest.mark.compat("Spark source: read_uncommitted skips transaction markers", SPARK_KAFKA.label)
def test_spark_batch_read_uncommitted(spark: Any, cluster: Cluster, txn_topic: TxnTopic) -> None:
    expected = txn_topic.rows(txn_topic.committed, txn_topic.aborted, txn_topic.open)
    assert metaq_read(spark, cluster, txn_topic.name, None) == expected  # the default, as Kafka's
    assert kafka_read(spark, cluster, txn_topic.name, "read_uncommitted") == expected


def test_spark_stream_read_committed(spark: Any, cluster: Cluster) -> None:
    """A micro-batch ends at the last stable offset; the records of an open transaction arrive once it commits,
    those of an aborted one never."""
    topic = cluster.topic()
    writer = TxnWriter(cluster.bootstrap)
    committed = writer.transaction(topic, "c1", {0: 2, 1: 1})
    writer.commit()
    aborted = writer.transaction(topic, "a1", {0: 1, 1: 2})
    writer.abort()
    opened = writer.transaction(topic, "open", {0: 2, 1: 1})
    query = (spark.readStream.format("metaq").option("zookeeper.connect", cluster.zk_connect)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("isolation.level", "read_committed").load()
             .writeStream.format("memory").queryName("txn_stream").start())
    try:
        query.processAllAvailable()
        assert spark_rows(spark.table("txn_stream")) == TxnTopic(topic, committed, aborted, []).rows(committed)
        writer.commit()
        later = writer.transaction(topic, "a2", {0: 1, 1: 1})
        writer.abort()

        def all_committed() -> bool:
            query.processAllAvailable()
            return len(spark.table("txn_stream").collect()) >= len(committed) + len(opened)
        wait_until(all_committed, 60, "the committed transaction in the stream")
        query.processAllAvailable()
        assert later  # written, and aborted: never a row
        assert spark_rows(spark.table("txn_stream")) == TxnTopic(topic, [], [], []).rows(committed, opened)
    finally:
        query.stop()


# -- console consumer and offsets lookup ---------------------------------------------------------------------------


def metaq_cli(*args: str) -> str:
    """``metaq <args>`` in this process (a Python start per call costs seconds on a loaded machine)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    assert code == 0, f"metaq {' '.join(args)} exited {code}: {err.getvalue()}"
    return out.getvalue()


FORMAT = ("--property", "print.partition=true", "--property", "print.offset=true", "--property", "print.key=true")


def expected_lines(msgs: list[Msg]) -> list[str]:
    """Kafka's DefaultMessageFormatter's lines for ``msgs`` with print.partition, print.offset and print.key."""
    return [f"Partition:{m.partition}\tOffset:{m.offset}\t{m.key.decode()}\t{m.value.decode()}"
            for m in sorted(msgs, key=lambda m: (m.partition, m.offset))]


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("console consumer: --isolation-level", "Kafka 3.9.2")
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_console_consumer_partition(cluster: Cluster, txn_topic: TxnTopic, isolation: str) -> None:
    """One partition from the start, as Kafka's console consumer prints it at the same isolation level."""
    kinds = [txn_topic.committed] if isolation == "read_committed" else [
        txn_topic.committed, txn_topic.aborted, txn_topic.open]
    expected = expected_lines([m for kind in kinds for m in kind if m.partition == 0])
    ours = metaq_cli("console-consumer", "--zookeeper", cluster.zk_connect, "--topic", txn_topic.name,
                     "--partition", "0", "--offset", "earliest", "--isolation-level", isolation,
                     "--timeout-ms", "2000", *FORMAT)
    assert ours.splitlines() == expected
    theirs = run_kafka_tool(V3_9, "kafka-console-consumer", [
        "--bootstrap-server", cluster.bootstrap, "--topic", txn_topic.name, "--partition", "0",
        "--offset", "earliest", "--isolation-level", isolation, "--timeout-ms", "5000", *FORMAT])
    assert theirs.stdout.splitlines() == expected, theirs.stderr


def test_console_consumer_group_read_committed(cluster: Cluster, txn_topic: TxnTopic) -> None:
    """A group member (metaq's consumer) prints the committed records of both partitions, nothing else."""
    ours = metaq_cli("console-consumer", "--zookeeper", cluster.zk_connect, "--topic", txn_topic.name,
                     "--group", f"txnr-{uuid.uuid4().hex[:6]}", "--from-beginning",
                     "--isolation-level", "read_committed", "--timeout-ms", "5000", *FORMAT)
    assert sorted(ours.splitlines()) == sorted(expected_lines(txn_topic.committed))


def test_offsets_lookup_isolation_level(cluster: Cluster, txn_topic: TxnTopic) -> None:
    """latest is the high watermark by default and the last stable offset under read_committed: the first offset
    of the open transaction on partition 0; partition 1 has none open, so both are its end."""
    # partition 1 ends with an abort marker after its last record
    end1 = max(m.offset for m in txn_topic.committed + txn_topic.aborted if m.partition == 1) + 2
    first_open = min(m.offset for m in txn_topic.open)
    hw0 = max(m.offset for m in txn_topic.open) + 1
    uncommitted = metaq_cli("offsets", "lookup", "--zookeeper", cluster.zk_connect, "--topic", txn_topic.name)
    committed = metaq_cli("offsets", "lookup", "--zookeeper", cluster.zk_connect, "--topic", txn_topic.name,
                          "--isolation-level", "read_committed")
    assert uncommitted.splitlines() == [f"{txn_topic.name}:0:{hw0}", f"{txn_topic.name}:1:{end1}"]
    assert committed.splitlines() == [f"{txn_topic.name}:0:{first_open}", f"{txn_topic.name}:1:{end1}"]


# -- OffsetFetch require_stable (KIP-447) -------------------------------------------------------------------------


def fetch_offset(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(error code, offset) of partition 0 from OffsetFetch v7."""
    req = OffsetFetchRequest[7](group_id=group, require_stable=require_stable, topics=[
        OffsetFetchRequest[7].OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
    part = request(bootstrap, req, OffsetFetchResponse, 7).topics[0].partitions[0]
    return int(part.error_code), int(part.committed_offset)


def test_offset_fetch_require_stable(cluster: Cluster) -> None:
    """While a transaction holds a group's offsets, OffsetFetch v7 with require_stable answers
    UNSTABLE_OFFSET_COMMIT (88, retriable) for them, as Kafka does for Kafka Streams' exactly_once_v2; without
    it, the offset committed before; after the commit, the new offset."""
    topic, group = cluster.topic(), f"stable-{uuid.uuid4().hex[:6]}"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    writer = TxnWriter(cluster.bootstrap)
    try:
        writer.transaction(topic, "t", {0: 1})
        writer.producer.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 7)],
                                                    consumer.consumer_group_metadata(), 30)
        assert fetch_offset(cluster.bootstrap, group, topic, require_stable=True) == (88, -1)
        assert fetch_offset(cluster.bootstrap, group, topic, require_stable=False) == (0, -1)
        writer.commit()
        assert fetch_offset(cluster.bootstrap, group, topic, require_stable=True) == (0, 7)
    finally:
        consumer.close()
