"""Transactions on a real metaq broker (docs/transactions.md): confluent-kafka's transactional producer commits
and aborts across two partitions with consumer offsets in the transaction; confluent-kafka and metaq consumers
read them back read_committed and read_uncommitted; a zombie is fenced; an abandoned transaction times out; a
broker restart keeps the last stable offset and the aborted-transaction index."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import kafka
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.protocol.records import decode_records
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.broker import BrokerCluster, request, topic_leaders
from metaq.testing.kafka_tools import run_kafka_tool
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from zk_layout import ZkLayout

TIMEOUT_CLEANUP_MS = 500  # the broker looks for timed out transactions twice a second here


@dataclass
class TxnBroker:
    broker: BrokerProcess
    zk_connect: str

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def topic(self, partitions: int = 2) -> str:
        name = f"txn-{uuid.uuid4().hex[:8]}"
        with session(self.zk_connect) as client:
            create_topic(ZkLayout(client), name, partitions)
        wait_until(lambda: len(topic_leaders(self.bootstrap, name)) == partitions, 20, f"topic {name}")
        return name


@pytest.fixture(scope="module")
def txn_broker(zk_server, tmp_path_factory) -> Iterator[TxnBroker]:
    directory: Path = tmp_path_factory.mktemp("transactions")
    zk_connect = f"{zk_server.connect_string}/metaq-txn-{uuid.uuid4().hex}"
    broker = BrokerProcess(zk_connect, 0, directory, properties={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": TIMEOUT_CLEANUP_MS,
        "transaction.state.log.num.partitions": 4,
        "offsets.topic.num.partitions": 4,
    }).start()
    try:
        yield TxnBroker(broker, zk_connect)
    finally:
        broker.stop()


def producer(bootstrap: str, transactional_id: str, **extra: object) -> confluent_kafka.Producer:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                  "transaction.timeout.ms": 60000, **extra})
    p.init_transactions(30)
    return p


def produce_txn(p: confluent_kafka.Producer, topic: str, values: list[str], commit: bool) -> None:
    p.begin_transaction()
    for i, value in enumerate(values):
        p.produce(topic, value.encode(), partition=i % 2)
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int, partitions: int = 2) -> list[str]:
    """The values of ``topic`` in order per partition, read with confluent-kafka from the start until
    ``expected`` values arrived (and nothing more within a short grace)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": isolation, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[str] = []
    try:
        def more() -> bool:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
            elif msg is not None and msg.error().code() != confluent_kafka.KafkaError._PARTITION_EOF:
                raise AssertionError(msg.error())
            return len(got) >= expected
        wait_until(more, 30, f"{expected} {isolation} records of {topic}")
        for _ in range(4):  # nothing beyond them (an aborted record would show up here)
            msg = c.poll(0.25)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
    finally:
        c.close()
    return sorted(got)


def fetch(bootstrap: str, topic: str, partition: int, isolation_level: int) -> object:
    req = FetchRequest[4](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                          isolation_level=isolation_level, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                              FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=0,
                                                                     partition_max_bytes=1 << 20)])])
    return request(bootstrap, req, FetchResponse, 4).responses[0].partitions[0]


def latest(bootstrap: str, topic: str, partition: int, isolation_level: int) -> int:
    req = ListOffsetsRequest[2](replica_id=-1, isolation_level=isolation_level, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=partition, timestamp=-1)])])
    part = request(bootstrap, req, ListOffsetsResponse, 2).topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


# ------------------------------------------------------------------------------------------ two brokers


def test_markers_reach_partitions_led_by_another_broker(zk_server, tmp_path: Path) -> None:
    """A transaction over partitions of two brokers: the coordinator writes its own markers and sends
    WriteTxnMarkers to the other broker (both markers land: the LSO passes them on both partitions)."""
    zk_connect = f"{zk_server.connect_string}/metaq-txn2-{uuid.uuid4().hex}"
    cluster = BrokerCluster(zk_connect, tmp_path)
    try:
        props = {"transaction.state.log.num.partitions": 4, "offsets.topic.num.partitions": 4,
                 "transaction.state.log.replication.factor": 1, "offsets.topic.replication.factor": 1}
        cluster.add(0, **props)
        cluster.add(1, **props)
        topic = "spread"
        with session(zk_connect) as client:
            create_topic(ZkLayout(client), topic, 2, assignment={0: [0], 1: [1]})
        bootstrap = cluster.brokers[0].bootstrap
        wait_until(lambda: topic_leaders(bootstrap, topic) == {0: 0, 1: 1}, 30, "both partitions led")
        for tid in ("spread-a", "spread-b", "spread-c"):  # coordinators on either broker
            p = producer(bootstrap, tid)
            produce_txn(p, topic, [f"{tid}-c1", f"{tid}-c2"], commit=True)
            produce_txn(p, topic, [f"{tid}-a1", f"{tid}-a2"], commit=False)
            p.close()
        for partition, broker in ((0, cluster.brokers[0]), (1, cluster.brokers[1])):
            part = fetch(broker.bootstrap, topic, partition, 1)
            assert part.error_code == 0
            assert part.last_stable_offset == part.high_watermark == 12, (partition, part)
            assert sorted(a.first_offset for a in part.aborted_transactions) == [2, 6, 10]
        assert consume_all(bootstrap, topic, "read_committed", 6) == sorted(
            f"{t}-c{i}" for t in ("spread-a", "spread-b", "spread-c") for i in (1, 2))
    finally:
        cluster.stop()


# ------------------------------------------------------------------------------------------ against Kafka 3.9


def observe(bootstrap: str, topic: str) -> dict[str, object]:
    """What a read_committed and a read_uncommitted reader see of each partition: Fetch's high watermark, LSO,
    aborted transactions and record offsets, and ListOffsets' latest."""
    seen: dict[str, object] = {}
    for partition in (0, 1):
        for level in (0, 1):
            part = fetch(bootstrap, topic, partition, level)
            aborted = part.aborted_transactions
            seen[f"p{partition} level {level}"] = (
                part.error_code, part.high_watermark, part.last_stable_offset,
                None if aborted is None else sorted((a.first_offset,) for a in aborted),
                [r[0] for r in decode_records(bytes(part.records or b"")).records],
                latest(bootstrap, topic, partition, level))
    return seen


def scenario(bootstrap: str, topic: str) -> list[dict[str, object]]:
    """Commit, abort, then an open transaction (observed), then its commit (observed again)."""
    p = producer(bootstrap, f"tid-{topic}")
    produce_txn(p, topic, ["c1", "c2", "c3", "c4"], commit=True)
    produce_txn(p, topic, ["a1", "a2", "a3"], commit=False)
    p.begin_transaction()
    p.produce(topic, b"o1", partition=1)
    p.flush(30)
    open_view = observe(bootstrap, topic)
    p.commit_transaction(30)
    p.close()
    return [open_view, observe(bootstrap, topic)]


@pytest.mark.apache_kafka(V3_9)
def test_same_answers_as_kafka(txn_broker: TxnBroker, kafka_broker: ApacheKafkaBroker) -> None:
    """The same transactions against metaq and Apache Kafka 3.9: identical LSOs, aborted-transaction lists,
    record offsets served per isolation level and ListOffsets answers (Kafka decides what is right)."""
    name = f"txn-cmp-{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(name, partitions=2)
    expected = scenario(kafka_broker.bootstrap, name)
    # partition 1: c2 c4 C a2 A o1 (open): Kafka holds the LSO at 5 and lists the abort from offset 3
    assert expected[0]["p1 level 1"] == (0, 6, 5, [(3,)], [0, 1, 3], 5), expected
    topic = txn_broker.topic()
    assert scenario(txn_broker.bootstrap, topic) == expected


# ------------------------------------------------------------------------------------------ commit and abort


def test_commit_and_abort_with_confluent_kafka(txn_broker: TxnBroker) -> None:
    topic = txn_broker.topic()
    p = producer(txn_broker.bootstrap, f"tid-{topic}")
    produce_txn(p, topic, ["c1", "c2", "c3", "c4"], commit=True)
    produce_txn(p, topic, ["a1", "a2", "a3", "a4"], commit=False)
    produce_txn(p, topic, ["c5", "c6"], commit=True)
    p.close()
    committed = consume_all(txn_broker.bootstrap, topic, "read_committed", 6)
    assert committed == ["c1", "c2", "c3", "c4", "c5", "c6"]
    uncommitted = consume_all(txn_broker.bootstrap, topic, "read_uncommitted", 10)
    assert uncommitted == sorted(["c1", "c2", "c3", "c4", "a1", "a2", "a3", "a4", "c5", "c6"])
    # partition 0: c1 c3 C a1 a3 A c5 C -> the abort is listed for read_committed fetches
    part = fetch(txn_broker.bootstrap, topic, 0, 1)
    assert part.error_code == 0
    assert [(a.first_offset,) for a in part.aborted_transactions] == [(3,)]
    assert part.last_stable_offset == part.high_watermark == 8


def test_open_transaction_holds_the_last_stable_offset(txn_broker: TxnBroker) -> None:
    topic = txn_broker.topic()
    p = producer(txn_broker.bootstrap, f"tid-{topic}")
    produce_txn(p, topic, ["c1", "c2"], commit=True)  # offsets 0 and the marker 1 in each partition
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(30)
    assert latest(txn_broker.bootstrap, topic, 0, 0) == 3
    assert latest(txn_broker.bootstrap, topic, 0, 1) == 2
    part = fetch(txn_broker.bootstrap, topic, 0, 1)
    assert (part.high_watermark, part.last_stable_offset) == (3, 2)
    assert consume_all(txn_broker.bootstrap, topic, "read_committed", 2) == ["c1", "c2"]
    p.commit_transaction(30)
    p.close()
    assert latest(txn_broker.bootstrap, topic, 0, 1) == 4
    assert consume_all(txn_broker.bootstrap, topic, "read_committed", 3) == ["c1", "c2", "open"]


def metaq_consume(zk_connect: str, topic: str, isolation: str, expected: int) -> list[str]:
    """The values metaq's ZooKeeper consumer delivers from ``topic`` (both streams), until ``expected`` came
    and the stream then stays quiet for its consumer.timeout.ms."""
    consumer = Consumer({"group.id": f"mq-{uuid.uuid4().hex[:6]}", "zookeeper.connect": zk_connect,
                         "consumer.timeout.ms": 1500, "auto.offset.reset": "smallest",
                         "isolation.level": isolation, "zookeeper.session.timeout.ms": 6000})
    got: list[str] = []
    with consumer:
        stream = consumer.create_message_streams({topic: 1})[topic][0]

        def more() -> bool:
            try:
                for m in stream:
                    got.append(m.value.decode())
            except ConsumerTimeoutError:
                pass
            return len(got) >= expected
        wait_until(more, 30, f"{expected} {isolation} records of {topic} through metaq's consumer")
    return sorted(got)


def test_metaq_consumer_isolation_levels(txn_broker: TxnBroker) -> None:
    topic = txn_broker.topic()
    p = producer(txn_broker.bootstrap, f"tid-{topic}")
    produce_txn(p, topic, ["c1", "c2"], commit=True)
    produce_txn(p, topic, ["a1", "a2"], commit=False)
    produce_txn(p, topic, ["c3", "c4"], commit=True)
    p.close()
    assert metaq_consume(txn_broker.zk_connect, topic, "read_committed", 4) == ["c1", "c2", "c3", "c4"]
    # read_uncommitted (the default) gets the aborted records too, never the control records (6 markers)
    assert metaq_consume(txn_broker.zk_connect, topic, "read_uncommitted", 6) == \
        ["a1", "a2", "c1", "c2", "c3", "c4"]


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(c.committed([confluent_kafka.TopicPartition(topic, 0)], 20)[0].offset)
    finally:
        c.close()


def test_offsets_sent_to_a_transaction_are_visible_only_at_commit(txn_broker: TxnBroker) -> None:
    """consume-transform-produce: send_offsets_to_transaction commits the group's offsets with the output."""
    source, out = txn_broker.topic(1), txn_broker.topic()
    group = f"ctp-{source}"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    p = producer(txn_broker.bootstrap, f"tid-{out}")
    try:
        p.begin_transaction()
        p.produce(out, b"x", partition=0)
        p.send_offsets_to_transaction([confluent_kafka.TopicPartition(source, 0, 5)],
                                      consumer.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        assert committed_offset(txn_broker.bootstrap, group, source) == confluent_kafka.OFFSET_INVALID
        p.begin_transaction()
        p.produce(out, b"y", partition=0)
        p.send_offsets_to_transaction([confluent_kafka.TopicPartition(source, 0, 7)],
                                      consumer.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        assert committed_offset(txn_broker.bootstrap, group, source) == 7
    finally:
        p.close()
        consumer.close()
    assert consume_all(txn_broker.bootstrap, out, "read_committed", 1) == ["y"]


def test_a_zombie_is_fenced_by_a_new_instance(txn_broker: TxnBroker) -> None:
    topic = txn_broker.topic()
    tid = f"tid-{topic}"
    zombie = producer(txn_broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)
    successor = producer(txn_broker.bootstrap, tid)  # aborts the zombie's transaction, bumps the epoch
    produce_txn(successor, topic, ["s1", "s2"], commit=True)
    successor.close()
    with pytest.raises(confluent_kafka.KafkaException) as info:
        zombie.commit_transaction(30)
    error = info.value.args[0]
    assert error.fatal() and error.code() == confluent_kafka.KafkaError._FENCED, error
    del zombie  # a fenced producer's close() raises its fatal error again
    assert consume_all(txn_broker.bootstrap, topic, "read_committed", 2) == ["s1", "s2"]


def test_an_abandoned_transaction_times_out_and_is_aborted(txn_broker: TxnBroker) -> None:
    topic = txn_broker.topic()
    p = producer(txn_broker.bootstrap, f"tid-{topic}", **{"transaction.timeout.ms": 3000,
                                                          "message.timeout.ms": 3000})
    p.begin_transaction()
    p.produce(topic, b"abandoned", partition=0)
    p.flush(30)
    assert latest(txn_broker.bootstrap, topic, 0, 1) == 0  # held at the open transaction
    # the coordinator aborts it: the marker lets the LSO pass (offset 0 data, offset 1 the abort marker)
    wait_until(lambda: latest(txn_broker.bootstrap, topic, 0, 1) == 2, 30, "the timed out transaction aborted")
    part = fetch(txn_broker.bootstrap, topic, 0, 1)
    assert [(a.first_offset,) for a in part.aborted_transactions] == [(0,)]
    with pytest.raises(confluent_kafka.KafkaException) as info:
        p.commit_transaction(30)  # fenced: its epoch was bumped by the abort
    assert info.value.args[0].code() == confluent_kafka.KafkaError._FENCED, info.value.args[0]
    del p


def test_a_broker_restart_keeps_the_lso_and_the_aborted_index(txn_broker: TxnBroker) -> None:
    """Restarts the module's broker (SIGKILL; same port), with an aborted and an open transaction in the log."""
    topic = txn_broker.topic()
    p = producer(txn_broker.bootstrap, f"tid-{topic}")
    produce_txn(p, topic, ["a1", "a2"], commit=False)  # p0: a1@0 A@1
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)  # p0: open@2
    p.flush(30)
    assert latest(txn_broker.bootstrap, topic, 0, 1) == 2
    txn_broker.broker.kill()
    txn_broker.broker.start()
    wait_until(lambda: len(topic_leaders(txn_broker.bootstrap, topic)) == 2, 30, "the restarted broker serves")
    assert latest(txn_broker.bootstrap, topic, 0, 1) == 2  # the open transaction still holds it
    assert latest(txn_broker.bootstrap, topic, 0, 0) == 3
    part = fetch(txn_broker.bootstrap, topic, 0, 1)
    assert [(a.first_offset,) for a in part.aborted_transactions] == [(0,)]
    p.commit_transaction(60)  # the coordinator found the transaction in __transaction_state
    p.close()
    assert latest(txn_broker.bootstrap, topic, 0, 1) == 4
    assert consume_all(txn_broker.bootstrap, topic, "read_committed", 1) == ["open"]


def test_kafka_python_transactional_producer(txn_broker: TxnBroker) -> None:
    """kafka-python's transactional KafkaProducer: an aborted then a committed transaction."""
    topic = txn_broker.topic()
    p = kafka.KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=f"tid-{topic}",
                            max_block_ms=30000)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(2):
            p.send(topic, f"kx{i}".encode(), partition=i % 2)
        p.abort_transaction()
        p.begin_transaction()
        for i in range(2):
            p.send(topic, f"kc{i}".encode(), partition=i % 2)
        p.commit_transaction()
    finally:
        p.close(timeout=10)
    assert consume_all(txn_broker.bootstrap, topic, "read_committed", 2) == ["kc0", "kc1"]


# ------------------------------------------------------------------ KIP-360, DescribeTransactions, ListTransactions


def init_producer_id(bootstrap: str, transactional_id: str, version: int, producer_id: int = -1,
                     epoch: int = -1) -> tuple[int, int, int]:
    """(error, producer id, epoch) of an InitProducerId; from v3 with the producer id and epoch the client has."""
    fields: dict[str, object] = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000}
    if version >= 3:
        fields.update(producer_id=producer_id, producer_epoch=epoch)
    answer = request(bootstrap, InitProducerIdRequest[version](**fields), InitProducerIdResponse, version)
    return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)


def test_init_producer_id_bumps_the_epoch_it_is_given(txn_broker: TxnBroker) -> None:
    """KIP-360 (InitProducerId v3+): a producer that names its producer id and epoch gets the next epoch; a retry
    of that request (its answer lost) gets the same epoch again, not a fence; an older epoch or another
    producer id is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for v3, as Kafka answers before KIP-588)."""
    tid = f"kip360-{uuid.uuid4().hex[:6]}"
    found = request(txn_broker.bootstrap, FindCoordinatorRequest[1](key=tid, key_type=1), FindCoordinatorResponse, 1)
    assert found.error_code == 0
    first: list[tuple[int, int, int]] = []
    wait_until(lambda: first.append(init_producer_id(txn_broker.bootstrap, tid, 4)) or first[-1][0] == 0, 30,
               "a producer id for a new transactional id")
    _, pid, epoch = first[-1]
    assert init_producer_id(txn_broker.bootstrap, tid, 4, pid, epoch) == (0, pid, epoch + 1)
    assert init_producer_id(txn_broker.bootstrap, tid, 4, pid, epoch) == (0, pid, epoch + 1)  # a retry
    assert init_producer_id(txn_broker.bootstrap, tid, 4, pid, epoch + 1) == (0, pid, epoch + 2)
    assert init_producer_id(txn_broker.bootstrap, tid, 4, pid, epoch)[0] == 90  # PRODUCER_FENCED
    assert init_producer_id(txn_broker.bootstrap, tid, 3, pid, epoch)[0] == 47  # INVALID_PRODUCER_EPOCH
    assert init_producer_id(txn_broker.bootstrap, tid, 4, pid + 1000, epoch + 2)[0] == 90
    assert init_producer_id(txn_broker.bootstrap, tid, 1) == (0, pid, epoch + 3)  # a new instance: no check


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("kafka-transactions list and describe (ListTransactions, DescribeTransactions)", f"Kafka {V3_9}")
def test_kafka_transactions_tool_lists_and_describes(txn_broker: TxnBroker) -> None:
    """Kafka 3.9's ``kafka-transactions --bootstrap-server`` against metaq: ``list`` shows an open transaction
    (ListTransactions), ``describe`` its producer, state and partitions (FindCoordinator, DescribeTransactions)."""
    topic = txn_broker.topic()
    tid = f"tool-{topic}"
    p = producer(txn_broker.bootstrap, tid)
    try:
        p.begin_transaction()
        p.produce(topic, b"x", partition=1)
        p.flush(30)
        tool = ["--bootstrap-server", txn_broker.bootstrap]
        listed = run_kafka_tool(V3_9, "kafka-transactions", [*tool, "list"])
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split()[:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:] if line.strip()}
        assert rows[tid][0] == "0" and rows[tid][2] == "Ongoing", listed.stdout
        pid = rows[tid][1]
        described = run_kafka_tool(V3_9, "kafka-transactions", [*tool, "describe", "--transactional-id", tid])
        assert described.returncode == 0, described.stderr
        header, row = (line.split() for line in described.stdout.splitlines()[:2])
        fields = dict(zip(header, row, strict=True))
        assert (fields["CoordinatorId"], fields["TransactionalId"], fields["ProducerId"],
                fields["TransactionState"], fields["TransactionTimeoutMs"], fields["TopicPartitions"]) == (
                    "0", tid, pid, "Ongoing", "60000", f"{topic}-1"), described.stdout
        assert int(fields["CurrentTransactionStartTimeMs"]) > 0
        p.commit_transaction(30)
    finally:
        p.close()
    unknown = run_kafka_tool(V3_9, "kafka-transactions", [*tool, "describe", "--transactional-id", "never-used"])
    assert unknown.returncode == 1 and "failed because the ID could not be found" in unknown.stderr, unknown.stderr
