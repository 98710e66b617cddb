"""Writing a transaction's end markers to its partitions (Kafka's ``TransactionMarkerChannelManager`` and the
leader's side of WriteTxnMarkers), and the offsets a transaction commits (TxnOffsetCommit).

A partition this broker leads gets its control batch appended here (:func:`write_marker`) and, as Kafka
appends markers with acks -1, the marker counts as written once the partition's ISR has it; a partition led by
another broker gets a WriteTxnMarkers request on the inter-broker listener, as Kafka's coordinator sends. In a
``__consumer_offsets`` partition the marker ends the producer's pending transactional offsets there (the group
coordinator's ``end_txn``, Kafka's onTransactionCompleted; docs/transactions.md section 2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from metaq.broker.context import BrokerContext
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
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
MARKER_ACKS_TIMEOUT_S = 5.0  # how long a marker waits for the ISR before the coordinator writes it again


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


async def write_marker(ctx: BrokerContext, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, topic: str, partition: int) -> int:
    """:func:`write_local`, then wait for the ISR (Kafka's requiredAcks -1 for markers); in
    ``__consumer_offsets`` the producer's pending offsets are then committed or dropped. The error code."""
    error = write_local(ctx, producer_id, producer_epoch, commit, coordinator_epoch, topic, partition)
    manager = ctx.replication
    if not error and manager is not None and manager.replicated(topic, partition):
        min_isr = await manager.min_insync_replicas(topic)
        error = await manager.wait_replicated(topic, partition, ctx.log_for(topic, partition).log_end_offset,
                                              min_isr, MARKER_ACKS_TIMEOUT_S)
        if error:
            log.warning("transaction marker for %s-%d not replicated: error %d", topic, partition, error)
    if not error and topic == OFFSETS_TOPIC:
        await ctx.coordinator.end_txn(producer_id, partition, commit)
    return error


class MarkerWriter:
    """The transaction coordinator's ``write_markers``: local partitions directly, others via their leader."""

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx

    async def __call__(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        ctx = self._ctx
        errors: dict[TopicPartition, int] = {}
        remote: dict[int, list[TopicPartition]] = {}
        local: list[TopicPartition] = []
        for tp in partitions:
            meta = ctx.snapshot.partition(*tp)
            if meta is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif meta.leader != ctx.broker_id:
                remote.setdefault(meta.leader, []).append(tp)
            else:
                local.append(tp)
        codes = await asyncio.gather(*(write_marker(ctx, producer_id, producer_epoch, commit, coordinator_epoch, *tp)
                                       for tp in local))
        errors.update(zip(local, codes, strict=True))
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

