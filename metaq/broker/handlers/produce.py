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
and nothing of that partition's records is appended. On a LogAppendTime topic the answer carries the time
the broker gave the batches (``log_append_time_ms``, Produce v2+), else -1. Internal topics
(``__consumer_offsets``) are written by the broker only: clients get INVALID_TOPIC_EXCEPTION, as from Kafka.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from metaq.broker.context import BrokerContext
from metaq.broker.log.partition_log import AppendResult, PartitionLog
from metaq.broker.log.upconvert import upconvert
from metaq.broker.log.validator import decompressed_limit
from metaq.broker.replication import acks as replication
from metaq.broker.response import ProduceReply
from metaq.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidProducerEpochError,
    InvalidRecordError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceError,
    RecordListTooLargeError,
    StorageError,
    UnsupportedCompressionError,
    UnsupportedMessageFormatError,
)
from metaq.protocol.batches import Buffer
from metaq.protocol.messages import ApiRequest
from metaq.protocol.produce_response import PartitionAnswer, TopicAnswer
from zk_layout.acl_formats import AclOperation, ResourceType
from zk_layout.topic_formats import INTERNAL_TOPICS

log = logging.getLogger(__name__)

_FIRST_BATCH_V2_VERSION = 3


@dataclass(frozen=True)
class _Appended:
    """One partition's outcome: Kafka's error code, where its records went, and the log."""

    error: int
    base_offset: int = -1
    log: PartitionLog | None = None
    log_append_time: int = -1  # the broker's time given to the batch on a LogAppendTime topic


def _append(ctx: BrokerContext, topic: str, partition: int, records: Buffer | None) -> _Appended:
    """The outcome of appending one partition's records. A duplicate of an idempotent producer's batch answers
    the original's base offset, as Kafka does (UnifiedLog.append with a duplicate)."""
    if denied := ctx.denied(AclOperation.WRITE, ResourceType.TOPIC, topic):
        return _Appended(denied)
    if topic in INTERNAL_TOPICS:
        log.warning("produce to %s-%d rejected: %s is an internal topic, written by brokers only",
                    topic, partition, topic)
        return _Appended(ErrorCode.INVALID_TOPIC_EXCEPTION)
    error = ctx.serving_error(topic, partition)
    if error:
        return _Appended(error)
    if records is None or len(records) == 0:
        return _Appended(ErrorCode.CORRUPT_MESSAGE)
    plog = ctx.log_for(topic, partition)
    try:
        result = plog.append(records, leader_epoch=ctx.replication.append_epoch(topic, partition)
                             if ctx.replication is not None else None)
    except (OutOfOrderSequenceError, InvalidProducerEpochError) as e:
        log.info("produce to %s-%d rejected: %s", topic, partition, e)
        return _Appended(e.code, log=plog)
    except (CorruptRecordError, MessageSizeTooLargeError) as e:
        log.warning("produce to %s-%d rejected: %s", topic, partition, e)
        return _Appended(_rejection_code(e), log=plog)
    except (StorageError, OSError) as e:
        log.error("produce to %s-%d failed to write: %s", topic, partition, e)
        ctx.logs.handle_error(topic, partition, e)  # a hard I/O error takes the log dir offline
        return _Appended(ErrorCode.KAFKA_STORAGE_ERROR, log=plog)
    _appended(ctx, topic, partition, result, len(records))
    return _Appended(0, result.base_offset, plog, result.log_append_time)


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


def _upconverted(ctx: BrokerContext, topic: str, partition: int, records: Buffer | None) -> tuple[int, bytes | None]:
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
        (RecordListTooLargeError, ErrorCode.RECORD_LIST_TOO_LARGE),
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


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ProduceReply | None:
    """The answer is encoded without kafka-python's response objects (:class:`ProduceReply`): it is sent for
    every request, and building those objects cost as much as appending a small batch."""
    acks = request.acks
    refused = _transactional_denied(ctx, request, version)
    responses: list[tuple[str, list[tuple[int, int, int, int]]]] = []
    to_flush: dict[int, PartitionLog] = {}
    waits: list[tuple[int, int, int]] = []  # acks=all: (topic index, partition index, offset to reach)
    append_times: dict[tuple[int, int], int] = {}  # (topic index, partition index) -> LogAppendTime given
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
                        outcome = _append(ctx, topic_data.name, pdata.index, records)
                        error, base, plog = outcome.error, outcome.base_offset, outcome.log
                        if outcome.log_append_time >= 0:
                            append_times[(len(responses), len(parts))] = outcome.log_append_time
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
    return ProduceReply(version, [
        TopicAnswer(name, [
            PartitionAnswer(index, error, base,
                            -1 if error else append_times.get((topic_index, part_index), -1), start)
            for part_index, (index, error, base, start) in enumerate(parts)
        ])
        for topic_index, (name, parts) in enumerate(responses)
    ])
