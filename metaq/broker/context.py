"""What request handlers may use: config, logs, the cluster snapshot, the append notifier."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metaq.broker.config import BrokerConfig
from metaq.broker.coordinator.coordinator import GroupCoordinator
from metaq.broker.log.manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.metadata import ClusterSnapshot, MetadataWatcher
from metaq.broker.purgatory import AppendNotifier
from metaq.errors import ErrorCode, StorageError, for_code
from metaq.metrics.broker import BrokerMetrics
from zk_layout import ZkLayout

if TYPE_CHECKING:
    from metaq.broker.replication.manager import ReplicaManager

log = logging.getLogger(__name__)

CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
"""The address of the client whose request is being handled, as Kafka shows it ("/127.0.0.1"); set by the
network layer for each connection's task (DescribeGroups reports it per member)."""


@dataclass
class BrokerContext:
    config: BrokerConfig
    logs: LogManager
    metadata: MetadataWatcher
    notifier: AppendNotifier
    auto_create: Callable[[str], Awaitable[None]]
    layout: ZkLayout
    coordinator: GroupCoordinator
    metrics: BrokerMetrics
    replication: ReplicaManager | None = None  # set once started (metaq/broker/replication)

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.metadata.snapshot

    def leader_error(self, topic: str, partition: int) -> int:
        """0 if this broker leads topic-partition, else the error code a client should get."""
        meta = self.snapshot.partition(topic, partition)
        if meta is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if meta.leader != self.broker_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def serving_error(self, topic: str, partition: int) -> int:
        """0 if this broker leads topic-partition and its local log belongs to the topic (same topic id, see
        metaq/broker/log/partition_metadata.py), else the error code a client should get."""
        error = self.leader_error(topic, partition)
        topic_id = self.snapshot.topic_ids.get(topic)
        if error or topic_id is None:  # topics created before topic ids have none to check
            return error
        try:
            matches = self.logs.topic_id_matches(topic, partition, topic_id)
        except StorageError as e:
            log.error("cannot check the topic id of %s-%d: %s", topic, partition, e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE if matches else ErrorCode.INCONSISTENT_TOPIC_ID

    def high_watermark(self, topic: str, partition: int, plog: PartitionLog) -> int:
        """What consumers may read up to: the HW of a replicated partition, else the log end offset."""
        if self.replication is None:
            return plog.log_end_offset
        return self.replication.high_watermark(topic, partition, plog)

    def epoch_error(self, topic: str, partition: int, current_leader_epoch: int) -> int:
        """FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH if a request's ``current_leader_epoch`` disagrees."""
        if self.replication is None:
            return ErrorCode.NONE
        return self.replication.epoch_error(topic, partition, current_leader_epoch)

    def count_error(self, api: str, code: int) -> None:
        """One Kafka error answered for a partition or a request (metrics: metaq_broker_request_errors_total)."""
        self.metrics.error(api, for_code(code).message)

    def log_for(self, topic: str, partition: int) -> PartitionLog:
        """The local log of a partition this broker leads (created empty on first use)."""
        return self.logs.get_or_create(topic, partition)

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking work (fsync, ZooKeeper writes) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
