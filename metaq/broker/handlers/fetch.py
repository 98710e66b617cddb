"""Fetch v4..11 with long polling: wait up to ``max_wait_ms`` for ``min_bytes``, then answer with
slices of the segment files (sent by the network layer with sendfile)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from metaq.broker.context import OFFSET_OUT_OF_RANGE, UNKNOWN_SERVER_ERROR, BrokerContext
from metaq.errors import OffsetOutOfRangeError
from metaq.protocol.fetch_response import PartitionPart, TopicPart

log = logging.getLogger(__name__)


class FetchReply:
    """A Fetch response whose records are still file slices; the network layer encodes and sends it."""

    def __init__(self, version: int, topics: list[TopicPart]) -> None:
        self.version = version
        self.topics = topics


def _read_partition(ctx: BrokerContext, topic: str, p: Any, budget: int) -> tuple[PartitionPart, int]:
    """One partition's part of the answer and the number of record bytes it carries."""
    error = ctx.leader_error(topic, p.partition)
    if error:
        return PartitionPart(p.partition, error, -1, -1, -1, None), 0
    plog = ctx.log_for(topic, p.partition)
    end, start = plog.log_end_offset, plog.log_start_offset
    try:
        limit = min(p.partition_max_bytes, budget)
        piece = plog.read(p.fetch_offset, limit) if limit > 0 else None
    except OffsetOutOfRangeError:
        return PartitionPart(p.partition, OFFSET_OUT_OF_RANGE, end, end, start, None), 0
    except Exception:
        log.exception("reading %s-%d at offset %d failed", topic, p.partition, p.fetch_offset)
        return PartitionPart(p.partition, UNKNOWN_SERVER_ERROR, end, end, start, None), 0
    size = piece.size if piece is not None else 0
    return PartitionPart(p.partition, 0, end, end, start, piece if piece is not None else b""), size


def _collect(ctx: BrokerContext, request: Any, version: int) -> tuple[list[TopicPart], int, bool]:
    """(topics, total record bytes, whether any partition has an error)."""
    budget = request.max_bytes if version >= 3 else 0x7FFFFFFF
    total = 0
    errors = False
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            part, size = _read_partition(ctx, topic.topic, p, budget - total)
            total += size
            errors = errors or part.error_code != 0
            parts.append(part)
        topics.append(TopicPart(topic.topic, parts))
    return topics, total, errors


async def handle(ctx: BrokerContext, request: Any, version: int) -> FetchReply:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000.0
    keys = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    while True:
        topics, total, errors = _collect(ctx, request, version)
        remaining = deadline - loop.time()
        if total >= request.min_bytes or errors or remaining <= 0 or not keys:
            return FetchReply(version, topics)
        await ctx.notifier.wait_any(keys, remaining)
