"""The real-Kafka harness itself (metaq/testing/apache_kafka.py): each catalogued version starts, takes a topic
created Kafka's way, serves confluent-kafka, and its ZooKeeper registration is readable by metaq.

One broker per version for the whole module (the ``kafka_broker`` fixture); topics are per test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from metaq.client import ClusterClient
from metaq.testing.apache_kafka import ApacheKafkaBroker, ApacheKafkaCluster
from metaq.testing.kafka_fixtures import kafka_matrix
from metaq.testing.kafka_versions import REQUIRED_VERSIONS, V0_8, V0_10, V3_9
from metaq.testing.wait import wait_until
from metaq.zkclient import close as close_zk
from metaq.zkclient import connect as connect_zk
from zk_layout import PartitionState, ZkLayout

pytestmark = pytest.mark.timeout(600)

VERSIONS = (*REQUIRED_VERSIONS, V0_10, V0_8)
RECORDS = 20


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(kafka: ApacheKafkaBroker, topic: str, count: int) -> None:
    producer = Producer({**kafka.librdkafka_config(), "linger.ms": 5})
    errors: list[KafkaError] = []
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0, "records still undelivered after 60 s"
    assert errors == []


def consume_all(kafka: ApacheKafkaBroker, topic: str, partitions: int, count: int) -> dict[str, str]:
    """Read the topic from the start by assignment (works on every version: no group coordinator needed)."""
    consumer = Consumer({**kafka.librdkafka_config(), "group.id": f"harness-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: dict[str, str] = {}
    try:
        for _ in range(600):  # bounded: at most 600 polls of 0.5 s
            if len(seen) >= count:
                break
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen[bytes(message.key() or b"").decode()] = bytes(message.value() or b"").decode()
    finally:
        consumer.close()
    return seen


@kafka_matrix("produce and consume (confluent-kafka)", VERSIONS)
def test_produce_and_consume(kafka_broker: ApacheKafkaBroker) -> None:
    topic = unique_topic("smoke")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker, topic, RECORDS)
    assert consume_all(kafka_broker, topic, 2, RECORDS) == {f"k{i}": f"v{i}" for i in range(RECORDS)}


@kafka_matrix("metaq reads topics and leaders from ZooKeeper", VERSIONS)
def test_metaq_reads_the_real_brokers_zookeeper_layout(kafka_broker: ApacheKafkaBroker) -> None:
    topic = unique_topic("layout")
    kafka_broker.create_topic(topic, partitions=3)
    with ClusterClient.from_zookeeper(kafka_broker.zk_connect) as cluster:
        assert cluster.partitions_for(topic) == [0, 1, 2]
        leader = cluster.leader_for(topic, 1)
        assert leader is not None and (leader.port, leader.broker_id) == (kafka_broker.port, 0)
    listed = subprocess.run([sys.executable, "-m", "metaq", "topics", "list", "--zookeeper", kafka_broker.zk_connect,
                             "--json"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert {"topic": topic, "partitions": 3} in json.loads(listed.stdout)["topics"]


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("topics create by Kafka's TopicCommand", f"Kafka {V3_9}")
def test_topic_command_and_tool_classes(kafka_broker: ApacheKafkaBroker) -> None:
    """``via="tool"`` and ``run_tool``: Kafka's own command-line classes from the broker's jars."""
    topic = unique_topic("tool")
    kafka_broker.create_topic(topic, partitions=2, configs={"retention.ms": "3600000"}, via="tool")
    described = kafka_broker.run_tool("kafka-topics",
                                      ["--bootstrap-server", kafka_broker.bootstrap, "--describe", "--topic", topic])
    assert described.returncode == 0, described.stderr
    assert "PartitionCount: 2" in described.stdout and "retention.ms=3600000" in described.stdout


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("3-broker cluster, RF 3, leader SIGKILL and restart", f"Kafka {V3_9}")
def test_cluster_replicates_and_survives_a_killed_leader(kafka_cluster: ApacheKafkaCluster) -> None:
    topic = unique_topic("rf3")
    kafka_cluster.create_topic(topic, partitions=1, replication_factor=3)
    zk = connect_zk(kafka_cluster.zk_connect)
    try:
        layout = ZkLayout(zk)

        def state() -> PartitionState:
            current = layout.partition_state(topic, 0)
            assert current is not None
            return current

        wait_until(lambda: sorted(state().isr) == [0, 1, 2], 60, lambda: f"a full ISR, have {state()}")
        leader = kafka_cluster.broker(state().leader)
        leader.kill()
        wait_until(lambda: state().leader not in (-1, leader.broker_id), 60, lambda: f"a new leader: {state()}")
        producer = Producer({**kafka_cluster.librdkafka_config(), "acks": "all"})
        producer.produce(topic, value=b"after the kill")
        assert producer.flush(60) == 0
        leader.start()
        wait_until(lambda: sorted(state().isr) == [0, 1, 2], 90, lambda: f"the restarted broker in the ISR: {state()}")
    finally:
        close_zk(zk)
