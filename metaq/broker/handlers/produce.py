"""Produce v0..7: validate and append record batches to the partitions this broker leads.

Only record batch v2 is stored, which Produce v3+ carries. Produce v0..2 (Kafka 0.8-0.10 clients) carry v0/v1
message sets: each partition's set is validated and converted to one v2 batch first
(metaq/broker/log/upconvert.py); a set that fails gets CORRUPT_MESSAGE (or MESSAGE_TOO_LARGE), the error
codes those clients know, and nothing of it is appended. A v3+ request carrying magic 0 or 1 gets
UNSUPPORTED_FOR_MESSAGE_FORMAT, as from Kafka.

A batch is acknowledged only after it is written to the segment file (and fsynced first when the flush
policy says so). ``acks=0`` requests get no response at all, as in Kafka. ``acks=all`` to a replicated
partition also waits for its ISR (metaq/broker/replication/acks.py). Every batch is validated inside
its CRC first (see metaq/broker/log/validator.py); an invalid one gets Kafka's error code for its partition
and nothing of that partition's records is appended. Internal topics (``__consumer_offsets``) are written
by the broker only: clients get INVALID_TOPIC_EXCEPTION, as from Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from metaq.broker.context import BrokerContext
from metaq.broker.log.partition_log import AppendResult, PartitionLog
from metaq.broker.log.upconvert import upconvert
from metaq.broker.log.validator import decompressed_limit
from metaq.broker.replication import acks as replication
from metaq.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidProducerEpochError,
    InvalidRecordError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceError,
    StorageError,
    UnsupportedCompressionError,
    UnsupportedMessageFormatError,
)
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import ProduceResponse
from zk_layout.acl_formats import AclOperation, ResourceType
from zk_layout.topic_formats import INTERNAL_TOPICS

log = logging.getLogger(__name__)

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse
_FIRST_BATCH_V2_VERSION = 3


def _append(ctx: BrokerContext, topic: str, partition: int, records: Any) -> tuple[int, int, PartitionLog | None]:
    """(error_code, base_offset, log) for one partition's records. A duplicate of an idempotent producer's
    batch answers the original's base offset, as Kafka does (UnifiedLog.append with a duplicate)."""
    if denied := ctx.denied(AclOperation.WRITE, ResourceType.TOPIC, topic):
        return denied, -1, None
    if topic in INTERNAL_TOPICS:
        log.warning("produce to %s-%d rejected: %s is an internal topic, written by brokers only",
                    topic, partition, topic)
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1, None
    error = ctx.serving_error(topic, partition)
    if error:
        return error, -1, None
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE, -1, None
    plog = ctx.log_for(topic, partition)
    try:
        result = plog.append(records, leader_epoch=ctx.replication.append_epoch(topic, partition)
                             if ctx.replication is not None else None)
    except (OutOfOrderSequenceError, InvalidProducerEpochError) as e:
        log.info("produce to %s-%d rejected: %s", topic, partition, e)
        return e.code, -1, plog
    except (CorruptRecordError, MessageSizeTooLargeError) as e:
        log.warning("produce to %s-%d rejected: %s", topic, partition, e)
        return _rejection_code(e), -1, plog
    except (StorageError, OSError) as e:
        log.error("produce to %s-%d failed to write: %s", topic, partition, e)
        ctx.logs.handle_error(topic, partition, e)  # a hard I/O error takes the log dir offline
        return ErrorCode.KAFKA_STORAGE_ERROR, -1, plog
    _appended(ctx, topic, partition, result, len(records))
    return 0, result.base_offset, plog


def _appended(ctx: BrokerContext, topic: str, partition: int, result: AppendResult, size: int) -> None:
    """Wake fetchers and count; a duplicate appended nothing (with acks=all its answer still waits until the
    ISR holds everything up to the log end, the original included)."""
    if result.duplicate:
        log.debug("produce to %s-%d: duplicate of the batch at offsets %d..%d, nothing appended",
                  topic, partition, result.base_offset, result.last_offset)
        return
    ctx.notifier.notify((topic, partition))
    ctx.metrics.appended(topic, result.record_count, size)
    if ctx.replication is not None:
        ctx.replication.leader_appended(topic, partition)


def _upconverted(ctx: BrokerContext, topic: str, partition: int, records: Any) -> tuple[int, bytes | None]:
    """(error code, the v2 batch) for a Produce v0..2 partition's message set (module doc)."""
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE, None
    try:
        # the bomb bound of the broker's message.max.bytes; the log then checks the batch against the topic's
        return 0, upconvert(bytes(records), decompressed_limit(ctx.config.message_max_bytes))
    except MessageSizeTooLargeError as e:
        log.warning("produce (message set v0/v1) to %s-%d rejected: %s", topic, partition, e)
        return ErrorCode.MESSAGE_TOO_LARGE, None
    except CorruptRecordError as e:
        log.warning("produce (message set v0/v1) to %s-%d rejected: %s", topic, partition, e)
        return ErrorCode.CORRUPT_MESSAGE, None


def _rejection_code(error: Exception) -> int:
    """Kafka's error code for a batch the log refused (most specific class first)."""
    for cls, code in (
        (UnsupportedMessageFormatError, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (UnsupportedCompressionError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
        (InvalidRecordError, ErrorCode.INVALID_RECORD),
        (MessageSizeTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    ):
        if isinstance(error, cls):
            return code
    return ErrorCode.CORRUPT_MESSAGE


def _legacy_code(error: int) -> int:
    """Error codes Produce v0..2 clients do not know, as the nearest they do."""
    if error in (ErrorCode.INVALID_RECORD, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT):
        return ErrorCode.CORRUPT_MESSAGE
    return error


def _transactional_denied(ctx: BrokerContext, request: ApiRequest, version: int) -> int:
    """A transactional producer's request needs Write on its TransactionalId, else the whole request is
    refused (Kafka's KafkaApis.handleProduceRequest; docs/transactions.md)."""
    transactional_id = getattr(request, "transactional_id", None) if version >= _FIRST_BATCH_V2_VERSION else None
    if not transactional_id:
        return ErrorCode.NONE
    return ctx.denied(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse | None:
    acks = request.acks
    refused = _transactional_denied(ctx, request, version)
    responses: list[tuple[str, list[tuple[int, int, int, int]]]] = []
    to_flush: dict[int, PartitionLog] = {}
    waits: list[tuple[int, int, int]] = []  # acks=all: (topic index, partition index, offset to reach)
    for topic_data in request.topic_data:
        parts: list[tuple[int, int, int, int]] = []
        for pdata in topic_data.partition_data:
            error: int
            if refused:
                error, base, plog = refused, -1, None
            elif acks not in (-1, 0, 1):
                error, base, plog = ErrorCode.INVALID_REQUIRED_ACKS, -1, None
            else:
                try:
                    records = pdata.records
                    error = await replication.check_min_isr(ctx, topic_data.name, pdata.index, acks)
                    if not error and version < _FIRST_BATCH_V2_VERSION:
                        error, records = _upconverted(ctx, topic_data.name, pdata.index, records)
                    if error:
                        base, plog = -1, None
                    else:
                        error, base, plog = _append(ctx, topic_data.name, pdata.index, records)
                        if error and version < _FIRST_BATCH_V2_VERSION:
                            error = _legacy_code(error)
                        if not error and plog is not None:
                            waits.append((len(responses), len(parts), plog.log_end_offset))
                except Exception:  # one bad partition must not take the connection down
                    log.exception("unexpected error appending to %s-%d", topic_data.name, pdata.index)
                    error, base, plog = ErrorCode.UNKNOWN_SERVER_ERROR, -1, None
            if error:
                ctx.count_error("PRODUCE", error)
            if plog is not None and not error and plog.unflushed_messages() >= ctx.config.log_flush_interval_messages:
                to_flush[id(plog)] = plog
            parts.append((pdata.index, error, base, plog.log_start_offset if plog else -1))
        responses.append((topic_data.name, parts))
    if acks == -1 and waits:
        await replication.await_isr(ctx, responses, waits, request.timeout_ms)
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
