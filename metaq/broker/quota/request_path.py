"""Where client quotas meet a request: :func:`serve` runs a request's handler, counts its cost for the
client (metaq/broker/quota/throttling.py) and answers the response (with ``throttle_time_ms`` set) and the
:class:`Throttle` the network layer applies. See docs/quotas.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from metaq.broker.quota.throttling import NO_THROTTLE, Caller, Quotas, Throttle, TimedSteps, client_throttles, now_ms
from metaq.broker.response import Encoded, Handler, ProduceReply, Response
from metaq.broker.zero_copy import FetchReply
from metaq.protocol.apis import ApiKey
from metaq.protocol.fetch_response import TopicPart
from metaq.protocol.messages import ApiRequest

if TYPE_CHECKING:
    from metaq.broker.context import BrokerContext

log = logging.getLogger(__name__)


def is_replica_fetch(api_key: ApiKey, request: ApiRequest) -> bool:
    """A follower's fetch: replication throttles govern it, not client quotas."""
    return api_key == ApiKey.FETCH and getattr(request, "replica_id", -1) >= 0


async def serve(ctx: BrokerContext, handler: Handler, api_key: ApiKey, request: ApiRequest, version: int,
                request_bytes: int) -> tuple[Response | None, Throttle]:
    """The handler's answer and the request's throttle (:data:`NO_THROTTLE` when no quota is exceeded)."""
    quotas = ctx.quotas
    if quotas is None or is_replica_fetch(api_key, request):
        return await handler(ctx, request, version), NO_THROTTLE
    caller = Caller.of(ctx.principal, request.header.client_id)
    if quotas.request.enabled:  # the handler's running time counts (measured only when a quota needs it)
        timed = TimedSteps(handler(ctx, request, version))
        response = await timed
        handler_ns = timed.ns
    else:
        response, handler_ns = await handler(ctx, request, version), 0
    now = now_ms()
    request_ms = 0 if _request_exempt(api_key, request) else _request_time(quotas, caller, handler_ns, now)
    bandwidth_ms = 0
    if api_key == ApiKey.PRODUCE:
        bandwidth_ms = quotas.produced(caller, request_bytes, now)
    elif api_key == ApiKey.FETCH and isinstance(response, FetchReply):
        response, bandwidth_ms = _fetch_quota(quotas, caller, response, request_ms, now)
    throttle_ms = max(request_ms, bandwidth_ms)
    if throttle_ms <= 0:
        return response, NO_THROTTLE
    _set_throttle_time(response, throttle_ms)
    log.debug("throttling %s (%s v%d) for %d ms", caller, api_key.name, version, throttle_ms)
    return response, Throttle(throttle_ms, client_throttles(api_key, version))


def fetch_budget(ctx: BrokerContext, request: ApiRequest, budget: int) -> int:
    """A consumer's fetch asks for no more than its fetch quota allows in one window (Kafka's
    ``getMaxValueInQuotaWindow`` cap on ``fetchMaxBytes``): a larger answer would always be throttled."""
    quotas = ctx.quotas
    if quotas is None or getattr(request, "replica_id", -1) >= 0 or not quotas.fetch.enabled:
        return budget
    caller = Caller.of(ctx.principal, request.header.client_id)
    cap = quotas.fetch.max_value_in_window(caller.user, caller.client_id)
    return budget if cap is None else min(budget, int(cap))


def _request_exempt(api_key: ApiKey, request: ApiRequest) -> bool:
    """acks=0 produce is exempt from the request quota, as in Kafka (its channel may still be throttled for
    bandwidth)."""
    return api_key == ApiKey.PRODUCE and getattr(request, "acks", -1) == 0


def _request_time(quotas: Quotas, caller: Caller, handler_ns: int, now: int) -> int:
    return quotas.request_time(caller, handler_ns, now) if quotas.request.enabled else 0


def _fetch_quota(quotas: Quotas, caller: Caller, reply: FetchReply, request_ms: int,
                 now: int) -> tuple[FetchReply, int]:
    """Count a consumer fetch's record bytes; a throttled one answers no partitions and its bytes are taken
    back (Kafka's ``getThrottledResponse`` and ``unrecordQuotaSensor``)."""
    if not quotas.fetch.enabled:
        return reply, 0
    size = fetch_record_bytes(reply.topics)
    bandwidth_ms = quotas.fetched(caller, size, now)
    if max(bandwidth_ms, request_ms) > 0:
        quotas.fetch.unrecord(caller.user, caller.client_id, size, now)
        return FetchReply(reply.version, []), bandwidth_ms
    return reply, bandwidth_ms


def fetch_record_bytes(topics: list[TopicPart]) -> int:
    """The record bytes an answer carries (the size Kafka's fetch quota counts)."""
    total = 0
    for topic in topics:
        for part in topic.partitions:
            records = part.records
            if records is not None:
                total += len(records) if isinstance(records, bytes) else records.size
    return total


def _set_throttle_time(response: Response | None, throttle_ms: int) -> None:
    """Report the throttle in the answer's ``throttle_time_ms`` (versions without the field do not encode it)."""
    if isinstance(response, FetchReply | ProduceReply):
        response.throttle_time_ms = throttle_ms
    elif isinstance(response, Encoded) and hasattr(response.message, "throttle_time_ms"):
        setattr(response.message, "throttle_time_ms", throttle_ms)  # noqa: B010 (not part of the Protocol)
