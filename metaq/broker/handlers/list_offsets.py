"""ListOffsets v0..5: earliest (-2), latest (-1), the record with the largest timestamp (-3, KIP-734), or
the first record at or after a timestamp, found exactly even inside a compressed batch.

v4 adds leader epochs (answered -1, unknown, as in Metadata: see metaq/broker/handlers/metadata.py).
-3 is served at every version although Kafka takes it from v7 (flexible, not served here): confluent-kafka's
``OffsetSpec.max_timestamp()`` sends it at the highest version the broker has."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse

from metaq.broker.context import BrokerContext
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse


def _lookup(ctx: BrokerContext, topic: str, partition: int, timestamp: int,
            current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """(error_code, timestamp, offset). LATEST is the high watermark (the log end offset of a
    single-replica partition): consumers cannot read past it."""
    error = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, topic) or ctx.serving_error(topic, partition) \
        or ctx.epoch_error(topic, partition, current_leader_epoch)
    if error:
        return error, -1, -1
    plog = ctx.log_for(topic, partition)
    if timestamp == LATEST:
        return 0, -1, ctx.high_watermark(topic, partition, plog)
    if timestamp == EARLIEST:
        return 0, -1, plog.log_start_offset
    found = plog.max_timestamp_offset() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    if found is None:
        return 0, -1, -1
    offset, ts = found
    return 0, ts, offset


async def handle(ctx: BrokerContext, request: Any, version: int) -> Any:
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            error, ts, offset = _lookup(ctx, topic.name, p.partition_index, p.timestamp,
                                        getattr(p, "current_leader_epoch", -1))
            if version == 0:
                old = [offset] if not error and offset >= 0 else []
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=error,
                                               old_style_offsets=old))
            else:
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=error,
                                               timestamp=ts, offset=offset))
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return ListOffsetsResponse[version](throttle_time_ms=0, topics=topics)
