"""acks=all for replicated partitions: the produce purgatory.

Before the append, a partition whose ISR is smaller than ``min.insync.replicas`` (topic config, else the
broker's) refuses an acks=all batch with NOT_ENOUGH_REPLICAS (19): acknowledging it with fewer copies is
how Jepsen (2013) lost acknowledged writes. After the append the request waits, bounded by its
``timeout_ms``, until the high watermark passes every batch (each ISR member has it); a shrink of the ISR
below the minimum meanwhile answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (20), the timeout REQUEST_TIMED_OUT (7),
a leadership change NOT_LEADER_OR_FOLLOWER (6). None of these acknowledge the batch; the client retries.
Single-replica partitions answer as soon as the leader wrote, as before.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from metaq.errors import ErrorCode

if TYPE_CHECKING:
    from metaq.broker.context import BrokerContext

PartitionAnswer = tuple[int, int, int, int]  # (partition, error, base offset, log start offset)


async def check_min_isr(ctx: BrokerContext, topic: str, partition: int, acks: int) -> int:
    """NOT_ENOUGH_REPLICAS for an acks=all batch to a replicated partition led here with a small ISR."""
    manager = ctx.replication
    if acks != -1 or manager is None or not manager.replicated(topic, partition):
        return ErrorCode.NONE
    meta = ctx.snapshot.partition(topic, partition)
    if meta is None or meta.leader != ctx.broker_id:
        return ErrorCode.NONE  # the append answers NOT_LEADER_OR_FOLLOWER
    if len(meta.isr) < await manager.min_insync_replicas(topic):
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return ErrorCode.NONE


async def await_isr(ctx: BrokerContext, responses: list[tuple[str, list[PartitionAnswer]]],
                    waits: list[tuple[int, int, int]], timeout_ms: int) -> None:
    """Wait for the ISR of every appended partition at once; errors replace the answers in ``responses``."""
    manager = ctx.replication
    if manager is None:
        return
    timeout_s = max(timeout_ms, 0) / 1000.0
    pending = []
    for topic_index, part_index, required in waits:
        topic = responses[topic_index][0]
        partition = responses[topic_index][1][part_index][0]
        if manager.replicated(topic, partition):
            min_isr = await manager.min_insync_replicas(topic)
            pending.append((topic_index, part_index,
                            manager.wait_replicated(topic, partition, required, min_isr, timeout_s)))
    codes = await asyncio.gather(*(wait for _, _, wait in pending))
    for (topic_index, part_index, _), code in zip(pending, codes, strict=True):
        if code:
            parts = responses[topic_index][1]
            partition, _, _, start = parts[part_index]
            parts[part_index] = (partition, code, -1, start)
            ctx.count_error("PRODUCE", code)
