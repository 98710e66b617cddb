"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions and
ListTransactions: thin codecs around the transaction coordinator (metaq/broker/coordinator/txn_coordinator.py)
and the marker writer (metaq/broker/txn_markers.py); docs/transactions.md.

Clients of versions that predate PRODUCER_FENCED (AddPartitionsToTxn, AddOffsetsToTxn and EndTxn below v2,
TxnOffsetCommit below v3) get INVALID_PRODUCER_EPOCH instead, as Kafka's KafkaApis answers them. ACLs as
Kafka's: Write on the TransactionalId, Write on each topic added, Read on the group of offsets; Describe on
the TransactionalId to describe or list it.
"""

from __future__ import annotations

import asyncio
import logging

from metaq.broker.context import BrokerContext
from metaq.broker.txn_markers import write_marker
from metaq.errors import ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    ListTransactionsResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

ApTopic = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
ApPartition = ApTopic.AddPartitionsToTxnPartitionResult
TocTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
TocPartition = TocTopic.TxnOffsetCommitResponsePartition
WtmResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
WtmTopic = WtmResult.WritableTxnMarkerTopicResult
WtmPartition = WtmTopic.WritableTxnMarkerPartitionResult
DtState = DescribeTransactionsResponse.TransactionState
DtTopic = DtState.TopicData
LtState = ListTransactionsResponse.TransactionState


def _fenced(error: int, version: int, first_version: int) -> int:
    """PRODUCER_FENCED as INVALID_PRODUCER_EPOCH for versions before ``first_version``."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _transactions_error(ctx: BrokerContext, transactional_id: str) -> int:
    if ctx.transactions is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ctx.denied(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def add_partitions_to_txn(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    txn_id = request.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], int] = {}
    error = _transactions_error(ctx, txn_id)
    if not error:
        for topic, partition in wanted:
            if denied := ctx.denied(AclOperation.WRITE, ResourceType.TOPIC, topic):
                errors[(topic, partition)] = denied
            elif ctx.snapshot.partition(topic, partition) is None:
                errors[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:  # Kafka adds nothing then: the others are OPERATION_NOT_ATTEMPTED
            error = ErrorCode.OPERATION_NOT_ATTEMPTED
        else:
            assert ctx.transactions is not None
            error = await ctx.transactions.add_partitions(txn_id, request.v3_and_below_producer_id,
                                                          request.v3_and_below_producer_epoch, wanted)
    error = _fenced(error, version, 2)
    by_topic: dict[str, list[ApiStruct]] = {}
    for topic, partition in wanted:
        code = errors.get((topic, partition), error)
        by_topic.setdefault(topic, []).append(ApPartition(partition_index=partition, partition_error_code=code))
    return AddPartitionsToTxnResponse[version](
        throttle_time_ms=0, error_code=0, results_by_transaction=[],
        results_by_topic_v3_and_below=[ApTopic(name=t, results_by_partition=p) for t, p in by_topic.items()])


async def add_offsets_to_txn(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error = _transactions_error(ctx, request.transactional_id) \
        or ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id)
    if not error:
        assert ctx.transactions is not None
        await ctx.coordinator.find_coordinator(request.group_id, ctx.listener)  # __consumer_offsets exists now
        error = await ctx.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch,
            ctx.coordinator.offsets_partition_of(request.group_id))
    return AddOffsetsToTxnResponse[version](throttle_time_ms=0, error_code=_fenced(error, version, 2))


async def end_txn(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error = _transactions_error(ctx, request.transactional_id)
    if not error:
        assert ctx.transactions is not None
        error = await ctx.transactions.end_txn(request.transactional_id, request.producer_id,
                                               request.producer_epoch, bool(request.committed))
    return EndTxnResponse[version](throttle_time_ms=0, error_code=_fenced(error, version, 2),
                                   producer_id=-1, producer_epoch=-1)


async def txn_offset_commit(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    """Offsets appended to ``__consumer_offsets`` inside the producer's transaction: the group's at its commit
    marker, dropped at its abort marker (docs/transactions.md section 2)."""
    offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
               for t in request.topics for p in t.partitions}
    error = _transactions_error(ctx, request.transactional_id) \
        or ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id) \
        or ctx.coordinator.check(request.group_id)
    if not error and ctx.transactions is not None:
        error = ctx.transactions.verify(request.transactional_id, request.producer_id, request.producer_epoch)
    errors = dict.fromkeys(offsets, _fenced(error, version, 3))
    if not error:
        for tp in offsets:
            if denied := ctx.denied(AclOperation.READ, ResourceType.TOPIC, tp[0]):
                errors[tp] = denied
            elif ctx.snapshot.partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        staged = {tp: value for tp, value in offsets.items() if not errors[tp]}
        if staged:
            stored = await ctx.coordinator.commit_txn_offsets(request.group_id, request.producer_id,
                                                              request.producer_epoch, staged)
            errors.update({tp: _fenced(code, version, 3) for tp, code in stored.items()})
    by_topic: dict[str, list[ApiStruct]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(TocPartition(partition_index=partition, error_code=code))
    return TxnOffsetCommitResponse[version](throttle_time_ms=0,
                                            topics=[TocTopic(name=t, partitions=p) for t, p in by_topic.items()])


async def write_txn_markers(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    """A coordinator's markers for the partitions this broker leads (ClusterAction, as from brokers only)."""
    denied = ctx.denied(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    results = []
    for marker in request.markers:
        commit = bool(marker.transaction_result)
        topics = []
        for topic in marker.topics:
            indexes = list(topic.partition_indexes)
            codes = [denied] * len(indexes) if denied else await asyncio.gather(*(
                write_marker(ctx, marker.producer_id, marker.producer_epoch, commit, marker.coordinator_epoch,
                             topic.name, partition) for partition in indexes))
            topics.append(WtmTopic(name=topic.name, partitions=[
                WtmPartition(partition_index=p, error_code=c) for p, c in zip(indexes, codes, strict=True)]))
        results.append(WtmResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse[version](markers=results)


async def describe_transactions(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    """Each transactional id's state at its coordinator (Kafka's handleDescribeTransactions)."""
    states = []
    for txn_id in request.transactional_ids:
        error = ctx.denied(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id)
        txn = None
        if not error:
            if ctx.transactions is None:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                error, txn = await ctx.transactions.describe(txn_id)
        if txn is None:
            states.append(DtState(error_code=error, transactional_id=txn_id, transaction_state="",
                                  transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                  producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(DtState(error_code=ErrorCode.NONE, transactional_id=txn_id, transaction_state=txn.state,
                              transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
                              producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                              topics=[DtTopic(topic=t, partitions=p) for t, p in by_topic.items()]))
    return DescribeTransactionsResponse[version](throttle_time_ms=0, transaction_states=states)


async def list_transactions(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    """The transactions this broker coordinates that pass the request's filters, leaving out the ids the
    principal may not Describe (Kafka's handleListTransactionsRequest)."""
    if ctx.transactions is None:
        return ListTransactionsResponse[version](throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                 unknown_state_filters=[], transaction_states=[])
    duration = request.duration_filter if version >= 1 else -1
    unknown, found = await ctx.transactions.list_transactions(
        list(request.state_filters or []), set(request.producer_id_filters or []), duration)
    states = [LtState(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
              for t in found if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)]
    return ListTransactionsResponse[version](throttle_time_ms=0, error_code=ErrorCode.NONE,
                                             unknown_state_filters=unknown, transaction_states=states)
