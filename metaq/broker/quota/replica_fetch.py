"""The leader's side of the replication throttle, used by the Fetch handler for a follower's fetch
(metaq/broker/handlers/fetch.py): a throttled replica outside the ISR gets no records while the leader's
throttled bytes are over ``leader.replication.throttled.rate``, and the bytes of every throttled partition
served count towards it (Kafka's ``ReplicaManager.shouldLeaderThrottle`` and
``KafkaApis.sizeOfThrottledPartitions``, docs/quotas.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from metaq.broker.quota.request_path import fetch_record_bytes
from metaq.broker.quota.throttling import now_ms
from metaq.protocol.fetch_response import TopicPart

if TYPE_CHECKING:
    from metaq.broker.context import BrokerContext


def leader_holds_back(ctx: BrokerContext, topic: str, partition: int, replica_id: int) -> bool:
    """Whether a follower's fetch of this partition is answered without records now."""
    quota = ctx.quotas.leader if ctx.quotas is not None else None
    if quota is None or quota.bound is None or ctx.replication is None:
        return False
    in_sync = ctx.replication.in_isr((topic, partition), replica_id)
    return quota.holds_back(topic, partition, in_sync, now_ms())


def record_leader_bytes(ctx: BrokerContext, topics: list[TopicPart]) -> None:
    """Count the record bytes of the throttled partitions of a follower's answer."""
    quota = ctx.quotas.leader if ctx.quotas is not None else None
    if quota is None:
        return
    throttled = [TopicPart(t.topic, [p for p in t.partitions if quota.is_throttled(t.topic, p.partition)])
                 for t in topics]
    size = fetch_record_bytes(throttled)
    if size:
        quota.record(size, now_ms())
