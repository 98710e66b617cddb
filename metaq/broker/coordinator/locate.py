"""FindCoordinator for both coordinators: the broker leading the internal topic's partition a key maps to, on the
listener the request came in on (the topic created on first use).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from metaq.broker.coordinator.offsets_schema import partition_for
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ErrorCode


class CoordinatorAddress(NamedTuple):
    """A FindCoordinator answer: the broker coordinating a group, or the error (node -1) why none does."""

    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1


async def locate_coordinator(snapshot_of: Callable[[], ClusterSnapshot], topic: str, key: str,
                             create_topic: Callable[[int], Awaitable[None]], partitions: int, listener: str
                             ) -> CoordinatorAddress:
    """The leader of ``key``'s partition of the internal ``topic`` (created
    with ``partitions`` on first use), on ``listener`` (the one the request came in on): where Kafka's FindCoordinator
    sends a group (``__consumer_offsets``) or a transactional id (``__transaction_state``)."""
    snapshot = snapshot_of()
    if topic not in snapshot.topics:
        await create_topic(partitions)
        snapshot = snapshot_of()
        if topic not in snapshot.topics:
            return CoordinatorAddress(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    existing = snapshot.topics.get(topic)
    meta = snapshot.partition(topic, partition_for(key, len(existing) if existing else partitions))
    address = snapshot.address(meta.leader, listener) if meta else None
    if meta is None or address is None:
        return CoordinatorAddress(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return CoordinatorAddress(ErrorCode.NONE, meta.leader, address[0], address[1])
