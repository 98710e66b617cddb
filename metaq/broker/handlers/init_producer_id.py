"""InitProducerId v0..4, so that idempotent producers (Java's and kafka-python's default) can start.

Producer ids come from blocks claimed in ZooKeeper (metaq/broker/producer_ids.py), unique across the cluster;
every partition deduplicates and orders an idempotent producer's batches (metaq/broker/log/producer_state.py).
With a transactional id the transaction coordinator answers (metaq/broker/coordinator/txn_coordinator.py):
the id's producer id with its next epoch, fencing older instances (docs/transactions.md). From v3 (KIP-360) the
request may carry the producer id and epoch the client has: a transactional producer bumps its own epoch to
recover from an abortable error; an idempotent one simply gets a new producer id, as from Kafka. Versions
below 4 get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED, as Kafka's KafkaApis answers them.
"""

from __future__ import annotations

import logging

from metaq.broker.context import BrokerContext
from metaq.errors import ErrorCode, ZooKeeperError
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import InitProducerIdResponse
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    def answer(error: int, producer_id: int = -1, epoch: int = -1) -> ApiResponse:
        return InitProducerIdResponse[version](throttle_time_ms=0, error_code=error, producer_id=producer_id,
                                               producer_epoch=epoch)

    if request.transactional_id:
        if denied := ctx.denied(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return answer(denied)
        if ctx.transactions is None:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        expected = (request.producer_id, request.producer_epoch) if version >= 3 and request.producer_id >= 0 \
            else None
        result = await ctx.transactions.init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                                         expected)
        error = result.error_code
        if error == ErrorCode.PRODUCER_FENCED and version < 4:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return answer(error, result.producer_id, result.producer_epoch)
    # Kafka 2.8+ (KIP-679): IdempotentWrite on the cluster, or Write on some topic
    if not (ctx.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if ctx.producer_ids is None:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        producer_id = await ctx.producer_ids.next_id()
    except ZooKeeperError as e:  # retriable for the client: it asks again
        log.warning("InitProducerId: cannot claim a producer id block: %s", e)
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return answer(ErrorCode.NONE, producer_id, 0)
