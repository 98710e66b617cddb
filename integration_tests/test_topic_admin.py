"""Topic admin with real admin clients against two broker processes: every effect checked in ZooKeeper and on
disk, not only in the response (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DeleteRecords, DescribeCluster)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import confluent_kafka
import kafka
import kafka.errors
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as ConfigResourceKP

from integration_tests import peers
from metaq.testing.broker import BrokerProcess, fetch_error, topic_leaders
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

TIMEOUT = 30.0


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _result(futures: dict, key: object) -> object:
    return futures[key].result(timeout=TIMEOUT)


def _error_code(futures: dict, key: object) -> int:
    with pytest.raises(confluent_kafka.KafkaException) as info:
        _result(futures, key)
    return int(info.value.args[0].code())


def _log_dirs(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((broker.data_dir / f"logs-{broker.broker_id}").glob(f"{topic}-*"))


def _node(zk_layout: ZkLayout, path: str) -> dict | None:
    if zk_layout.client.exists(path) is None:
        return None
    return json.loads(zk_layout.client.get(path)[0])


def _produce(bootstrap: str, topic: str, partition: int, count: int, size: int = 10) -> None:
    items = [(b"k", b"%0*d" % (size, i), 1_700_000_000_000 + i) for i in range(count)]
    peers.confluent_produce(bootstrap, topic, partition, items)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_create_alter_grow_and_delete_a_topic_on_two_brokers(broker_cluster, zk_layout: ZkLayout) -> None:
    b0 = broker_cluster.add(0, **{"auto.create.topics.enable": "false"})
    b1 = broker_cluster.add(1, **{"auto.create.topics.enable": "false"})
    admin = _admin(b0.bootstrap)

    # CreateTopics: partitions over both brokers, the config stored in Kafka's format
    fs = admin.create_topics([NewTopic("adm", 4, 1, config={"retention.ms": "3600000"})])
    _result(fs, "adm")
    assert _node(zk_layout, "/config/topics/adm") == {"version": 1, "config": {"retention.ms": "3600000"}}
    assignment = _node(zk_layout, "/brokers/topics/adm")
    assert assignment is not None
    assert sorted(r[0] for r in assignment["partitions"].values()) == [0, 0, 1, 1]
    for b in (b0, b1):
        wait_until(lambda b=b: len(topic_leaders(b.bootstrap, "adm")) == 4, TIMEOUT, "adm on every broker")

    # refusals leave nothing behind
    fs = admin.create_topics([NewTopic("rf3", 1, 3)])
    assert _error_code(fs, "rf3") == confluent_kafka.KafkaError.INVALID_REPLICATION_FACTOR
    fs = admin.create_topics([NewTopic("compacted", 1, 1, config={"cleanup.policy": "shred"})])
    assert _error_code(fs, "compacted") == confluent_kafka.KafkaError.INVALID_CONFIG
    fs = admin.create_topics([NewTopic("adm", 1, 1)])
    assert _error_code(fs, "adm") == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
    fs = admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
    _result(fs, "dry")
    for name in ("rf3", "compacted", "dry"):
        assert zk_layout.client.exists(f"/brokers/topics/{name}") is None
        assert zk_layout.client.exists(f"/config/topics/{name}") is None

    # CreatePartitions: 4 -> 6, new state nodes, seen by both brokers
    fs = admin.create_partitions([NewPartitions("adm", 6)])
    _result(fs, "adm")
    assert sorted(_node(zk_layout, "/brokers/topics/adm")["partitions"]) == [str(p) for p in range(6)]
    assert _node(zk_layout, "/brokers/topics/adm/partitions/5/state")["leader_epoch"] == 0
    for b in (b0, b1):
        wait_until(lambda b=b: len(topic_leaders(b.bootstrap, "adm")) == 6, TIMEOUT, "6 partitions everywhere")
    fs = admin.create_partitions([NewPartitions("adm", 3)])
    assert _error_code(fs, "adm") == confluent_kafka.KafkaError.INVALID_PARTITIONS

    # DescribeConfigs: the override and the defaults
    resource = ConfigResource(ConfigResource.Type.TOPIC, "adm")
    described = _result(admin.describe_configs([resource]), resource)
    assert described["retention.ms"].value == "3600000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["segment.bytes"].value == "1073741824"
    assert described["cleanup.policy"].value == "delete"

    # IncrementalAlterConfigs: announced under /config/changes and applied by the leader at its next roll
    leaders = topic_leaders(b0.bootstrap, "adm")
    partition = next(p for p, leader in leaders.items() if leader == 1)  # a partition led by the other broker
    changes_before = set(zk_layout.client.get_children("/config/changes"))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "adm", incremental_configs=[
        ConfigEntry("segment.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    _result(admin.incremental_alter_configs([resource]), resource)
    assert _node(zk_layout, "/config/topics/adm") == {
        "version": 1, "config": {"retention.ms": "3600000", "segment.bytes": "2000"}}
    new = sorted(set(zk_layout.client.get_children("/config/changes")) - changes_before)
    assert len(new) == 1 and new[0].startswith("config_change_") and len(new[0]) == len("config_change_") + 10
    assert _node(zk_layout, f"/config/changes/{new[0]}") == {"version": 2, "entity_path": "topics/adm"}

    def segments() -> int:
        return len(list((b1.data_dir / "logs-1" / f"adm-{partition}").glob("*.log")))

    def rolled() -> bool:  # the change is applied asynchronously: produce until the log rolls
        _produce(b1.bootstrap, "adm", partition, 5, size=100)
        return segments() >= 2

    wait_until(rolled, TIMEOUT, "a segment roll at segment.bytes=2000")

    # AlterConfigs replaces the whole set
    resource = ConfigResource(ConfigResource.Type.TOPIC, "adm", set_config={"retention.bytes": "1000000"})
    _result(admin.alter_configs([resource]), resource)
    assert _node(zk_layout, "/config/topics/adm") == {"version": 1, "config": {"retention.bytes": "1000000"}}
    resource = ConfigResource(ConfigResource.Type.TOPIC, "adm", set_config={"no.such.config": "1"})
    assert _error_code(admin.alter_configs([resource]), resource) == confluent_kafka.KafkaError.INVALID_CONFIG

    # broker configs: described, read-only
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    described = _result(admin.describe_configs([resource]), resource)
    assert described["broker.id"].value == "1" and described["broker.id"].is_read_only
    assert described["auto.create.topics.enable"].value == "false"

    # DeleteTopics: the marker, then every broker deletes its logs and the nodes go
    by_id = {0: b0, 1: b1}
    for p, leader in topic_leaders(b0.bootstrap, "adm").items():
        _produce(by_id[leader].bootstrap, "adm", p, 1)
    assert len(_log_dirs(b0, "adm")) == 3 and len(_log_dirs(b1, "adm")) == 3
    _result(admin.delete_topics(["adm"], operation_timeout=20), "adm")
    for path in ("/brokers/topics/adm", "/config/topics/adm", "/admin/delete_topics/adm"):
        assert zk_layout.client.exists(path) is None, path
    for b in (b0, b1):
        wait_until(lambda b=b: not _log_dirs(b, "adm"), TIMEOUT, f"adm's logs gone from broker {b.broker_id}")
        assert topic_leaders(b.bootstrap, "adm") == {}
    fs = admin.delete_topics(["adm"], operation_timeout=5)
    assert _error_code(fs, "adm") == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_a_deletion_waits_for_a_stopped_broker(broker_cluster, zk_layout: ZkLayout) -> None:
    b0 = broker_cluster.add(0, **{"auto.create.topics.enable": "false"})
    b1 = broker_cluster.add(1, **{"auto.create.topics.enable": "false"})
    admin = _admin(b0.bootstrap)
    _result(admin.create_topics([NewTopic("later", 2, 1)], operation_timeout=10), "later")
    for p in range(2):
        leader = {0: b0, 1: b1}[topic_leaders(b0.bootstrap, "later")[p]]
        _produce(leader.bootstrap, "later", p, 3)
    b1.stop()
    fs = admin.delete_topics(["later"], operation_timeout=1)
    assert _error_code(fs, "later") == confluent_kafka.KafkaError.REQUEST_TIMED_OUT
    assert zk_layout.client.exists("/admin/delete_topics/later") is not None
    wait_until(lambda: not _log_dirs(b0, "later"), TIMEOUT, "the running broker's logs of 'later' gone")
    assert _log_dirs(b1, "later")
    assert topic_leaders(b0.bootstrap, "later") == {}  # hidden while it is being deleted
    fs = admin.create_topics([NewTopic("later", 1, 1)])
    assert _error_code(fs, "later") == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS  # not until it is gone
    b1.start()
    wait_until(lambda: zk_layout.client.exists("/admin/delete_topics/later") is None, TIMEOUT, "deletion done")
    assert zk_layout.client.exists("/brokers/topics/later") is None
    assert not _log_dirs(b1, "later")


def test_delete_records_moves_the_log_start_offset(broker, make_topic) -> None:
    topic = make_topic("trim")
    _produce(broker.bootstrap, topic, 0, 10)
    admin = _admin(broker.bootstrap)
    tp = confluent_kafka.TopicPartition(topic, 0, 6)
    result = admin.delete_records([tp])[tp].result(timeout=TIMEOUT)
    assert result.low_watermark == 6

    def watermarks() -> tuple[int, int]:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
        try:
            return consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)
        finally:
            consumer.close()

    assert watermarks() == (6, 10)
    assert fetch_error(broker.bootstrap, topic, 0, 3) == 1  # OFFSET_OUT_OF_RANGE
    assert fetch_error(broker.bootstrap, topic, 0, 6) == 0
    got = peers.confluent_consume(broker.bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, 4)
    assert [m.offset for m in got] == [6, 7, 8, 9]
    # persisted: the checkpoint holds it, and a restarted broker still starts there
    checkpoint = (broker.data_dir / "logs-0" / "log-start-offset-checkpoint").read_text().split("\n")
    assert f"{topic} 0 6" in checkpoint
    broker.stop()
    broker.start()
    assert watermarks() == (6, 10)
    tp = confluent_kafka.TopicPartition(topic, 0, 11)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.delete_records([tp])[tp].result(timeout=TIMEOUT)


def test_describe_cluster(broker_cluster) -> None:
    b0 = broker_cluster.add(0)
    broker_cluster.add(1)
    admin = _admin(b0.bootstrap)  # kept referenced: a destroyed client fails its pending futures
    cluster = admin.describe_cluster().result(timeout=TIMEOUT)
    assert sorted(node.id for node in cluster.nodes) == [0, 1]
    assert cluster.controller.id == 0
    assert cluster.cluster_id


def test_kafka_python_admin_client(broker_cluster, zk_layout: ZkLayout) -> None:
    b0 = broker_cluster.add(0, **{"auto.create.topics.enable": "false"})
    b1 = broker_cluster.add(1, **{"auto.create.topics.enable": "false"})
    admin = kafka.KafkaAdminClient(bootstrap_servers=b0.bootstrap)
    try:
        admin.create_topics({"kp": {"num_partitions": 2, "replication_factor": 1,
                                    "configs": {"retention.bytes": "5000000"}}}, timeout_ms=10000)
        assert _node(zk_layout, "/config/topics/kp") == {"version": 1, "config": {"retention.bytes": "5000000"}}
        assert sorted(_node(zk_layout, "/brokers/topics/kp")["partitions"]) == ["0", "1"]
        with pytest.raises(kafka.errors.TopicAlreadyExistsError):
            admin.create_topics({"kp": {"num_partitions": 1, "replication_factor": 1}})

        described = admin.describe_configs([ConfigResourceKP("TOPIC", "kp")])["topic"]["kp"]  # the overrides
        assert {k: (v["value"], v["config_source"]) for k, v in described.items()} == {
            "retention.bytes": ("5000000", "DYNAMIC_TOPIC_CONFIG")}
        admin.alter_configs([ConfigResourceKP("TOPIC", "kp", {"segment.bytes": "4000"})])
        assert _node(zk_layout, "/config/topics/kp") == {
            "version": 1, "config": {"retention.bytes": "5000000", "segment.bytes": "4000"}}

        admin.create_partitions({"kp": 3}, timeout_ms=10000)
        assert sorted(_node(zk_layout, "/brokers/topics/kp")["partitions"]) == ["0", "1", "2"]

        by_id = {0: b0, 1: b1}
        wait_until(lambda: len(topic_leaders(b0.bootstrap, "kp")) == 3, TIMEOUT, "3 partitions")
        leader = by_id[topic_leaders(b0.bootstrap, "kp")[0]]
        _produce(leader.bootstrap, "kp", 0, 10)
        deleted = admin.delete_records({kafka.TopicPartition("kp", 0): 4})
        assert deleted[kafka.TopicPartition("kp", 0)]["low_watermark"] == 4
        consumer = kafka.KafkaConsumer(bootstrap_servers=b0.bootstrap)
        try:
            assert consumer.beginning_offsets([kafka.TopicPartition("kp", 0)]) == {kafka.TopicPartition("kp", 0): 4}
        finally:
            consumer.close()

        cluster = admin.describe_cluster()
        assert [b["broker_id"] for b in cluster["brokers"]] == [0, 1]
        assert cluster["controller_id"] == 0
        assert cluster["cluster_id"] == zk_layout.cluster_id()

        admin.delete_topics(["kp"], timeout_ms=20000)
        for path in ("/brokers/topics/kp", "/config/topics/kp", "/admin/delete_topics/kp"):
            assert zk_layout.client.exists(path) is None, path
        for b in (b0, b1):
            wait_until(lambda b=b: not _log_dirs(b, "kp"), TIMEOUT, f"kp's logs gone from broker {b.broker_id}")
    finally:
        admin.close()


def test_a_config_changed_while_a_broker_was_down_applies_at_its_start(broker, make_topic,
                                                                        zk_layout: ZkLayout) -> None:
    topic = make_topic("offline")
    _produce(broker.bootstrap, topic, 0, 1)
    broker.stop()
    zk_layout.set_topic_config(topic, {"segment.bytes": "1500"})
    broker.start()
    log_dir = broker.data_dir / "logs-0" / f"{topic}-0"

    def rolled() -> bool:
        _produce(broker.bootstrap, topic, 0, 3, size=200)
        return len(list(log_dir.glob("*.log"))) >= 2

    wait_until(rolled, TIMEOUT, "a roll at the segment.bytes set while the broker was down")


def test_retention_bytes_set_live_trims_the_log(broker_cluster) -> None:
    broker = broker_cluster.add(0, **{"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"})
    admin = _admin(broker.bootstrap)
    _result(admin.create_topics([NewTopic("trimmed", 1, 1, config={"segment.bytes": "1500"})],
                                operation_timeout=10), "trimmed")
    now_ms = int(time.time() * 1000)
    for i in range(10):
        peers.confluent_produce(broker.bootstrap, "trimmed", 0, [(b"k", b"x" * 400, now_ms + i)] * 3)
    log_dir = broker.data_dir / "logs-0" / "trimmed-0"
    assert len(list(log_dir.glob("*.log"))) >= 8
    resource = ConfigResource(ConfigResource.Type.TOPIC, "trimmed", incremental_configs=[
        ConfigEntry("retention.bytes", "3000", incremental_operation=AlterConfigOpType.SET)])
    _result(admin.incremental_alter_configs([resource]), resource)
    wait_until(lambda: len(list(log_dir.glob("*.log"))) <= 3, TIMEOUT, "retention by the new retention.bytes")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("trimmed", 0), timeout=10)
    finally:
        consumer.close()
    assert 0 < low < high == 30
