"""Producer ids for InitProducerId: handed out one by one from blocks of 1000 claimed in ZooKeeper.

As ZooKeeper-mode Kafka's ``ZkProducerIdManager``: a broker claims a block through a conditional write of
``/latest_producer_id_block`` (:mod:`zk_layout.producer_ids`) when it has none or has used its block up, so ids are
unique across the cluster and never reused after a restart (the unused rest of a block is abandoned).
"""

from __future__ import annotations

import asyncio
import logging

from zk_layout import ZkLayout
from zk_layout.producer_ids import ProducerIdBlock

log = logging.getLogger(__name__)


class ProducerIdManager:
    """``await manager.next_id()`` on the event loop; the ZooKeeper write runs in a worker thread."""

    def __init__(self, layout: ZkLayout, broker_id: int) -> None:
        self._layout = layout
        self._broker_id = broker_id
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()  # one claim at a time: concurrent InitProducerIds wait for the same block

    async def next_id(self) -> int:
        """A producer id no broker of the cluster handed out before (ZooKeeperError if ZooKeeper is away)."""
        async with self._lock:
            if self._block is None or self._next > self._block.last:
                self._block = await asyncio.to_thread(self._layout.claim_producer_id_block, self._broker_id)
                self._next = self._block.first
                log.info("claimed producer id block %d..%d", self._block.first, self._block.last)
            producer_id = self._next
            self._next += 1
            return producer_id
