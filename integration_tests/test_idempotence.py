"""Idempotent producers on real brokers (docs/delivery-guarantees.md, "Idempotent producers"): raw duplicates,
gaps and stale epochs; producer state through a kill -9 and a leader failover; confluent-kafka, kafka-python and
Java's KafkaProducer through a broker SIGKILL, each acknowledged record exactly once and in send order."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import confluent_kafka
import kafka
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.errors import ErrorCode
from metaq.producer import Producer, RecordMetadata
from metaq.testing.batches import idempotent_batch
from metaq.testing.broker import BrokerCluster, SharedBroker, request, shared_broker, topic_leaders
from metaq.testing.maven import MavenArtifact, classpath, resolve
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from zk_layout import ZkLayout
from zk_layout.producer_ids import PRODUCER_ID_BLOCK_SIZE

JAVA_CLIENTS = ("java-clients-3.9.1", [MavenArtifact("org.apache.kafka", "kafka-clients", "3.9.1"),
                                       MavenArtifact("org.slf4j", "slf4j-simple", "1.7.36")])
JAVA_PROGRAM = Path(__file__).parent / "java" / "IdempotentProducer.java"
PARTITIONS = 3


Shared = SharedBroker


@pytest.fixture(scope="module")
def shared(zk_server, tmp_path_factory) -> Iterator[Shared]:
    with shared_broker(zk_server.connect_string, tmp_path_factory.mktemp("idempotence"), "metaq-idempotence") as found:
        yield found


def kill_and_restart(broker: BrokerProcess) -> None:
    broker.kill()
    time.sleep(0.5)  # a crash, then an operator's restart
    broker.start()


def init_producer_id(bootstrap: str) -> int:
    resp = request(bootstrap, InitProducerIdRequest[0](transactional_id=None, transaction_timeout_ms=60000),
                   InitProducerIdResponse, 0)
    assert (resp.error_code, resp.producer_epoch) == (0, 0)
    return int(resp.producer_id)


def produce(bootstrap: str, topic: str, records: bytes, acks: int = -1) -> tuple[int, int]:
    """(error code, base offset) of one Produce v7."""
    req = ProduceRequest[7](transactional_id=None, acks=acks, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    part = request(bootstrap, req, ProduceResponse, 7, timeout=30).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def high_watermark(bootstrap: str, topic: str) -> int:
    req = FetchRequest[4](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1024, isolation_level=0,
                          topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                              FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                     partition_max_bytes=1024)])])
    part = request(bootstrap, req, FetchResponse, 4).responses[0].partitions[0]
    assert part.error_code == 0
    return int(part.high_watermark)


# ------------------------------------------------------------------------------------------ raw requests


def test_a_resent_batch_is_answered_with_its_original_offset_and_stored_once(shared: Shared) -> None:
    topic = shared.topic("dup")
    pid = init_producer_id(shared.broker.bootstrap)
    first = produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, 0))
    second = produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, 3))
    resent = produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, 0))
    assert (first, second, resent) == ((0, 0), (0, 3), (0, 0))
    assert high_watermark(shared.broker.bootstrap, topic) == 6


def test_a_gap_and_a_stale_epoch_are_refused(shared: Shared) -> None:
    topic = shared.topic("gap")
    pid = init_producer_id(shared.broker.bootstrap)
    bootstrap = shared.broker.bootstrap
    assert produce(bootstrap, topic, idempotent_batch(pid, 1, 0)) == (0, 0)
    assert produce(bootstrap, topic, idempotent_batch(pid, 1, 7))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(bootstrap, topic, idempotent_batch(pid, 0, 3))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert high_watermark(shared.broker.bootstrap, topic) == 3


def test_producer_ids_come_from_zookeeper_blocks_never_reused_after_a_restart(shared: Shared) -> None:
    first, second = init_producer_id(shared.broker.bootstrap), init_producer_id(shared.broker.bootstrap)
    with session(shared.zk_connect) as client:
        block = ZkLayout(client).latest_producer_id_block()
        raw = client.get("/latest_producer_id_block")[0]
    assert block is not None and block.broker == 0 and block.first <= first < second <= block.last
    assert block.last - block.first + 1 == PRODUCER_ID_BLOCK_SIZE
    assert raw == (b'{"version":1,"broker":0,"block_start":"%d","block_end":"%d"}' % (block.first, block.last))
    shared.broker.stop()
    shared.broker.start()
    assert init_producer_id(shared.broker.bootstrap) > block.last  # the unused rest of the block is abandoned


def test_a_resend_after_a_kill_9_is_still_deduplicated(shared: Shared) -> None:
    topic = shared.topic("crash")
    pid = init_producer_id(shared.broker.bootstrap)
    for seq in range(0, 30, 3):
        produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, seq))
    kill_and_restart(shared.broker)
    wait_until(lambda: len(topic_leaders(shared.broker.bootstrap, topic)) == 1, 20, "the topic served again")
    # the answer to the last five was "lost": the producer resends them, in order
    assert [produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, seq)) for seq in range(15, 30, 3)] == [
        (0, offset) for offset in range(15, 30, 3)]
    assert produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, 30)) == (0, 30)
    assert produce(shared.broker.bootstrap, topic, idempotent_batch(pid, 0, 40))[0] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert high_watermark(shared.broker.bootstrap, topic) == 33


# ------------------------------------------------------------------------------------------ leader failover


def test_a_new_leader_deduplicates_a_resend_the_old_leader_acknowledged(broker_cluster: BrokerCluster,
                                                                         zk_layout: ZkLayout) -> None:
    fast = {"zookeeper.session.timeout.ms": 4000, "replica.fetch.wait.max.ms": 200,
            "replica.fetch.backoff.ms": 200}
    brokers = [broker_cluster.add(i, **fast) for i in range(3)]
    create_topic(zk_layout, "failover", 1, replication_factor=3)
    for b in brokers:
        wait_until(lambda b=b: len(topic_leaders(b.bootstrap, "failover")) == 1, 20, f"topic on {b.broker_id}")
    state = zk_layout.partition_state("failover", 0)
    assert state is not None
    leader = brokers[state.leader]
    pid = init_producer_id(leader.bootstrap)
    acked = [produce(leader.bootstrap, "failover", idempotent_batch(pid, 0, seq)) for seq in range(0, 15, 3)]
    assert acked == [(0, offset) for offset in range(0, 15, 3)]  # acks=all: every ISR member has them
    leader.kill()

    def new_leader() -> int:
        current = zk_layout.partition_state("failover", 0)
        return -1 if current is None or current.leader in (leader.broker_id, -1) else current.leader

    wait_until(lambda: new_leader() >= 0, 30, "a new leader")
    survivor = brokers[new_leader()]
    wait_until(lambda: topic_leaders(survivor.bootstrap, "failover").get(0) == survivor.broker_id, 30,
               "the new leader serving the partition")
    resent = [produce(survivor.bootstrap, "failover", idempotent_batch(pid, 0, seq)) for seq in range(6, 15, 3)]
    assert resent == [(0, 6), (0, 9), (0, 12)]
    assert produce(survivor.bootstrap, "failover", idempotent_batch(pid, 0, 15)) == (0, 15)
    assert high_watermark(survivor.bootstrap, "failover") == 18


# ------------------------------------------------------------------------------------------ real clients


def _read_partitions(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {p: [m.value or b"" for m in peers.kcat_consume(bootstrap, topic, p, "beginning", timeout=60)]
            for p in range(PARTITIONS)}


def _check_exactly_once_in_order(logs: dict[int, list[bytes]], acked: dict[bytes, tuple[int, int]]) -> None:
    """Every acknowledged record is in the log once, at its acknowledged offset; nothing is there twice; each
    partition holds its records in send order (values are send sequence numbers)."""
    for partition, values in logs.items():
        assert len(values) == len(set(values)), f"partition {partition} holds duplicates"
        seqs = [int(v) for v in values]
        assert seqs == sorted(seqs), f"partition {partition} is out of send order"
    where = {v: (p, offset) for p, values in logs.items() for offset, v in enumerate(values)}
    wrong = {v: (pos, where.get(v)) for v, pos in acked.items() if where.get(v) != pos}
    assert not wrong, f"{len(wrong)} acknowledged records missing or elsewhere, e.g. {list(wrong.items())[:5]}"


def _through_a_kill(shared: Shared, acked: dict[bytes, tuple[int, int]], send_all: Callable[[], None]) -> None:
    """Run ``send_all`` (a client sending paced records) while the broker is SIGKILLed once a first share of them
    is acknowledged and restarted."""
    sender = threading.Thread(target=send_all, name="idempotent-sender", daemon=True)
    sender.start()
    wait_until(lambda: len(acked) >= 1000, 60, "acknowledgements before the kill")
    kill_and_restart(shared.broker)
    sender.join(240)
    assert not sender.is_alive(), "the client did not finish sending"


def _values(count: int) -> list[bytes]:
    return [b"%08d" % i for i in range(count)]


@pytest.mark.compat("idempotent producer", "confluent-kafka")
def test_confluent_kafka_idempotent_through_a_broker_sigkill(shared: Shared) -> None:
    topic = shared.topic("confluent", PARTITIONS)
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    def send_all() -> None:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": shared.broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
            "message.send.max.retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 180000,
            "reconnect.backoff.max.ms": 500})
        for i, value in enumerate(_values(20000)):
            producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)
            producer.poll(0.02 if i % 100 == 0 else 0)
        assert producer.flush(180) == 0

    _through_a_kill(shared, acked, send_all)
    assert not errors, errors[:5]
    _check_exactly_once_in_order(_read_partitions(shared.broker.bootstrap, topic), acked)


@pytest.mark.compat("idempotent producer", "kafka-python")
def test_kafka_python_idempotent_through_a_broker_sigkill(shared: Shared) -> None:
    topic = shared.topic("kafkapython", PARTITIONS)
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def send_all() -> None:
        producer = kafka.KafkaProducer(bootstrap_servers=shared.broker.bootstrap, enable_idempotence=True,
                                       acks="all", linger_ms=5, retries=1_000_000, retry_backoff_ms=100,
                                       delivery_timeout_ms=180000, reconnect_backoff_max_ms=500)
        for i, value in enumerate(_values(20000)):
            future = producer.send(topic, value, partition=i % PARTITIONS)
            future.add_callback(lambda md, v=value: acked.__setitem__(v, (md.partition, md.offset)))
            future.add_errback(errors.append)
            if i % 100 == 0:
                time.sleep(0.02)
        producer.flush(180)
        producer.close(30)

    _through_a_kill(shared, acked, send_all)
    assert not errors, errors[:5]
    _check_exactly_once_in_order(_read_partitions(shared.broker.bootstrap, topic), acked)


def test_metaq_producer_is_idempotent_through_a_broker_sigkill(shared: Shared) -> None:
    topic = shared.topic("metaq", PARTITIONS)
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def on_done(future: Future[RecordMetadata], value: bytes) -> None:
        try:
            md = future.result()
        except Exception as e:  # the failure is asserted below
            errors.append(e)
        else:
            acked[value] = (md.partition, md.offset)

    def send_all() -> None:
        with Producer({"zookeeper.connect": shared.broker.zk_connect, "linger.ms": 5, "retries": 1000,
                       "retry.backoff.max.ms": 500}) as producer:
            assert producer.config.idempotent  # the default
            for i, value in enumerate(_values(20000)):
                producer.send(topic, value, partition=i % PARTITIONS).add_done_callback(
                    lambda f, v=value: on_done(f, v))
                if i % 100 == 0:
                    time.sleep(0.02)
            producer.flush(180)

    _through_a_kill(shared, acked, send_all)
    assert not errors, errors[:5]
    _check_exactly_once_in_order(_read_partitions(shared.broker.bootstrap, topic), acked)


@pytest.mark.compat("idempotent producer", "Java KafkaProducer 3.9")
def test_java_kafka_producer_defaults_through_a_broker_sigkill(shared: Shared, tmp_path: Path) -> None:
    jars = resolve(*JAVA_CLIENTS)
    topic = shared.topic("java", PARTITIONS)
    out = tmp_path / "acked.txt"
    proc = subprocess.Popen(["java", "-cp", classpath(jars), str(JAVA_PROGRAM), shared.broker.bootstrap, topic,
                             str(PARTITIONS), "20000", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("acked ") and int(line.split()[1]) >= 1000:
                break
        else:
            raise AssertionError(f"the Java producer acknowledged nothing: {proc.communicate()[1][-3000:]}")
        kill_and_restart(shared.broker)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, f"{stdout[-2000:]}\n{stderr[-4000:]}"
    assert "Instantiated an idempotent producer" in stderr
    acked: dict[bytes, tuple[int, int]] = {}
    for line in out.read_text().splitlines():
        partition, offset, value = line.split()
        acked[value.encode()] = (int(partition), int(offset))
    assert len(acked) == 20000
    _check_exactly_once_in_order(_read_partitions(shared.broker.bootstrap, topic), acked)
