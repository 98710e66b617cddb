"""Prometheus metrics scraped by a real Prometheus server (Debian's package), queried over its HTTP API."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from metaq.broker.process import free_port
from metaq.errors import ErrorCode
from metaq.testing.batches import INVALID_BATCHES
from metaq.testing.broker import BrokerCluster, request, wait_until
from metaq.testing.prometheus import PrometheusServer


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
