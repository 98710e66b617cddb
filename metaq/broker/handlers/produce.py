"""Produce v3..7: validate and append record batches to the partitions this broker leads.

A batch is acknowledged only after it is written to the segment file (and fsynced first when the flush
policy says so). ``acks=0`` requests get no response at all, as in Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.producer import ProduceResponse

from metaq.broker.context import (
    CORRUPT_MESSAGE,
    INVALID_REQUIRED_ACKS,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    BrokerContext,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import (
    CorruptRecordError,
    MessageSizeTooLargeError,
    StorageError,
    UnsupportedMessageFormatError,
)

log = logging.getLogger(__name__)

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse


def _append(ctx: BrokerContext, topic: str, partition: int, records: Any) -> tuple[int, int, PartitionLog | None]:
    """(error_code, base_offset, log) for one partition's records."""
    error = ctx.leader_error(topic, partition)
    if error:
        return error, -1, None
    if records is None or len(records) == 0:
        return CORRUPT_MESSAGE, -1, None
    plog = ctx.log_for(topic, partition)
    try:
        result = plog.append(records)
    except UnsupportedMessageFormatError as e:
        log.warning("produce to %s-%d rejected: %s", topic, partition, e)
        return UNSUPPORTED_FOR_MESSAGE_FORMAT, -1, plog
    except MessageSizeTooLargeError as e:
        log.warning("produce to %s-%d rejected: %s", topic, partition, e)
        return MESSAGE_TOO_LARGE, -1, plog
    except CorruptRecordError as e:
        log.warning("produce to %s-%d rejected: %s", topic, partition, e)
        return CORRUPT_MESSAGE, -1, plog
    except (StorageError, OSError) as e:
        log.error("produce to %s-%d failed to write: %s", topic, partition, e)
        return KAFKA_STORAGE_ERROR, -1, plog
    ctx.notifier.notify((topic, partition))
    return 0, result.base_offset, plog


async def handle(ctx: BrokerContext, request: Any, version: int) -> Any:
    acks = request.acks
    responses = []
    to_flush: dict[int, PartitionLog] = {}
    for topic_data in request.topic_data:
        parts = []
        for pdata in topic_data.partition_data:
            if acks not in (-1, 0, 1):
                error, base, plog = INVALID_REQUIRED_ACKS, -1, None
            else:
                try:
                    error, base, plog = _append(ctx, topic_data.name, pdata.index, pdata.records)
                except Exception:  # one bad partition must not take the connection down
                    log.exception("unexpected error appending to %s-%d", topic_data.name, pdata.index)
                    error, base, plog = UNKNOWN_SERVER_ERROR, -1, None
            if plog is not None and not error and plog.unflushed_messages() >= ctx.config.log_flush_interval_messages:
                to_flush[id(plog)] = plog
            parts.append((pdata.index, error, base, plog.log_start_offset if plog else -1))
        responses.append((topic_data.name, parts))
    for plog in to_flush.values():
        await ctx.in_thread(plog.flush)  # ack after fsync when the flush policy asks for it
    if acks == 0:
        return None
    return ProduceResponse[version](
        responses=[
            TopicResponse(
                name=name,
                partition_responses=[
                    PartitionResponse(
                        index=index, error_code=error, base_offset=base, log_append_time_ms=-1,
                        log_start_offset=start,
                    )
                    for index, error, base, start in parts
                ],
            )
            for name, parts in responses
        ],
        throttle_time_ms=0,
    )
