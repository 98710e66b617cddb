"""A topic deleted and re-created behind a broker's back (a wiped ZooKeeper) gets a new topic id; the broker
must not serve the old log as the new topic's: real broker process, ZooKeeper, confluent-kafka and raw requests."""

from __future__ import annotations

import shutil
import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from integration_tests import peers
from metaq.broker.log.partition_metadata import read_topic_id
from metaq.errors import ErrorCode
from metaq.testing.batches import good_batch
from metaq.testing.broker import BrokerCluster, fetch_error, request, topic_leaders
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout, paths

TOPIC = "reborn"


def _produce_error(bootstrap: str) -> int:
    req = ProduceRequest[7](transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=good_batch())])])
    return request(bootstrap, req, ProduceResponse, 7).responses[0].partition_responses[0].error_code


def _list_offsets_error(bootstrap: str) -> int:
    req = ListOffsetsRequest[1](replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=-2)])])
    return request(bootstrap, req, ListOffsetsResponse, 1).topics[0].partitions[0].error_code


def _consume_for(bootstrap: str, seconds: float) -> list[bytes]:
    """Every record a confluent-kafka consumer reads from the start of partition 0 within ``seconds``."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "reborn-readers",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    values: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _topic_id(zk_layout: ZkLayout) -> str:
    assignment = zk_layout.topic_assignment(TOPIC)
    assert assignment is not None and assignment.topic_id is not None
    return assignment.topic_id


def test_a_recreated_topic_does_not_resurrect_the_old_log(broker_cluster: BrokerCluster, zk_layout: ZkLayout) -> None:
    broker = broker_cluster.add(0, **{"auto.create.topics.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    old_id = _topic_id(zk_layout)
    old = [(b"k", b"old-%d" % i, 1_700_000_000_000 + i) for i in range(3)]
    peers.confluent_produce(broker.bootstrap, TOPIC, 0, old)
    old_dir = broker.data_dir / "logs-0" / f"{TOPIC}-0"
    assert read_topic_id(old_dir) == old_id  # recorded the first time the partition was served
    broker.stop()

    # ZooKeeper loses the topic (as a wiped data dir would) while the broker keeps its log
    zk_layout.client.delete(paths.topic_path(TOPIC), recursive=True)
    zk_layout.client.delete(paths.topic_config_path(TOPIC))
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    new_id = _topic_id(zk_layout)
    assert new_id != old_id
    wait_until(lambda: topic_leaders(broker.bootstrap, TOPIC) == {0: 0}, 30, "the re-created topic's leader")

    assert _consume_for(broker.bootstrap, 5.0) == []  # before the fix: old-0, old-1, old-2
    assert _produce_error(broker.bootstrap) == ErrorCode.INCONSISTENT_TOPIC_ID
    assert fetch_error(broker.bootstrap, TOPIC, 0, 0) == ErrorCode.INCONSISTENT_TOPIC_ID
    assert _list_offsets_error(broker.bootstrap) == ErrorCode.INCONSISTENT_TOPIC_ID
    lines = [line for line in broker.log_path.read_text().splitlines() if "Refusing to serve" in line]
    assert len(lines) == 1, lines
    assert str(old_dir) in lines[0] and old_id in lines[0] and new_id in lines[0] and "delete or move" in lines[0]
    assert read_topic_id(old_dir) == old_id and any(old_dir.glob("*.log"))  # the old data is left alone

    # the operator's fix: move the old log away; the partition starts empty under the new id
    broker.stop()
    shutil.move(old_dir, broker.data_dir / "old-reborn-0")
    broker.start()
    wait_until(lambda: topic_leaders(broker.bootstrap, TOPIC) == {0: 0}, 30, "the topic's leader after the restart")
    acked = peers.confluent_produce(broker.bootstrap, TOPIC, 0, [(b"k", b"new", 1_700_000_001_000)])
    assert [m.offset for m in acked] == [0]
    assert [m.value for m in peers.confluent_consume(broker.bootstrap, TOPIC, 0, 0, 1)] == [b"new"]
    assert read_topic_id(old_dir) == new_id


def test_a_topic_without_an_id_is_served_unchecked(broker_cluster: BrokerCluster, zk_layout: ZkLayout) -> None:
    """Topics created before topic ids (``/brokers/topics/<t>`` version 1) keep working."""
    broker = broker_cluster.add(0, **{"auto.create.topics.enable": "false"})
    zk_layout.client.create(paths.topic_config_path(TOPIC), b'{"version":1,"config":{}}', makepath=True)
    zk_layout.client.ensure_path(paths.BROKER_TOPICS)
    old_style = zk_layout.client.transaction()  # with its state, in one go: the controller finds it complete
    old_style.create(paths.topic_path(TOPIC), b'{"version":1,"partitions":{"0":[0]}}')
    old_style.create(paths.partitions_path(TOPIC), b"")
    old_style.create(paths.partition_path(TOPIC, 0), b"")
    old_style.create(paths.partition_state_path(TOPIC, 0),
                     b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}')
    assert not [r for r in old_style.commit() if isinstance(r, Exception)]
    wait_until(lambda: topic_leaders(broker.bootstrap, TOPIC) == {0: 0}, 30, "the topic's leader")
    peers.confluent_produce(broker.bootstrap, TOPIC, 0, [(b"k", b"v", 1_700_000_000_000)])
    assert [m.value for m in peers.confluent_consume(broker.bootstrap, TOPIC, 0, 0, 1)] == [b"v"]
    assert read_topic_id(broker.data_dir / "logs-0" / f"{TOPIC}-0") is None
