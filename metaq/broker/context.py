"""What request handlers may use: config, logs, the cluster snapshot, the append notifier, and the session
of the connection whose request is being handled (one copy of the broker's context per connection, made by
the network layer with :meth:`BrokerContext.for_session`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from metaq.broker.auth.session import Session
from metaq.broker.config import BrokerConfig
from metaq.broker.coordinator.coordinator import GroupCoordinator
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.metadata import ClusterSnapshot, MetadataWatcher
from metaq.broker.producer_ids import ProducerIdManager
from metaq.broker.purgatory import AppendNotifier
from metaq.broker.security.authorizer import Authorizer
from metaq.errors import ErrorCode, StorageError, for_code
from metaq.metrics.broker import BrokerMetrics
from zk_layout import BrokerInfo, ZkLayout
from zk_layout.acl_formats import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from metaq.broker.coordinator.txn_coordinator import TransactionCoordinator
    from metaq.broker.quota.throttling import Quotas
    from metaq.broker.replication.controller import Controller
    from metaq.broker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

T = TypeVar("T")

_DENIED = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


@dataclass(frozen=True)
class BrokerContext:
    """The broker's parts a handler may use, built once by the composition root (metaq/broker/server.py), and
    the :class:`Session` of one connection (the default one until :meth:`for_session` binds a connection's)."""

    config: BrokerConfig
    logs: LogManager
    metadata: MetadataWatcher
    notifier: AppendNotifier
    auto_create: Callable[[str], Awaitable[None]]
    layout: ZkLayout
    coordinator: GroupCoordinator
    metrics: BrokerMetrics
    replication: ReplicaManager | None = None  # metaq/broker/replication; None in a broker without it
    producer_ids: ProducerIdManager | None = None  # InitProducerId's ids (ZooKeeper blocks)
    authorizer: Authorizer | None = None
    """None unless ``authorizer.class.name`` is set: then every check below allows everything."""
    transactions: TransactionCoordinator | None = None  # docs/transactions.md
    controller: Controller | None = None  # set by the server: ElectLeaders and reassignments act through it
    quotas: Quotas | None = None  # client quotas and replication throttles (docs/quotas.md)
    session: Session = Session()
    """Who sent the request being handled (listener, principal, address)."""

    def for_session(self, session: Session) -> BrokerContext:
        """This context for the requests of one connection (its session changes once SASL completes)."""
        return dataclasses.replace(self, session=session)

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """Whether the current connection's principal may do ``operation`` on the resource (Kafka's ACL rules,
        see metaq/broker/security/acl_rules.py); always True without an authorizer."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.session.client_host, operation, resource_type, name)

    def denied(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """0 if :meth:`authorize` allows, else the error code Kafka answers for the resource type
        (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED)."""
        if self.authorize(operation, resource_type, name):
            return ErrorCode.NONE
        return _DENIED.get(resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type (Kafka's
        authorizeByResourceType)."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_any(self.principal, self.session.client_host, operation, resource_type)

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.metadata.snapshot

    @property
    def principal(self) -> str:
        """``User:<name>`` of the client whose request is being handled (the SASL user, the TLS client
        certificate's subject, or ``User:ANONYMOUS``)."""
        return self.session.principal

    @property
    def listener(self) -> str:
        """The listener name the current request came in on."""
        return self.session.listener

    def broker_addresses(self, snapshot: ClusterSnapshot) -> list[tuple[BrokerInfo, tuple[str, int]]]:
        """Live brokers by id with their (host, port) on the current request's listener; a broker without
        that listener is left out, as Kafka does."""
        listener = self.listener
        result = []
        for info in sorted(snapshot.brokers.values(), key=lambda b: b.id):
            address = snapshot.address(info.id, listener)
            if address is not None:
                result.append((info, address))
        return result

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
        if not error and self.logs.is_offline(topic, partition):  # its log dir failed (docs/log-dirs.md)
            return ErrorCode.KAFKA_STORAGE_ERROR
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

    def epoch_start_unconfirmed(self, topic: str, partition: int) -> bool:
        """Whether this broker newly leads a replicated partition whose HW has not yet reached the start offset
        of its leader epoch (see metaq/broker/handlers/list_offsets.py)."""
        return self.replication is not None and self.replication.epoch_start_unconfirmed(topic, partition)

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

    async def in_thread(self, fn: Callable[..., T], *args: object) -> T:
        """Run blocking work (fsync, ZooKeeper writes) off the event loop: ``fn(*args)``'s result."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
