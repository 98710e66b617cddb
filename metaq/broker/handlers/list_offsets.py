"""ListOffsets v0..5: earliest (-2), latest (-1), the record with the largest timestamp (-3, KIP-734), or
the first record at or after a timestamp, found exactly even inside a compressed batch.

v4 adds leader epochs (answered -1, unknown, as in Metadata: see metaq/broker/handlers/metadata.py).
-3 is served at every version although Kafka takes it from v7 (flexible, not served here): confluent-kafka's
``OffsetSpec.max_timestamp()`` sends it at the highest version the broker has.

A newly elected leader whose high watermark is still below the start offset of its leader epoch has not yet
confirmed everything its predecessor may have exposed: a client asking it for the latest offset (or for a
timestamp whose answer would be at or above the HW, or not found) gets OFFSET_NOT_AVAILABLE, retriable
(LEADER_NOT_AVAILABLE before v5; v0 and requests from a replica are answered as usual), never an offset below
one the old leader answered. Kafka's rule (Partition.fetchOffsetForTimestamp, ReplicaManager.fetchOffset);
the earliest offset is answered meanwhile.

A timestamp lookup (and -3) answers a client only with an offset below the high watermark, which is what it
can fetch; the first match at or above it is answered "none" (offset and timestamp -1), as Kafka does
(Partition.fetchOffsetForTimestamp's ``allowed``). A replica's request may see up to the log end."""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from metaq.broker.context import BrokerContext
from metaq.broker.request_bounds import in_slices
from metaq.errors import ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import ListOffsetsResponse
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse


def unconfirmed_error(version: int, replica_id: int) -> int:
    """The error a leader whose HW is below its epoch's start offset answers a request with (0: none):
    only a client's request (replica id -1) at v1+ gets one, as in Kafka."""
    if version == 0 or replica_id != -1:
        return ErrorCode.NONE
    return ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE


class ListedOffset(NamedTuple):
    """One partition's ListOffsets answer (v1+ fields; v0 uses the error code and whether offset >= 0)."""

    error_code: int
    offset: int = -1
    timestamp: int = -1


def _lookup(ctx: BrokerContext, topic: str, partition: int, timestamp: int,
            current_leader_epoch: int = -1, unconfirmed: int = ErrorCode.NONE,
            client: bool = True, read_committed: bool = False) -> ListedOffset:
    """The answer for one partition. LATEST is the high watermark (the log end offset of a
    single-replica partition): consumers cannot read past it, and a ``client``'s timestamp lookup is not
    answered at or past it either. ``unconfirmed``: the error to answer while the HW is below the leader
    epoch's start offset (see the module docstring)."""
    error = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, topic) or ctx.serving_error(topic, partition) \
        or ctx.epoch_error(topic, partition, current_leader_epoch)
    if error:
        return ListedOffset(error)
    plog = ctx.log_for(topic, partition)
    if timestamp == EARLIEST:
        return ListedOffset(ErrorCode.NONE, offset=plog.log_start_offset)
    pending = unconfirmed if unconfirmed and ctx.epoch_start_unconfirmed(topic, partition) else ErrorCode.NONE
    if timestamp == LATEST:
        if pending:
            return ListedOffset(pending)
        hw = ctx.high_watermark(topic, partition, plog)
        # read_committed (v2+): the last stable offset, as Kafka's fetchOffsetForTimestamp (docs/transactions.md)
        return ListedOffset(ErrorCode.NONE, offset=plog.last_stable_offset(hw) if read_committed else hw)
    found = plog.max_timestamp_offset() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    # a client's answer must be below the HW (a pending error is only ever a client's)
    beyond_hw = client and (found is None or found.offset >= ctx.high_watermark(topic, partition, plog))
    if pending and beyond_hw:
        return ListedOffset(pending)
    if found is None or beyond_hw:
        return ListedOffset(ErrorCode.NONE)
    return ListedOffset(ErrorCode.NONE, offset=found.offset, timestamp=found.timestamp)


def _offsets_before(ctx: BrokerContext, topic: str, partition: int, timestamp: int, max_num: int,
                    client: bool) -> list[int]:
    """ListOffsets v0 (Kafka 0.8's OffsetRequest): up to ``max_num`` offsets, newest first, from the
    segments' first offsets plus the log end when the last segment holds data; for a time, from the newest
    segment last modified at or before it (coarse: segment by segment). A client never gets an offset past
    the high watermark (replaced by it, as Kafka's ``fetchOffsetsForTimestamp`` for consumers does). Kafka's
    ``Log.legacyFetchOffsetsBefore`` is the reference (docs/legacy-wire.md)."""
    plog = ctx.log_for(topic, partition)
    points = plog.segment_offsets_and_times()
    if plog.log_end_offset > points[-1][0]:
        points.append((plog.log_end_offset, _now_ms()))
    if timestamp == LATEST:
        start = len(points) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(points) - 1
        while start >= 0 and points[start][1] > timestamp:
            start -= 1
    offsets = sorted((points[i][0] for i in range(start, max(start - max(max_num, 0), -1), -1)), reverse=True)
    if client:
        hw = ctx.high_watermark(topic, partition, plog)
        if any(o > hw for o in offsets):
            offsets = [hw] + [o for o in offsets if o <= hw]
    return offsets


def _now_ms() -> int:
    return int(time.time() * 1000)


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    unconfirmed = unconfirmed_error(version, request.replica_id)
    client = request.replica_id == -1
    topics = []
    for topic in request.topics:
        parts = []
        async for p in in_slices(topic.partitions):
            found = _lookup(ctx, topic.name, p.partition_index, p.timestamp,
                            getattr(p, "current_leader_epoch", -1), unconfirmed, client,
                            version >= 2 and getattr(request, "isolation_level", 0) == 1)
            if version == 0:
                old = [] if found.error_code or found.offset < 0 else _offsets_before(
                    ctx, topic.name, p.partition_index, p.timestamp, p.max_num_offsets, client)
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=found.error_code,
                                               old_style_offsets=old))
            else:
                parts.append(PartitionResponse(partition_index=p.partition_index, error_code=found.error_code,
                                               timestamp=found.timestamp, offset=found.offset))
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return ListOffsetsResponse[version](throttle_time_ms=0, topics=topics)
