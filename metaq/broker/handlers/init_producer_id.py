"""InitProducerId v0..1, so that idempotent producers (kafka-python's default) can start.

metaq stores the producer id and sequence fields of batches as sent but does not deduplicate; ids are
unique per broker start (time-based high bits, a counter below). Transactions are not supported: a
transactional id is refused with the error every client treats as fatal (see handlers/groups.py).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from kafka.protocol.producer import InitProducerIdResponse

from metaq.broker.context import BrokerContext
from metaq.errors import ErrorCode
from zk_layout.acl_formats import AclOperation, ResourceType

_ids = itertools.count((int(time.time() * 1000) & 0x3FFFFFFFFFF) << 20)


async def handle(ctx: BrokerContext, request: Any, version: int) -> Any:
    if request.transactional_id:
        return InitProducerIdResponse[version](
            throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1, producer_epoch=-1)
    # Kafka 2.8+ (KIP-679): IdempotentWrite on the cluster, or Write on some topic
    if not (ctx.authorize(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return InitProducerIdResponse[version](
            throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse[version](throttle_time_ms=0, error_code=0, producer_id=next(_ids),
                                           producer_epoch=0)
