"""How the coordinators (groups' and transactions') append to their internal topics' partitions: stamped with the
leader epoch and answered once the ISR has the append (``offsets.commit.required.acks`` -1, as Kafka), through the
broker's replica manager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from metaq.errors import ErrorCode

COMMIT_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms: how long a commit waits for the ISR


class Replication(Protocol):
    """What the coordinator needs of the broker's replica manager (metaq.broker.replication.replica_manager)."""

    def append_epoch(self, topic: str, partition: int) -> int | None: ...

    def leader_appended(self, topic: str, partition: int) -> None: ...

    def replicated(self, topic: str, partition: int) -> bool: ...

    async def min_insync_replicas(self, topic: str) -> int: ...

    async def wait_replicated(self, topic: str, partition: int, required: int, min_isr: int,
                              timeout_s: float) -> int: ...


async def replicate_append(replication: Replication | None, notify: Callable[[tuple[str, int]], None], topic: str,
                           partition: int, end_offset: int, timeout_s: float) -> int:
    """After a coordinator's append to a replicated internal partition it leads: move the HW of a leader alone
    in its ISR, wake the followers' long polls and wait until the ISR has ``end_offset`` (Kafka's
    requiredAcks -1 for ``__transaction_state``). 0, or the replication error."""
    if replication is None or not replication.replicated(topic, partition):
        return ErrorCode.NONE
    replication.leader_appended(topic, partition)
    notify((topic, partition))
    min_isr = await replication.min_insync_replicas(topic)
    return await replication.wait_replicated(topic, partition, end_offset, min_isr, timeout_s)
