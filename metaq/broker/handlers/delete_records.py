"""DeleteRecords v0..2: move a partition's log start offset (Kafka's ``kafka-delete-records``).

Records below the new start are no longer served: ListOffsets earliest answers the new start and a fetch
below it gets OFFSET_OUT_OF_RANGE. Segments wholly below it are deleted; the start itself is persisted in
the log directory's ``log-start-offset-checkpoint``.
"""

from __future__ import annotations

import logging
import time

from metaq.broker.context import BrokerContext
from metaq.broker.request_bounds import in_slices
from metaq.errors import ErrorCode, OffsetOutOfRangeError, StorageError
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import DeleteRecordsResponse
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1  # "delete everything up to the high watermark"

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = TopicResult.DeleteRecordsPartitionResult


def _delete(ctx: BrokerContext, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error_code, low_watermark)."""
    error = ctx.denied(AclOperation.DELETE, ResourceType.TOPIC, topic) or ctx.serving_error(topic, partition)
    if error:
        return error, -1
    plog = ctx.log_for(topic, partition)
    hw = ctx.high_watermark(topic, partition, plog)  # the log end offset of a single-replica partition
    target = hw if offset == HIGH_WATERMARK else offset
    if target > hw:  # past what every in-sync replica has (Kafka refuses it too)
        log.info("DeleteRecords refused: offset %d is above the high watermark %d of %s-%d", target, hw, topic,
                 partition)
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    try:
        return 0, ctx.logs.delete_records(topic, partition, target, int(time.time() * 1000))
    except OffsetOutOfRangeError as e:
        log.info("DeleteRecords refused: %s", e)
        return ErrorCode.OFFSET_OUT_OF_RANGE, -1
    except StorageError as e:
        log.error("DeleteRecords %s-%d failed: %s", topic, partition, e)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    topics = []
    for topic in request.topics:
        parts = []
        async for p in in_slices(topic.partitions):
            error, low = _delete(ctx, topic.name, p.partition_index, p.offset)
            parts.append(PartitionResult(partition_index=p.partition_index, low_watermark=low, error_code=error))
        topics.append(TopicResult(name=topic.name, partitions=parts))
    return DeleteRecordsResponse[version](throttle_time_ms=0, topics=topics)
