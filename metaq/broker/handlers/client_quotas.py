"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0..1: client quota entities in ZooKeeper, as
Kafka's ZooKeeper-mode broker serves them (metaq/broker/quota/admin.py, docs/quotas.md). Describing needs
DescribeConfigs on the cluster, altering AlterConfigs on the cluster (Kafka's KafkaApis)."""

from __future__ import annotations

import logging

from metaq.broker.context import BrokerContext
from metaq.broker.quota.admin import FilterComponent, QuotaOp, apply_ops, describe, entity_of, entity_parts
from metaq.errors import BrokerResponseError, ConfigError, ErrorCode, InvalidRequestError, MetaqError
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct, ResponseClass
from metaq.protocol.responses import AlterClientQuotasResponse, DescribeClientQuotasResponse
from zk_layout.acl_formats import AclOperation, ResourceType
from zk_layout.quotas import ClientQuotaEntity

log = logging.getLogger(__name__)


async def describe_client_quotas(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    family = DescribeClientQuotasResponse[version]
    denied = ctx.denied(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
    if denied:
        return family(throttle_time_ms=0, error_code=denied, error_message="not authorized", entries=None)
    components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        stored = await ctx.in_thread(ctx.layout.client_quota_entities)
        found = describe(stored, components, request.strict)
    except InvalidRequestError as e:
        return family(throttle_time_ms=0, error_code=e.code, error_message=str(e), entries=None)
    ordered = sorted(found.items(), key=lambda item: item[0].sort_key)
    entries = [_entry(family, entity, values) for entity, values in ordered]
    return family(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


def _entry(family: ResponseClass, entity: ClientQuotaEntity, values: dict[str, float]) -> ApiStruct:
    entry = family.EntryData
    return entry(entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity_parts(entity)],
                 values=[entry.ValueData(key=k, value=v) for k, v in sorted(values.items())])


async def alter_client_quotas(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    family = AlterClientQuotasResponse[version]
    entry_data = family.EntryData
    denied = ctx.denied(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)
    results = []
    for entry in request.entries:
        code, message = denied, "not authorized" if denied else None
        if not denied:
            code, message = await _alter(ctx, entry, request.validate_only)
        results.append(entry_data(
            error_code=code, error_message=message,
            entity=[entry_data.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity]))
    return family(throttle_time_ms=0, entries=results)


async def _alter(ctx: BrokerContext, entry: ApiStruct, validate_only: bool) -> tuple[int, str | None]:
    """One entity's alteration: (error code, message)."""
    try:
        entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
        ops = [QuotaOp(op.key, None if op.remove else op.value) for op in entry.ops]
        current = await ctx.in_thread(ctx.layout.client_quota_config, entity) or {}
        updated = apply_ops(current, ops)
        if not validate_only and updated != current:
            await ctx.in_thread(ctx.layout.set_client_quota_config, entity, updated)
            log.info("client quotas of %s set to %s", entity, {k: v for k, v in updated.items() if "SCRAM" not in k})
    except ConfigError as e:  # a name that cannot be a node
        return ErrorCode.INVALID_REQUEST, str(e)
    except BrokerResponseError as e:
        return e.code, str(e)
    except MetaqError as e:
        log.warning("altering client quotas failed: %s", e)
        return ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
    return ErrorCode.NONE, None
