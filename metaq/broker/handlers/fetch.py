"""Fetch v0..11 with long polling: wait up to ``max_wait_ms`` for ``min_bytes``, then answer with
slices of the segment files (a :class:`FetchReply` writes them with sendfile, metaq/broker/zero_copy.py);
Fetch v0..3 (Kafka 0.8-0.10 clients) get the batches down-converted to message format v0/v1 while the answer
is written (metaq/broker/downconvert.py).

The answer's size is bounded as Kafka bounds it: by the request's ``max_bytes`` capped by the broker's
``fetch.max.bytes`` (``replica.fetch.response.max.bytes`` for a replica), and by each partition's
``partition_max_bytes``. Only the first partition that has data may exceed them, by returning its first
batch whole (KIP-74), so a consumer always makes progress. A partition named twice is answered once,
with the parameters of its last mention (Kafka keeps the request's partitions in a map).

A follower's fetch (``replica_id`` >= 0) tells the leader its log end offset and is served up to the log
end; a consumer's (``replica_id`` -1) is served below the high watermark only, which ``high_watermark``
answers (metaq/broker/replication; for a single-replica partition it is the log end offset).

``isolation_level`` 1 (read_committed, v4+) serves a consumer only below the last stable offset (the first
offset of the oldest open transaction) and lists the aborted transactions among the records, for the client to
drop (docs/transactions.md); every v4+ answer carries the LSO.
"""

from __future__ import annotations

import asyncio
import logging

from metaq.broker.context import BrokerContext
from metaq.broker.downconvert import DownConverted, fetch_magic
from metaq.broker.quota.replica_fetch import leader_holds_back, record_leader_bytes
from metaq.broker.quota.request_path import fetch_budget
from metaq.broker.zero_copy import FetchReply
from metaq.errors import ErrorCode, OffsetOutOfRangeError, UnsupportedCompressionError
from metaq.protocol.fetch_response import PartitionPart, TopicPart
from metaq.protocol.messages import ApiRequest, ApiStruct
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)


def _merge_partitions(request: ApiRequest) -> list[tuple[str, list[ApiStruct]]]:
    """(topic, partitions) with each topic-partition once, topics in order of first mention."""
    merged: dict[str, dict[int, ApiStruct]] = {}
    for topic in request.topics:
        parts = merged.setdefault(topic.topic, {})
        for p in topic.partitions:
            parts[p.partition] = p  # a later mention replaces the parameters, keeps the position
    return [(topic, list(parts.values())) for topic, parts in merged.items()]


def response_budget(ctx: BrokerContext, request: ApiRequest, version: int) -> int:
    """Record bytes the whole answer may carry: the request's ``max_bytes`` capped by the broker."""
    cap = ctx.config.replica_fetch_response_max_bytes if request.replica_id >= 0 else ctx.config.fetch_max_bytes
    asked = request.max_bytes if version >= 3 else cap
    return max(0, min(asked, cap))


def _denied(ctx: BrokerContext, topic: str, replica_id: int) -> int:
    """A follower (``replica_id`` >= 0) needs ClusterAction on the cluster, a consumer Read on the topic (as
    Kafka's KafkaApis); either is refused per partition with TOPIC_AUTHORIZATION_FAILED."""
    if replica_id >= 0:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED if ctx.denied(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) \
            else ErrorCode.NONE
    return ctx.denied(AclOperation.READ, ResourceType.TOPIC, topic)


READ_COMMITTED = 1


def _read_partition(
    ctx: BrokerContext, topic: str, p: ApiStruct, limit: int, min_one: bool, replica_id: int = -1,
    magic: int | None = None, isolation_level: int = 0,
) -> tuple[PartitionPart, int]:
    """One partition's part of the answer and the number of record bytes it carries.

    With ``min_one`` the first batch comes whole even past ``limit``; otherwise a first batch that does
    not fit leaves the partition empty in this answer (the client asks again)."""
    error = _denied(ctx, topic, replica_id) or ctx.serving_error(topic, p.partition) or ctx.epoch_error(
        topic, p.partition, getattr(p, "current_leader_epoch", -1))
    if error:  # an empty record set with an error, never a null one: librdkafka rejects the whole answer
        return PartitionPart(p.partition, error, -1, -1, -1, b""), 0
    plog = ctx.log_for(topic, p.partition)
    if replica_id >= 0 and ctx.replication is not None:  # a follower: its fetch offset is its log end
        ctx.replication.follower_fetched(topic, p.partition, replica_id, p.fetch_offset, plog)
    end, start = plog.log_end_offset, plog.log_start_offset
    hw = ctx.high_watermark(topic, p.partition, plog)
    lso = plog.last_stable_offset(hw)
    if replica_id >= 0 and leader_holds_back(ctx, topic, p.partition, replica_id):  # replication throttle
        return PartitionPart(p.partition, 0, hw, lso, start, b""), 0
    committed = isolation_level == READ_COMMITTED and replica_id < 0
    try:
        # consumers never get records at or above the high watermark (they could still be truncated), nor
        # read_committed ones at or above the last stable offset
        piece = (plog.read(p.fetch_offset, limit, None if replica_id >= 0 else lso if committed else hw)
                 if limit > 0 or min_one else None)
    except OffsetOutOfRangeError:
        return PartitionPart(p.partition, ErrorCode.OFFSET_OUT_OF_RANGE, end, end, start, b""), 0
    except Exception as e:
        if ctx.logs.handle_error(topic, p.partition, e):  # a hard I/O error: its log dir went offline
            return PartitionPart(p.partition, ErrorCode.KAFKA_STORAGE_ERROR, hw, hw, start, b""), 0
        log.exception("reading %s-%d at offset %d failed", topic, p.partition, p.fetch_offset)
        return PartitionPart(p.partition, ErrorCode.UNKNOWN_SERVER_ERROR, hw, hw, start, b""), 0
    if piece is None or (piece.size > limit and not min_one):
        return PartitionPart(p.partition, 0, hw, lso, start, b"", [] if committed else None), 0
    aborted = ([(a.producer_id, a.first_offset) for a in plog.aborted_transactions(p.fetch_offset, lso)]
               if committed else None)
    if magic is not None:  # Fetch v0..3: the old message format, converted while the answer is written
        try:
            converted = DownConverted(piece, magic, p.fetch_offset)
        except UnsupportedCompressionError as e:
            log.info("fetch of %s-%d at offset %d: %s", topic, p.partition, p.fetch_offset, e)
            return PartitionPart(p.partition, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, hw, hw, start, b""), 0
        return PartitionPart(p.partition, 0, hw, hw, start, converted), converted.size
    return PartitionPart(p.partition, 0, hw, lso, start, piece, aborted), piece.size


def _collect(
    ctx: BrokerContext, wanted: list[tuple[str, list[ApiStruct]]], budget: int, replica_id: int = -1,
    magic: int | None = None, isolation_level: int = 0,
) -> tuple[list[TopicPart], int, bool]:
    """(topics, total record bytes, whether any partition has an error)."""
    total = 0
    errors = False
    topics = []
    for topic, partitions in wanted:
        parts = []
        for p in partitions:
            limit = min(max(p.partition_max_bytes, 0), budget - total)
            part, size = _read_partition(ctx, topic, p, limit, min_one=total == 0, replica_id=replica_id,
                                         magic=magic, isolation_level=isolation_level)
            total += size
            errors = errors or part.error_code != 0
            parts.append(part)
        topics.append(TopicPart(topic, parts))
    return topics, total, errors


def _count(ctx: BrokerContext, topics: list[TopicPart]) -> None:
    """Metrics of the answer actually sent (not of the long-poll rounds before it)."""
    for topic in topics:
        size = 0
        for part in topic.partitions:
            if part.error_code:
                ctx.count_error("FETCH", part.error_code)
            elif part.records is not None and not isinstance(part.records, bytes):
                size += part.records.size
        if size:
            ctx.metrics.served(topic.topic, size)


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> FetchReply:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000.0
    wanted = _merge_partitions(request)
    budget = fetch_budget(ctx, request, response_budget(ctx, request, version))  # capped by a fetch quota
    keys = [(topic, p.partition) for topic, partitions in wanted for p in partitions]
    while True:
        topics, total, errors = _collect(ctx, wanted, budget, request.replica_id, fetch_magic(version),
                                         getattr(request, "isolation_level", 0) if version >= 4 else 0)
        remaining = deadline - loop.time()
        if total >= request.min_bytes or errors or remaining <= 0 or not keys:
            _count(ctx, topics)
            if request.replica_id >= 0:
                record_leader_bytes(ctx, topics)
            return FetchReply(version, topics)
        await ctx.notifier.wait_any(keys, remaining)
