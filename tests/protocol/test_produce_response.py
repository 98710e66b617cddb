"""The hand-written Produce response encoder must produce exactly what kafka-python's encoder does."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceResponse

from metaq.protocol.produce_response import PartitionAnswer, TopicAnswer, encode_produce_response

TOPICS = [
    TopicAnswer("clicks", [PartitionAnswer(0, 0, 42, -1, 7), PartitionAnswer(3, 6, -1, -1, -1)]),
    TopicAnswer("ünïcode", [PartitionAnswer(1, 0, 1 << 40, 1700000000123, 0)]),
    TopicAnswer("empty", []),
]


def _kafka_python(version: int, correlation_id: int, throttle_ms: int) -> bytes:
    Topic = ProduceResponse.TopicProduceResponse
    Part = Topic.PartitionProduceResponse
    message = ProduceResponse[version](
        responses=[Topic(name=t.name, partition_responses=[
            Part(index=p.partition, error_code=p.error_code, base_offset=p.base_offset,
                 log_append_time_ms=p.log_append_time_ms, log_start_offset=p.log_start_offset)
            for p in t.partitions]) for t in TOPICS],
        throttle_time_ms=throttle_ms)
    message.with_header(correlation_id=correlation_id)
    return bytes(message.encode(header=True, framed=True))


@pytest.mark.parametrize("version", range(8))
def test_same_bytes_as_kafka_python(version: int) -> None:
    assert encode_produce_response(version, 12345, TOPICS, throttle_time_ms=250) == _kafka_python(version, 12345, 250)


def test_decodes_with_kafka_python() -> None:
    raw = encode_produce_response(7, 9, TOPICS[:1])
    decoded = ProduceResponse[7].decode(raw[8:])  # after the frame size and the correlation id
    (part0, part3) = decoded.responses[0].partition_responses
    assert (part0.index, part0.error_code, part0.base_offset, part0.log_start_offset) == (0, 0, 42, 7)
    assert (part3.index, part3.error_code) == (3, 6)


@pytest.mark.parametrize("version", [-1, 8])
def test_refuses_versions_it_does_not_know(version: int) -> None:
    with pytest.raises(ValueError, match="not supported"):
        encode_produce_response(version, 1, TOPICS)
