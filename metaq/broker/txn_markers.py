"""Writing a transaction's end markers to its partitions (Kafka's ``TransactionMarkerChannelManager`` and the
leader's side of WriteTxnMarkers), and the offsets a transaction commits (TxnOffsetCommit).

A partition this broker leads gets its control batch appended here (:func:`write_local`); a partition led by
another broker gets a WriteTxnMarkers request on the inter-broker listener, as Kafka's coordinator sends. A
``__consumer_offsets`` partition gets no control batch: the group offsets staged by TxnOffsetCommit for the
producer are stored when the transaction commits, dropped when it aborts (:class:`PendingTxnOffsets`; see
docs/transactions.md for what that simplification means across a coordinator failover).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from metaq.broker.context import BrokerContext
from metaq.broker.coordinator.coordinator import GroupCoordinator
from metaq.broker.coordinator.schema import OFFSETS_TOPIC
from metaq.client.settings import ConnectionSettings
from metaq.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    MetaqError,
    StorageError,
    TransactionCoordinatorFencedError,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class PendingTxnOffsets:
    """Group offsets committed inside transactions, per producer id, until the transaction ends."""

    def __init__(self, groups: GroupCoordinator) -> None:
        self._groups = groups
        self._pending: dict[int, dict[str, dict[TopicPartition, tuple[int, str]]]] = {}

    def stage(self, producer_id: int, group_id: str, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of ``group_id`` with offsets in a transaction not yet ended (OffsetFetch's
        require_stable answers UNSTABLE_OFFSET_COMMIT for them, as Kafka's ``GroupMetadata.hasPendingOffsetCommits``
        makes it)."""
        return {tp for groups in self._pending.values() for tp in groups.get(group_id, ())}

    async def complete(self, producer_id: int, offsets_partition: int, commit: bool) -> int:
        """The marker for ``__consumer_offsets`` partition ``offsets_partition``: store (commit) or drop (abort)
        the producer's staged offsets of the groups that map to it."""
        groups = self._pending.get(producer_id, {})
        error: int = ErrorCode.NONE
        for group_id in [g for g in groups if self._groups.offsets_partition_of(g) == offsets_partition]:
            offsets = groups.pop(group_id)
            if commit:
                errors = await self._groups.commit_txn_offsets(group_id, offsets)
                error = error or next((e for e in errors.values() if e), ErrorCode.NONE)
        if not groups:
            self._pending.pop(producer_id, None)
        return error


def write_local(ctx: BrokerContext, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                topic: str, partition: int) -> int:
    """Append one marker to a partition this broker leads; the error code for it (0: written)."""
    error = ctx.serving_error(topic, partition)
    if error:
        return error
    plog = ctx.log_for(topic, partition)
    epoch = ctx.replication.append_epoch(topic, partition) if ctx.replication is not None else None
    try:
        plog.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, leader_epoch=epoch)
    except (InvalidProducerEpochError, TransactionCoordinatorFencedError) as e:
        log.warning("transaction marker for %s-%d refused: %s", topic, partition, e)
        return e.code
    except (StorageError, OSError) as e:
        log.error("transaction marker for %s-%d failed to write: %s", topic, partition, e)
        return ErrorCode.KAFKA_STORAGE_ERROR
    ctx.notifier.notify((topic, partition))
    if ctx.replication is not None:
        ctx.replication.leader_appended(topic, partition)
    return ErrorCode.NONE


class MarkerWriter:
    """The transaction coordinator's ``write_markers``: local partitions directly, others via their leader."""

    def __init__(self, ctx: BrokerContext, pending: PendingTxnOffsets) -> None:
        self._ctx = ctx
        self._pending = pending

    async def __call__(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        ctx = self._ctx
        errors: dict[TopicPartition, int] = {}
        remote: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            meta = ctx.snapshot.partition(*tp)
            if meta is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif meta.leader != ctx.broker_id:
                remote.setdefault(meta.leader, []).append(tp)
            elif tp[0] == OFFSETS_TOPIC:
                errors[tp] = await self._pending.complete(producer_id, tp[1], commit)
            else:
                errors[tp] = write_local(ctx, producer_id, producer_epoch, commit, coordinator_epoch, *tp)
        for leader, tps in remote.items():
            errors.update(await ctx.in_thread(self._send, leader, producer_id, producer_epoch, commit,
                                              coordinator_epoch, tps))
        return errors

    def _send(self, leader: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
              partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """WriteTxnMarkers to another broker (blocking; on a worker thread)."""
        config = self._ctx.config
        address = self._ctx.snapshot.address(leader, config.inter_broker_listener_of().name)
        if address is None:
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in partitions}
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        settings = ConnectionSettings(client_id=f"metaq-txn-markers-{config.broker_id}",
                                      security=config.inter_broker_security())
        conn = settings.new_connection(address[0], address[1])
        try:
            conn.connect()
            response = conn.send(WriteTxnMarkersRequest, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
                "coordinator_epoch": coordinator_epoch}]})
        except (MetaqError, OSError) as e:
            log.warning("WriteTxnMarkers to broker %d failed: %s", leader, e)
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in partitions}
        finally:
            conn.close()
        errors: dict[TopicPartition, int] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    errors[(topic.name, part.partition_index)] = part.error_code
        return {tp: errors.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in partitions}

