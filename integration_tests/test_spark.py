"""The metaq Spark data source against a real ZooKeeper, a real broker and Spark local[2].

One SparkSession serves the whole module (starting one takes ~15 s); each test has its own ZooKeeper
chroot, broker and topics. Data is produced with confluent-kafka, as a foreign client would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.peers import Msg, confluent_produce
from metaq.testing.broker import topic_leaders
from metaq.testing.spark import local_session
from metaq.testing.wait import wait_until
from zk_layout import PartitionState, TopicAssignment, ZkLayout, paths

pyspark = pytest.importorskip("pyspark")

import metaq.spark  # noqa: E402  (after the skip: needs pyspark)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("metaq-spark-tests") as session:
        yield session


def produce(bootstrap: str, topic: str, partition: int, count: int, tag: str = "") -> list[Msg]:
    now = int(time.time() * 1000)
    items = [(f"k{i % 5}".encode(), f"{tag}{topic}-{partition}-{i}".encode(), now + i) for i in range(count)]
    return confluent_produce(bootstrap, topic, partition, items)


def read_rows(df: Any) -> list[Msg]:
    rows = df.selectExpr("partition", "offset", "unix_millis(timestamp) AS ts", "key", "value").collect()
    return sorted(Msg(r.partition, r.offset, r.ts, bytes(r.key) if r.key is not None else None,
                      bytes(r.value) if r.value is not None else None) for r in rows)


def add_partition(layout: ZkLayout, topic: str) -> int:
    """What an admin tool does to grow a topic: a leader for the new partition, then the new assignment."""
    assignment = layout.topic_assignment(topic)
    assert assignment is not None
    partition = len(assignment.partitions)
    layout.set_partition_state(topic, partition, PartitionState(leader=0, leader_epoch=0, isr=(0,),
                                                                controller_epoch=1))
    grown = TopicAssignment({**assignment.partitions, partition: (0,)})
    layout.client.set(paths.topic_path(topic), grown.encode())
    return partition


def run_until(query: Any, predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """processAllAvailable until ``predicate`` holds: new partitions show up within metadata.max.age.ms."""
    deadline = time.monotonic() + timeout
    while True:
        query.processAllAvailable()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.3)


# -- batch ---------------------------------------------------------------------------------------------------


def test_batch_read_equals_produced_data(spark, broker, make_topic, zk_connect) -> None:
    make_topic("orders", 3)
    produced = sorted(m for p in range(3) for m in produce(broker.bootstrap, "orders", p, 40 + 10 * p))
    options = {"zookeeper.connect": zk_connect, "subscribe": "orders"}

    df = spark.read.format("metaq").options(**options).load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp"]
    assert df.rdd.getNumPartitions() == 2  # register(): as many tasks as local[2] has cores
    assert read_rows(df) == produced
    assert {r.topic for r in df.select("topic").distinct().collect()} == {"orders"}

    split = spark.read.format("metaq").options(**options, minPartitions="8").load()
    assert split.rdd.getNumPartitions() >= 8
    assert read_rows(split) == produced
    one_each = spark.read.format("metaq").options(**options, maxPartitions="100").load()
    assert one_each.rdd.getNumPartitions() == 3
    assert read_rows(one_each) == produced

    ending = '{"orders": {"0": 10, "2": 5}}'
    part = spark.read.format("metaq").options(**options, startingOffsets='{"orders": {"0": 3}}',
                                               endingOffsets=ending).load()
    wanted = [m for m in produced if (m.partition == 0 and 3 <= m.offset < 10) or m.partition == 1
              or (m.partition == 2 and m.offset < 5)]
    assert read_rows(part) == wanted


def test_batch_read_decodes_every_codec(spark, broker, make_topic, zk_connect) -> None:
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    make_topic("compressed", len(codecs))
    now = int(time.time() * 1000)
    produced = sorted(m for p, codec in enumerate(codecs) for m in confluent_produce(
        broker.bootstrap, "compressed", p, [(b"k", b"%s-%d-" % (codec.encode(), i) + b"x" * 100, now + i)
                                            for i in range(30)], **{"compression.type": codec}))
    df = spark.read.format("metaq").options(**{"zookeeper.connect": zk_connect, "subscribe": "compressed"}).load()
    assert read_rows(df) == produced


def test_batch_job_reads_from_group_offsets_and_commits(spark, broker, make_topic, zk_connect, zk_layout) -> None:
    make_topic("ledger", 2)
    for p in range(2):
        produce(broker.bootstrap, "ledger", p, 30)
    zk_layout.write_offset("ledger-job", "ledger", 0, 12)
    options = {"zookeeper.connect": zk_connect, "subscribe": "ledger", "group.id": "ledger-job"}

    bounds = metaq.spark.snapshot_offsets(options)
    assert bounds.starting == {("ledger", 0): 12, ("ledger", 1): 0}  # no offset yet: earliest (batch default)
    assert bounds.ending == {("ledger", 0): 30, ("ledger", 1): 30}
    df = spark.read.format("metaq").options(**{**options, **bounds.read_options()}).load()
    rows = read_rows(df)
    assert len(rows) == bounds.rows == 48 and min(r.offset for r in rows if r.partition == 0) == 12

    assert metaq.spark.commit_offsets(options, bounds.ending) == bounds.ending
    assert zk_layout.offsets("ledger-job") == bounds.ending
    assert metaq.spark.commit_offsets(options, {("ledger", 0): 5}) == {}  # never backwards
    assert zk_layout.read_offset("ledger-job", "ledger", 0) == 30
    assert spark.read.format("metaq").options(**options).load().count() == 0  # committed: nothing new


class _AcksAllProducer(threading.Thread):
    """confluent-kafka, acks=all, over every partition of ``topic`` until stopped; keeps (partition, offset)
    -> value of what was acknowledged, and the errors."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="test-spark-acks-all-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[object] = []
        self.unflushed = -1
        self.stop_event = threading.Event()

    def _done(self, err: object, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def run(self) -> None:
        import confluent_kafka

        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                                             "message.timeout.ms": 120000, "enable.idempotence": False})
        n = 0
        while not self.stop_event.is_set():
            producer.produce(self.topic, value=b"v%d" % n, partition=n % self.partitions, on_delivery=self._done)
            n += 1
            producer.poll(0.002)
        self.unflushed = producer.flush(120)

    def finish(self) -> dict[tuple[int, int], bytes]:
        self.stop_event.set()
        self.join(150)
        assert self.unflushed == 0 and not self.errors, (self.unflushed, self.errors[:3])
        return dict(self.acked)


def _exactly_once(rows: list[Msg], acked: dict[tuple[int, int], bytes], ends: dict[int, int]) -> None:
    """``rows`` hold each offset below ``ends`` once (and nothing else), acknowledged ones with their value."""
    offsets = sorted((m.partition, m.offset) for m in rows)
    assert offsets == [(p, o) for p in sorted(ends) for o in range(ends[p])], \
        f"{len(offsets)} rows, expected {sum(ends.values())}: offsets read twice or missing"
    got = {(m.partition, m.offset): m.value for m in rows}
    wrong = [k for k, v in acked.items() if k[1] < ends[k[0]] and got.get(k) != v]
    assert not wrong, f"acknowledged records not read as acknowledged: {wrong[:5]}"


def test_batch_read_follows_killed_leaders(spark, broker_cluster, zk_layout, zk_connect) -> None:
    """kill -9 the leader of partition 0 of an RF-3 topic while confluent-kafka produces acks=all, and read at
    once up to given ends (the tasks are sent to the dead leader, look the next one up in ZooKeeper and
    retry); restart it, kill the leader of partition 1 and read at once up to the latest offsets (the
    driver's ListOffsets waits for the election). Each read holds every record acknowledged before it
    started, exactly once; so does a read of everything after the producer finished."""
    from integration_tests.test_replication_clients import _cluster, _leader

    topic = "failover"
    brokers = _cluster(broker_cluster, zk_layout, topic, partitions=2)
    producer = _AcksAllProducer(",".join(b.bootstrap for b in brokers), topic, 2)
    producer.start()
    options = {"zookeeper.connect": zk_connect, "subscribe": topic}
    reads = []

    def kill_leader_and_read(partition: int, ending: str | None) -> tuple[list[Msg], dict[int, int]]:
        acked = dict(producer.acked)
        ends = {p: max(o for q, o in acked if q == p) + 1 for p in range(2)}
        victim = _leader(zk_layout, topic, partition)
        killed_at = time.monotonic()
        brokers[victim].kill()
        extra = {"endingOffsets": ending or json.dumps({topic: {str(p): e for p, e in ends.items()}})}
        rows = read_rows(spark.read.format("metaq").options(**options, **extra).load())
        reads.append((victim, len(rows), time.monotonic() - killed_at))
        wait_until(lambda: _leader(zk_layout, topic, partition) not in (victim, -1), 30, "a new leader")
        count = len(producer.acked)
        wait_until(lambda: len(producer.acked) > count + 100, 60, "acknowledged records after the failover")
        brokers[victim].start()
        wait_until(lambda: all(sorted(zk_layout.partition_state(topic, p).isr) == [0, 1, 2] for p in range(2)),
                   60, f"broker {victim} back in the ISR")
        return rows, ends

    try:
        wait_until(lambda: len(producer.acked) > 400, 30, "acknowledged records before the kill")
        given, given_ends = kill_leader_and_read(0, None)
        latest, before = kill_leader_and_read(1, "latest")
    finally:
        acked = producer.finish()
    _exactly_once(given, acked, given_ends)
    ends = {p: max((m.offset + 1 for m in latest if m.partition == p), default=0) for p in range(2)}
    assert all(ends[p] >= before[p] for p in range(2)), f"latest read ends {ends}, acknowledged before {before}"
    _exactly_once(latest, acked, ends)
    started = time.monotonic()
    everything = read_rows(spark.read.format("metaq").options(**options).load())
    settled = time.monotonic() - started
    final = {p: max(o for q, o in acked if q == p) + 1 for p in range(2)}
    _exactly_once(everything, acked, final)
    print("\nspark batch reads across leader kills: "
          + ", ".join(f"{n} rows read {t:.2f}s after broker {v} was killed" for v, n, t in reads)
          + f"; then {len(everything)} rows ({len(acked)} acknowledged) in {settled:.2f}s")


# -- streaming -----------------------------------------------------------------------------------------------


def test_stream_commits_zookeeper_offsets_over_several_batches(spark, broker, make_topic, zk_connect,
                                                               zk_layout) -> None:
    make_topic("clicks", 2)
    for p in range(2):
        produce(broker.bootstrap, "clicks", p, 150)
    zk_layout.write_offset("clicks-etl", "clicks", 1, 50)  # the group already read part of partition 1
    options = {"zookeeper.connect": zk_connect, "subscribe": "clicks", "group.id": "clicks-etl",
               "auto.offset.reset": "earliest", "maxOffsetsPerTrigger": "60"}
    query = (spark.readStream.format("metaq").options(**options).load()
             .writeStream.format("memory").queryName("clicks_seen").start())
    try:
        query.processAllAvailable()
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert len(batches) >= 4 and max(batches) <= 60 and sum(batches) == 250
        wait_until(lambda: zk_layout.offsets("clicks-etl") == {("clicks", 0): 150, ("clicks", 1): 150}, 15,
                   "the last batch's offsets in ZooKeeper")
        produce(broker.bootstrap, "clicks", 0, 20, tag="late-")
        query.processAllAvailable()
        wait_until(lambda: zk_layout.read_offset("clicks-etl", "clicks", 0) == 170, 15, "offsets to follow")
    finally:
        query.stop()
    seen = spark.sql("SELECT partition, offset FROM clicks_seen").collect()
    assert len(seen) == len({(r.partition, r.offset) for r in seen}) == 270
    assert min(r.offset for r in seen if r.partition == 1) == 50
    assert zk_layout.consumer_ids("clicks-etl") == [] and zk_layout.owners("clicks-etl") == {}


def test_group_coordination_kafka_keeps_offsets_in_consumer_offsets(spark, broker, make_topic, zk_connect,
                                                                    zk_layout) -> None:
    """group.coordination=kafka: a batch job and a stream read and commit the group's offsets by OffsetFetch /
    OffsetCommit, where a Kafka client sees them (ZooKeeper holds none); with ``bootstrap.servers`` instead of
    ``zookeeper.connect`` the batch read and the stream find topics and leaders by Metadata and reach no
    ZooKeeper (an executor whose leader refuses asks Metadata too); a live broker-coordinated group of the same
    id refuses the source's standalone commit, reported as GroupActiveError."""
    import confluent_kafka

    from metaq.client.group_offsets import KafkaGroupOffsets
    from metaq.errors import GroupActiveError
    from metaq.spark.fetch import FetchSettings, read_range
    from metaq.spark.planning import OffsetRange

    make_topic("orders", 2)
    produced = [m for p in range(2) for m in produce(broker.bootstrap, "orders", p, 20)]
    options = {"zookeeper.connect": zk_connect, "subscribe": "orders", "group.id": "orders-job",
               "group.coordination": "kafka"}
    no_zk = {"bootstrap.servers": broker.bootstrap, "subscribe": "orders", "group.id": "orders-job",
             "group.coordination": "kafka"}
    assert metaq.spark.commit_offsets(options, {("orders", 0): 12, ("orders", 1): 20}) == \
        {("orders", 0): 12, ("orders", 1): 20}
    assert metaq.spark.commit_offsets(no_zk, {("orders", 0): 5}) == {}  # never backwards
    peer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "orders-job"})
    try:
        seen = peer.committed([confluent_kafka.TopicPartition("orders", p) for p in range(2)], timeout=30)
        assert sorted((tp.partition, tp.offset) for tp in seen) == [(0, 12), (1, 20)]
        assert zk_layout.offsets("orders-job") == {}

        rows = read_rows(spark.read.format("metaq").options(**no_zk).load())  # resumes from them
        assert rows == [m for m in produced if m.partition == 0 and m.offset >= 12]

        query = (spark.readStream.format("metaq").options(**no_zk).load()
                 .writeStream.format("memory").queryName("orders_seen").start())
        try:
            late = produce(broker.bootstrap, "orders", 1, 5, tag="late-")
            query.processAllAvailable()
            kafka = KafkaGroupOffsets(zk_layout)
            wait_until(lambda: kafka.fetch("orders-job") == {("orders", 0): 20, ("orders", 1): 25}, 30,
                       "the stream's offsets in __consumer_offsets")
        finally:
            query.stop()
        streamed = read_rows(spark.sql("SELECT * FROM orders_seen"))
        assert streamed == sorted([m for m in produced if m.partition == 0 and m.offset >= 12] + late)
        seen = peer.committed([confluent_kafka.TopicPartition("orders", p) for p in range(2)], timeout=30)
        assert sorted((tp.partition, tp.offset) for tp in seen) == [(0, 20), (1, 25)]
        assert zk_layout.offsets("orders-job") == {}

        stale = OffsetRange("orders", 1, 18, 22, "127.0.0.1", 1)  # a refused leader: asked again by Metadata
        chunks = read_range(stale, FetchSettings(bootstrap_servers=broker.bootstrap))
        assert [o for chunk in chunks for o in chunk.offsets] == [18, 19, 20, 21]

        peer.subscribe(["orders"])  # the group now has a broker-coordinated member
        wait_until(lambda: (peer.poll(0.2), bool(peer.assignment()))[1], 60, "the peer's assignment")
        with pytest.raises(GroupActiveError, match="active broker-coordinated members"):
            metaq.spark.commit_offsets(no_zk, {("orders", 1): 26})
    finally:
        peer.close()


def test_graceful_stop_commits_the_last_batch(spark, broker, make_topic, zk_connect, zk_layout) -> None:
    make_topic("slow", 1)
    produce(broker.bootstrap, "slow", 0, 25)
    options = {"zookeeper.connect": zk_connect, "subscribe": "slow", "group.id": "slow-job",
               "startingOffsets": "earliest"}
    query = (spark.readStream.format("metaq").options(**options).load()
             .writeStream.format("memory").queryName("slow_seen").trigger(processingTime="1 hour").start())
    wait_until(lambda: bool(query.lastProgress and query.lastProgress["numInputRows"]), 60, "the first batch")
    assert zk_layout.read_offset("slow-job", "slow", 0) == 0  # the start; Spark has not polled the source since
    assert metaq.spark.stop_query(query, options) == {("slow", 0): 25}
    assert zk_layout.read_offset("slow-job", "slow", 0) == 25


def test_restart_from_checkpoint_loses_and_duplicates_nothing(spark, broker, make_topic, zk_connect, zk_layout,
                                                              tmp_path: Path) -> None:
    make_topic("events", 2)
    produced = [m for p in range(2) for m in produce(broker.bootstrap, "events", p, 150)]
    options = {"zookeeper.connect": zk_connect, "subscribe": "events", "group.id": "events-sink",
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "50"}
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(trigger: dict[str, Any]) -> Any:
        return (spark.readStream.format("metaq").options(**options).load()
                .selectExpr("partition", "offset", "value").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    first = start({"processingTime": "1 second"})
    wait_until(lambda: first.lastProgress is not None and first.lastProgress["batchId"] >= 1
               and first.lastProgress["numInputRows"] > 0, 60, "two batches")
    first.stop()  # mid-stream: more is waiting in the topic
    done = spark.read.parquet(str(out)).count()
    assert 0 < done < 300
    produced += [m for p in range(2) for m in produce(broker.bootstrap, "events", p, 40, tag="after-")]

    second = start({"availableNow": True})
    assert second.awaitTermination(120)
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == len({(r.partition, r.offset) for r in rows}) == len(produced) == 380
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == sorted(
        (m.partition, m.offset, m.value) for m in produced)
    assert zk_layout.offsets("events-sink") == {("events", 0): 190, ("events", 1): 190}


def test_partitions_and_topics_added_mid_stream_are_read(spark, broker, make_topic, zk_connect, zk_layout) -> None:
    make_topic("logs.web", 1)
    produce(broker.bootstrap, "logs.web", 0, 20)
    options = {"zookeeper.connect": zk_connect, "subscribePattern": r"logs\..*", "group.id": "logs-all",
               "startingOffsets": "earliest", "metadata.max.age.ms": "200"}
    query = (spark.readStream.format("metaq").options(**options).load()
             .writeStream.format("memory").queryName("logs_seen").start())
    try:
        query.processAllAvailable()
        new = add_partition(zk_layout, "logs.web")
        wait_until(lambda: len(topic_leaders(broker.bootstrap, "logs.web")) == 2, 10, "the broker to see it")
        make_topic("logs.api", 1)
        produce(broker.bootstrap, "logs.web", new, 15)
        produce(broker.bootstrap, "logs.api", 0, 10)
        count = lambda: spark.sql("SELECT count(*) AS n FROM logs_seen").collect()[0].n  # noqa: E731
        run_until(query, lambda: count() == 45, 60, "the new partition and topic")
    finally:
        query.stop()
    seen = spark.sql("SELECT topic, partition, count(*) AS n FROM logs_seen GROUP BY topic, partition").collect()
    assert sorted((r.topic, r.partition, r.n) for r in seen) == [("logs.api", 0, 10), ("logs.web", 0, 20),
                                                                  ("logs.web", 1, 15)]
    wait_until(lambda: zk_layout.offsets("logs-all") == {("logs.api", 0): 10, ("logs.web", 0): 20,
                                                         ("logs.web", 1): 15}, 15, "offsets of new partitions")


# -- writing ---------------------------------------------------------------------------------------------------


def test_writer_round_trips_batch_and_stream(spark, broker, make_topic, zk_connect, tmp_path: Path) -> None:
    for name, partitions in (("people", 2), ("people.mp", 1), ("people.copy", 1)):
        make_topic(name, partitions)
    people = spark.createDataFrame([(f"user{i}", i, f"name-{i}") for i in range(40)], "user STRING, n INT, name STRING")
    zk = {"zookeeper.connect": zk_connect}

    (people.selectExpr("user AS key", "struct(n, name) AS value")
     .write.format("metaq").options(**zk, topic="people", valueFormat="json").mode("append").save())
    back = (spark.read.format("metaq").options(**zk, subscribe="people", valueFormat="json",
                                              valueSchema="n INT, name STRING").load())
    assert sorted((bytes(r.key).decode(), r.value.n, r.value.name) for r in back.collect()) == sorted(
        (f"user{i}", i, f"name-{i}") for i in range(40))

    (people.selectExpr("'people.mp' AS topic", "0 AS partition", "CAST(user AS BINARY) AS key", "struct(n) AS value")
     .write.format("metaq").options(**zk, valueFormat="msgpack").mode("append").save())
    packed = (spark.read.format("metaq").options(**zk, subscribe="people.mp", valueFormat="msgpack")
              .schema("key BINARY, value STRUCT<n: INT>, offset BIGINT"))
    assert sorted(r.value.n for r in packed.load().collect()) == list(range(40))

    copy = (spark.readStream.format("metaq").options(**zk, subscribe="people", startingOffsets="earliest").load()
            .select("key", "value").writeStream.format("metaq").options(**zk, topic="people.copy")
            .option("checkpointLocation", str(tmp_path / "copy-checkpoint")).start())
    copy.processAllAvailable()
    copy.stop()
    copied = spark.read.format("metaq").options(**zk, subscribe="people.copy").load()
    original = spark.read.format("metaq").options(**zk, subscribe="people").load()
    assert sorted((bytes(r.key), bytes(r.value)) for r in copied.collect()) == sorted(
        (bytes(r.key), bytes(r.value)) for r in original.collect())


def test_headers_and_string_keys_round_trip(spark, broker, make_topic, zk_connect) -> None:
    import confluent_kafka

    make_topic("tagged", 1)
    make_topic("tagged.copy", 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):  # a foreign client writes the headers
        producer.produce("tagged", value=f"v{i}".encode(), key=f"user{i}".encode(), partition=0,
                         headers=[("n", str(i).encode()), ("empty", None)] if i % 2 else None)
    assert producer.flush(30) == 0
    zk = {"zookeeper.connect": zk_connect}
    expected = sorted((f"user{i}", f"v{i}".encode(), [("n", str(i).encode()), ("empty", None)] if i % 2 else [])
                      for i in range(10))

    def read(topic: str) -> list[tuple[str, bytes, list[tuple[str, bytes | None]]]]:
        df = spark.read.format("metaq").options(**zk, subscribe=topic, keyFormat="string",
                                                includeHeaders="true").load()
        assert df.columns[-1] == "headers" and df.schema["key"].dataType.simpleString() == "string"
        return sorted((r.key, bytes(r.value), [(h.key, None if h.value is None else bytes(h.value))
                                               for h in r.headers]) for r in df.collect())

    assert read("tagged") == expected
    copy = spark.read.format("metaq").options(**zk, subscribe="tagged", includeHeaders="true").load()
    copy.select("key", "value", "headers").write.format("metaq").options(**zk, topic="tagged.copy") \
        .mode("append").save()
    assert read("tagged.copy") == expected


def test_arrow_columns_hold_every_field_as_a_client_reads_it(spark, broker, make_topic, zk_connect) -> None:
    """Keys, null keys, null values, headers (a null header value among them), a plain and a gzip batch: each
    row as confluent-kafka reads it, in one Fetch per read and in many small ones."""
    import confluent_kafka

    make_topic("mixed", 1)
    now = int(time.time() * 1000)
    for batch, codec in enumerate(("none", "gzip")):
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                                             "compression.type": codec})
        for i in range(batch * 40, batch * 40 + 40):
            producer.produce("mixed", partition=0, timestamp=now + i,
                             key=None if i % 3 == 0 else f"k{i}".encode(),
                             value=None if i % 4 == 1 else f"v{i}".encode() * (i % 7),
                             headers=[("n", str(i).encode()), ("ключ", None), ("e", b"")] if i % 2 else None)
        assert producer.flush(30) == 0
    expected = _consume_with_headers(broker.bootstrap, "mixed", 80)
    assert any(r[0] is None for r in expected) and any(r[1] is None for r in expected)

    for extra in ({}, {"fetch.max.bytes": "1024"}):
        df = spark.read.format("metaq").options(**{"zookeeper.connect": zk_connect, "subscribe": "mixed",
                                                   "includeHeaders": "true", **extra}).load()
        rows = df.selectExpr("key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts",
                             "headers").orderBy("offset").collect()
        assert [(_bytes(r.key), _bytes(r.value), r.topic, r.partition, r.offset, r.ts,
                 [(h.key, _bytes(h.value)) for h in r.headers]) for r in rows] == expected, extra


def _consume_with_headers(bootstrap: str, topic: str, count: int) -> list[tuple[Any, ...]]:
    """(key, value, topic, partition, offset, timestamp, headers) of partition 0, as confluent-kafka reads them."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "headers-reference",
                                         "enable.auto.commit": False})
    out: list[tuple[Any, ...]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1],
                        list(msg.headers() or [])))
    finally:
        consumer.close()
    assert len(out) == count
    return out


def _bytes(data: bytes | bytearray | None) -> bytes | None:
    return None if data is None else bytes(data)


# -- bad input -------------------------------------------------------------------------------------------------


def test_bad_options_fail_at_planning_naming_the_option(spark, zk_connect) -> None:
    read = spark.read.format("metaq")
    with pytest.raises(Exception, match="zookeeper.connect"):
        read.option("subscribe", "t").load()
    with pytest.raises(Exception, match="startingOffsets"):
        read.options(**{"zookeeper.connect": zk_connect, "subscribe": "t", "startingOffsets": "yesterday"}).load()
    with pytest.raises(Exception, match="maxOffsetsPerTrigger"):
        read.options(**{"zookeeper.connect": zk_connect, "subscribe": "t", "maxOffsetsPerTriger": "9"}).load()
    stream = (spark.readStream.format("metaq").options(**{"zookeeper.connect": zk_connect, "subscribe": "t",
                                                          "endingOffsets": "latest"}).load()
              .writeStream.format("memory").queryName("never").start())
    with pytest.raises(Exception, match="endingOffsets"):
        stream.awaitTermination(60)
    frame = spark.createDataFrame([("a",)], "text STRING")
    with pytest.raises(Exception, match="'value' column"):
        frame.write.format("metaq").options(**{"zookeeper.connect": zk_connect, "topic": "t"}).mode("append").save()


def test_writing_to_a_missing_topic_fails_when_planned(spark, broker, zk_connect, tmp_path: Path) -> None:
    frame = spark.createDataFrame([("a",)], "value STRING")
    write = frame.write.format("metaq").options(**{"zookeeper.connect": zk_connect, "topic": "missing"})
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(Exception, match=r"UnknownTopicError: metaq sink: topic 'missing' \(option 'topic'\) "
                                        r"does not exist"):
        write.mode("append").save()
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs  # no task ran
    with pytest.raises(Exception, match=r'mode "overwrite" cannot replace'):
        write.mode("overwrite").save()
    stream = (spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value")
              .writeStream.format("metaq").options(**{"zookeeper.connect": zk_connect, "topic": "missing"})
              .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        with pytest.raises(Exception, match=r"topic 'missing' \(option 'topic'\) does not exist"):
            stream.awaitTermination(60)
    finally:
        stream.stop()


def test_unknown_topic_unreachable_zookeeper_and_malformed_offset(spark, broker, make_topic, zk_connect,
                                                                  zk_layout) -> None:
    read = spark.read.format("metaq")
    with pytest.raises(Exception, match=r"UnknownTopicError: topic 'nope' \(option 'subscribe'\) does not exist"):
        read.options(**{"zookeeper.connect": zk_connect, "subscribe": "nope"}).load().collect()
    with pytest.raises(Exception, match=r"ZooKeeperUnavailableError.*zookeeper.connect"):
        read.options(**{"zookeeper.connect": "127.0.0.1:9/none", "subscribe": "t",
                        "zookeeper.connection.timeout.ms": "1000"}).load().collect()
    make_topic("bills", 1)
    zk_layout.client.create(paths.offset_path("bills-job", "bills", 0), b"not-a-number", makepath=True)
    bad = zk_layout.full_path(paths.offset_path("bills-job", "bills", 0))
    with pytest.raises(Exception, match=f"MalformedNodeError: malformed node {bad}"):
        read.options(**{"zookeeper.connect": zk_connect, "subscribe": "bills", "group.id": "bills-job"}).load().count()
