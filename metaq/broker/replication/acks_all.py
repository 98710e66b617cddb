"""acks=all on a partition this broker leads: a produce is answered once the high watermark reaches its last
offset, or with NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below ``min.insync.replicas`` meanwhile (part
of :class:`~metaq.broker.replication.replica_manager.ReplicaManager`, which holds the roles and calls
:meth:`_check_waiters` whenever a leader's high watermark or ISR changes).
"""

from __future__ import annotations

import asyncio
import logging
import time

from metaq.broker.config import BrokerConfig
from metaq.broker.metadata import MetadataWatcher, PartitionMeta
from metaq.broker.replication.roles import Role, TopicPartition, Waiter
from metaq.errors import ErrorCode, MetaqError
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

MIN_ISR_CACHE_S = 2.0


class AcksAll:
    """The produce waiters of the partitions this broker leads, for :class:`ReplicaManager`."""

    _config: BrokerConfig
    _layout: ZkLayout
    _metadata: MetadataWatcher
    _replicas: dict[TopicPartition, Role]
    _min_isr: dict[str, tuple[int, float]]
    _loop: asyncio.AbstractEventLoop | None

    async def min_insync_replicas(self, topic: str) -> int:
        cached = self._min_isr.get(topic)
        if cached is not None and time.monotonic() - cached[1] < MIN_ISR_CACHE_S:
            return cached[0]
        value = self._config.min_insync_replicas
        try:
            stored = await asyncio.to_thread(self._layout.topic_config, topic)
            if stored is not None and "min.insync.replicas" in stored.config:
                value = int(stored.config["min.insync.replicas"])
        except (MetaqError, ValueError) as e:
            log.warning("min.insync.replicas of topic %s unreadable (using %d): %s", topic, value, e)
        self._min_isr[topic] = (value, time.monotonic())
        return value

    def replicated(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._replicas

    def isr_size(self, topic: str, partition: int) -> int:
        meta = self._metadata.snapshot.partition(topic, partition)
        return len(meta.isr) if meta is not None else 0

    async def wait_replicated(self, topic: str, partition: int, required: int, min_isr: int,
                              timeout_s: float) -> int:
        """Wait until the HW reaches ``required``: 0, or the error code to answer the produce with."""
        key = (topic, partition)
        role = self._replicas.get(key)
        if role is None or role.leading is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert self._loop is not None
        waiter = Waiter(required, min_isr, self._loop.create_future())
        role.waiters.append(waiter)
        meta = self._metadata.snapshot.partition(topic, partition)
        if meta is not None:
            self._check_waiters(role, meta)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout_s)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        finally:
            if waiter in role.waiters:
                role.waiters.remove(waiter)

    def _check_waiters(self, role: Role, meta: PartitionMeta) -> None:
        state = role.leading
        if state is None:
            return
        for waiter in list(role.waiters):
            if waiter.future.done():
                continue
            if state.hw >= waiter.required:
                waiter.future.set_result(ErrorCode.NONE)
            elif len(meta.isr) < waiter.min_isr:
                waiter.future.set_result(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)

    def _fail_waiters(self, role: Role, code: int) -> None:
        for waiter in role.waiters:
            if not waiter.future.done():
                waiter.future.set_result(code)
        role.waiters.clear()
