"""The wider version ranges: Metadata v5/v8 and ListOffsets v1 sent without ApiVersions (as sarama-based tools
do), Produce v3 carrying an old message set answered with an error, kafka-python with ``api_version=(2,1)``,
ListOffsets max_timestamp and exact by-timestamp lookups inside compressed batches."""

from __future__ import annotations

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from integration_tests import peers
from metaq.errors import ErrorCode
from metaq.testing.broker import request

BASE_TS = 1_700_000_000_000


@pytest.mark.parametrize("version", [5, 7, 8])
def test_metadata_without_api_versions_first(broker, make_topic, version) -> None:
    topic = make_topic(f"md-v{version}", partitions=2)
    req = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                   allow_auto_topic_creation=False)
    resp = request(broker.bootstrap, req, MetadataResponse, version)  # a fresh connection: no ApiVersions
    assert [(b.node_id, b.port) for b in resp.brokers] == [(broker.broker_id, broker.port)]
    assert resp.controller_id == broker.broker_id and resp.cluster_id
    (t,) = resp.topics
    assert (t.name, t.error_code) == (topic, 0)
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes, p.offline_replicas, p.leader_epoch)
            for p in t.partitions] == [(p, broker.broker_id, [broker.broker_id], [broker.broker_id], [], -1)
                                       for p in range(2)]


def test_list_offsets_v1_without_api_versions_first(broker, make_topic) -> None:
    topic = make_topic("lo-v1", partitions=1)
    peers.confluent_produce(broker.bootstrap, topic, 0, [(b"k", b"v%d" % i, BASE_TS + 10 * i) for i in range(5)])
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    answers = {}
    for ts in (-1, -2, BASE_TS + 25):
        req = ListOffsetsRequest[1](replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[partition(partition_index=0, timestamp=ts)])])
        (p,) = request(broker.bootstrap, req, ListOffsetsResponse, 1).topics[0].partitions
        answers[ts] = (p.error_code, p.offset)
    assert answers == {-1: (0, 5), -2: (0, 0), BASE_TS + 25: (0, 3)}


def test_produce_v3_with_an_old_message_set_gets_an_error_and_the_broker_lives(broker, make_topic) -> None:
    topic = make_topic("old-produce", partitions=1)
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=None, key=b"k", value=b"v")
    data = ProduceRequest.TopicProduceData
    req = ProduceRequest[3](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[data(
        name=topic, partition_data=[data.PartitionProduceData(index=0, records=bytes(builder.build()))])])
    (p,) = request(broker.bootstrap, req, ProduceResponse, 3).responses[0].partition_responses
    assert (p.index, p.error_code) == (0, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)
    acked = peers.confluent_produce(broker.bootstrap, topic, 0, [(b"k", b"after", BASE_TS)])
    assert [m.offset for m in acked] == [0]  # nothing of the old-format request was stored


def test_kafka_python_with_api_version_2_1(broker, make_topic) -> None:
    topic = make_topic("kp21", partitions=1)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(2, 1), linger_ms=5,
                                   compression_type="gzip")
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=BASE_TS + i)
                   for i in range(10)]
        producer.flush(30)
        assert [f.get(timeout=30).offset for f in futures] == list(range(10))
    finally:
        producer.close(10)
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(2, 1), group_id=None,
                                   enable_auto_commit=False, consumer_timeout_ms=10000, fetch_max_wait_ms=100)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = [(r.offset, r.key, r.value) for _, r in zip(range(10), consumer, strict=False)]
        assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(10)]
        assert consumer.offsets_for_times({tp: BASE_TS + 4})[tp].offset == 4
        assert consumer.end_offsets([tp])[tp] == 10
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_timestamps_inside_compressed_batches_and_max_timestamp(broker, make_topic, codec) -> None:
    topic = make_topic(f"ts-{codec}", partitions=1)
    # one compressed batch (linger), timestamps out of order: the largest is at offset 6
    stamps = [BASE_TS + d for d in (0, 10, 20, 30, 40, 50, 900, 60, 70, 80)]
    peers.confluent_produce(broker.bootstrap, topic, 0, [(b"k", b"v%d" % i, ts) for i, ts in enumerate(stamps)],
                            **{"compression.type": codec, "linger.ms": 200})
    assert peers.confluent_offset_for_time(broker.bootstrap, topic, 0, BASE_TS + 35) == 4
    assert peers.confluent_offset_for_time(broker.bootstrap, topic, 0, BASE_TS + 65) == 6  # 900 >= 65

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = confluent_kafka.TopicPartition(topic, 0)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert (result.offset, result.timestamp) == (6, BASE_TS + 900)
    result = admin.list_offsets({tp: OffsetSpec.for_timestamp(BASE_TS + 45)})[tp].result(timeout=30)
    assert (result.offset, result.timestamp) == (5, BASE_TS + 50)


def test_max_timestamp_of_an_empty_partition(broker, make_topic) -> None:
    topic = make_topic("ts-empty", partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = confluent_kafka.TopicPartition(topic, 0)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert result.offset == -1
