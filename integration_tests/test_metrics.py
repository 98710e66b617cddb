"""Prometheus metrics scraped by a real Prometheus server (Debian's package), queried over its HTTP API."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from prometheus_client import CollectorRegistry

from metaq.broker.process import free_port
from metaq.consumer import Consumer
from metaq.errors import ErrorCode
from metaq.producer import Producer
from metaq.testing.batches import INVALID_BATCHES
from metaq.testing.broker import BrokerCluster, request
from metaq.testing.prometheus import PrometheusServer
from metaq.testing.wait import wait_until


def _value(prom: PrometheusServer, promql: str) -> float | None:
    return prom.query_value(promql)


def test_prometheus_scrapes_broker_traffic_logs_and_errors(broker_cluster: BrokerCluster, tmp_path: Path) -> None:
    metrics_port = free_port()
    broker = broker_cluster.add(0, **{"metrics.port": metrics_port, "metrics.host": "127.0.0.1",
                                      "num.partitions": 2})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(500):
        producer.produce("m", b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0
    invalid, code = INVALID_BATCHES["control-flag"]()
    answer = request(broker.bootstrap, ProduceRequest[7](transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name="m", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=invalid)])]), ProduceResponse, 7)
    assert answer.responses[0].partition_responses[0].error_code == code == ErrorCode.INVALID_RECORD
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m-readers",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("m", p, 0) for p in range(2)])
    seen = 0
    while seen < 500:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        seen += 1
    consumer.close()

    with PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{metrics_port}"]) as prom:
        prom.wait_for_targets_up()
        wait_until(lambda: _value(prom, 'sum(metaq_broker_messages_in_total{topic="m"})') == 500, 60,
                   "Prometheus to see 500 appended messages")
        assert _value(prom, 'sum(metaq_broker_log_end_offset{topic="m"})') == 500
        assert _value(prom, 'count(metaq_broker_log_segments{topic="m"})') == 2
        assert _value(prom, 'sum(metaq_broker_bytes_out_total{topic="m"})') >= 500 * 100
        assert _value(prom, 'sum(metaq_broker_requests_total{api="PRODUCE"})') >= 1
        assert _value(prom, 'sum(metaq_broker_request_duration_seconds_count{api="FETCH"})') >= 1
        assert _value(prom, 'metaq_broker_request_errors_total{api="PRODUCE",error="INVALID_RECORD"}') == 1
        assert _value(prom, "metaq_broker_active_controller") == 1
        assert _value(prom, "metaq_broker_offline_partitions") == 0


def test_prometheus_reports_a_groups_lag_after_a_known_number_of_unconsumed_messages(
        broker_cluster: BrokerCluster, make_topic, zk_connect: str, tmp_path: Path) -> None:
    broker_port = free_port()
    broker_cluster.add(0, **{"metrics.port": broker_port, "metrics.host": "127.0.0.1"})
    make_topic("lagging", partitions=3)
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 5}) as producer:
        for i in range(300):
            producer.send("lagging", b"v%d" % i, partition=i % 3)
        producer.flush()
    ports = [free_port(), free_port()]
    members = [Consumer({"group.id": "mg", "zookeeper.connect": zk_connect, "auto.offset.reset": "smallest",
                         "consumer.timeout.ms": 5000, "metrics.port": port, "metrics.host": "127.0.0.1"},
                        metrics_registry=CollectorRegistry()) for port in ports]
    try:
        streams = [member.create_message_streams({"lagging": 1})["lagging"][0] for member in members]
        wait_until(lambda: all(len(m.state.owned) > 0 for m in members), 30, "both members to own partitions")
        owned = [len(m.state.owned) for m in members]
        assert sorted(owned) == [1, 2]
        takes = [150 if n == 2 else 90 for n in owned]  # 240 handed out, 60 left
        for stream, take in zip(streams, takes, strict=True):
            for _ in range(take):
                next(stream)
        for member in members:
            member.commit_offsets()
        targets = [f"127.0.0.1:{p}" for p in (*ports, broker_port)]
        with PrometheusServer(tmp_path / "prometheus", targets) as prom:
            prom.wait_for_targets_up()
            wait_until(lambda: _value(prom, 'sum(metaq_consumer_lag{group="mg",topic="lagging"})') == 60, 60,
                       "Prometheus to see a lag of 60")
            assert _value(prom, 'sum(metaq_consumer_owned_partitions{group="mg"})') == 3
            # fetched for the streams: at least every message once (a partition moved by the join is fetched again)
            assert _value(prom, 'sum(metaq_consumer_messages_total{group="mg",topic="lagging"})') >= 300
            assert _value(prom, 'sum(metaq_consumer_rebalances_total{group="mg",result="ok"})') >= 2
            assert _value(prom, 'sum(metaq_consumer_commit_duration_seconds_count{group="mg"})') >= 2
            assert _value(prom, 'sum(metaq_consumer_fenced_commits_total{group="mg"})') in (None, 0)
            assert _value(prom, 'min by (group) (metaq_consumer_max_lag{group="mg"})') >= 0
            assert _value(prom, 'sum(metaq_broker_log_end_offset{topic="lagging"})') == 300
    finally:
        for member in members:
            member.shutdown()
