"""``metrics.enabled=false``: a consumer and a broker that register nothing and still work."""

from __future__ import annotations

import confluent_kafka
from prometheus_client import CollectorRegistry

from metaq.consumer import Consumer
from metaq.metrics.off import NoMetrics
from metaq.producer import Producer
from metaq.testing.broker import BrokerCluster
from metaq.testing.wait import wait_until


def test_consumer_with_metrics_off_registers_nothing_and_consumes(
        broker_cluster: BrokerCluster, make_topic, zk_connect: str) -> None:
    broker_cluster.add(0)
    make_topic("quiet", partitions=2)
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 5}) as producer:
        for i in range(100):
            producer.send("quiet", b"v%d" % i, partition=i % 2)
        producer.flush()
    registry = CollectorRegistry()
    consumer = Consumer({"group.id": "quiet", "zookeeper.connect": zk_connect, "auto.offset.reset": "smallest",
                         "consumer.timeout.ms": 10000, "metrics.enabled": "false"}, metrics_registry=registry)
    try:
        assert isinstance(consumer.metrics, NoMetrics)
        [stream] = consumer.create_message_streams({"quiet": 1})["quiet"]
        values = sorted(next(stream).value for _ in range(100))
        assert values == sorted(b"v%d" % i for i in range(100))
        consumer.commit_offsets()
    finally:
        consumer.shutdown()
    assert list(registry.collect()) == []


def test_broker_with_metrics_off_serves_produce_and_fetch(broker_cluster: BrokerCluster, make_topic) -> None:
    broker = broker_cluster.add(0, **{"metrics.enabled": "false"})
    make_topic("quiet-b", partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for _ in range(50):
        producer.produce("quiet-b", b"x" * 10, partition=0)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "quiet-b",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("quiet-b", 0, 0)])
    seen: list[bytes] = []

    def poll() -> bool:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value())
        return len(seen) == 50

    try:
        wait_until(poll, 30, "50 messages from a broker with metrics off")
    finally:
        consumer.close()
    assert seen == [b"x" * 10] * 50
