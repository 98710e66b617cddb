"""Where long-polling fetches wait for appends ("purgatory" in Kafka's terms).

A fetch that has fewer than ``min_bytes`` waits on the partitions it asked for; an append wakes the
waiters of its partition. Everything runs on the broker's event loop, so no locks are needed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class AppendNotifier:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)

    def notify(self, key: TopicPartition) -> None:
        waiters = self._waiters.pop(key, None)
        for fut in waiters or ():
            if not fut.done():
                fut.set_result(None)

    async def wait_any(self, keys: Iterable[TopicPartition], timeout: float) -> bool:
        """Wait until any of ``keys`` gets an append or ``timeout`` seconds pass; True if woken."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters[key].add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[key]
