"""ListOffsets v0..2: earliest (-2), latest (-1), or the first offset at or after a timestamp."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse

from metaq.broker.context import BrokerContext

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse


def _lookup(ctx: BrokerContext, topic: str, partition: int, timestamp: int) -> tuple[int, int, int]:
    """(error_code, timestamp, offset)."""
    error = ctx.leader_error(topic, partition)
    if error:
        return error, -1, -1
    plog = ctx.log_for(topic, partition)
    if timestamp == LATEST:
        return 0, -1, plog.log_end_offset
    if timestamp == EARLIEST:
        return 0, -1, plog.log_start_offset
    found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return 0, -1, -1
    offset, ts = found
    return 0, ts, offset


async def handle(ctx: BrokerContext, request: Any, version: int) -> Any:
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            error, ts, offset = _lookup(ctx, topic.name, p.partition_index, p.timestamp)
            if version == 0:
                old = [offset] if not error and offset >= 0 else []
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=error,
                                               old_style_offsets=old))
            else:
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=error,
                                               timestamp=ts, offset=offset))
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return ListOffsetsResponse[version](throttle_time_ms=0, topics=topics)
