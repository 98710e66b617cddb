"""What one client may hold (:class:`ConnectionLimits`, Kafka's names and defaults) and the bytes of request frames read
but not yet handled over all connections (:class:`RequestMemoryPool`, ``queued.max.request.bytes``): the bounds
the socket layer (metaq/broker/network.py) admits connections and frames within.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Self

from metaq.broker.config import BrokerConfig


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may hold; Kafka's names and defaults (``request_body_timeout_ms`` is metaq's)."""

    max_request_bytes: int = 104857600  # socket.request.max.bytes
    request_body_timeout_ms: int = 30000  # socket.request.body.timeout.ms
    idle_timeout_ms: int = 600000  # connections.max.idle.ms
    max_connections: int = 2147483647  # max.connections
    max_connections_per_ip: int = 2147483647  # max.connections.per.ip
    queued_max_request_bytes: int = -1  # queued.max.request.bytes (-1: unbounded)
    max_request_entries: int = 20000  # metaq.max.request.entries (see metaq.broker.request_bounds)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Self:
        """The limits a broker config sets."""
        return cls(
            max_request_bytes=config.socket_request_max_bytes,
            request_body_timeout_ms=config.socket_request_body_timeout_ms,
            idle_timeout_ms=config.connections_max_idle_ms,
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            queued_max_request_bytes=config.queued_max_request_bytes,
            max_request_entries=config.max_request_entries,
        )


class RequestMemoryPool:
    """Bytes of request frames read but not yet handled, over all connections (``queued.max.request.bytes``).

    As Kafka's pool, it is not strict: a frame is admitted while any capacity is left, so one frame
    larger than the pool still gets through on its own. A connection waiting here reads nothing more, so
    its client's bytes stay in the kernel (and TCP flow control slows it down)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._used = 0
        self._freed = asyncio.Event()

    async def acquire(self, size: int) -> None:
        if self._capacity < 0:
            return
        while self._used >= self._capacity:
            self._freed.clear()
            await self._freed.wait()
        self._used += size

    def release(self, size: int) -> None:
        if self._capacity < 0:
            return
        self._used -= size
        self._freed.set()
