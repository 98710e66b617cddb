"""DescribeConfigs v0..4, AlterConfigs v0..2 and IncrementalAlterConfigs v0..1.

Topic configs live in ``/config/topics/<t>`` (Kafka's format) and every change is announced under
``/config/changes`` so each broker applies it to its logs (:mod:`metaq.broker.admin_watcher`). Broker configs
come from the broker's properties file: they are described, read-only, but for the replication throttle rates,
which are dynamic as in Kafka (``/config/brokers/<id>``, announced the same way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from metaq.broker.context import BrokerContext
from metaq.broker.handlers.create_delete_topics import AdminError, attempt, require
from metaq.broker.quota.replication import FOLLOWER_RATE, LEADER_RATE
from metaq.broker.topic_config import (
    LIST_KEYS,
    TOPIC_CONFIG_KEYS,
    broker_property,
    config_properties,
    default_value,
    validate_topic_config,
)
from metaq.errors import ConfigError, ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct, StructClass
from metaq.protocol.responses import AlterConfigsResponse, DescribeConfigsResponse, IncrementalAlterConfigsResponse
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

TOPIC = 2
BROKER = 4

# DescribeConfigs config sources
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# Kafka's ConfigDef.Type as sent in DescribeConfigs v3+
_CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "REPLICAS": 7}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DEFAULT_BROKER = "<default>"
# the dynamic broker configs metaq applies (metaq/broker/quota/replication.py); Kafka's tools also delete
# replica.alter.log.dirs.io.max.bytes.per.second, which metaq does not have (its log directory moves are not throttled)
DYNAMIC_BROKER_KEYS = (LEADER_RATE, FOLLOWER_RATE)
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"

Entry = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


# ------------------------------------------------------------------------------------------ describe


def _entry(version: int, synonyms: bool, name: str, value: str | None, source: int, read_only: bool,
           config_type: str, synonym_list: list[tuple[str, str | None, int]]) -> ApiStruct:
    fields: dict[str, object] = {"name": name, "value": value, "read_only": read_only, "is_sensitive": False}
    if version == 0:
        fields["is_default"] = source == DEFAULT_CONFIG
    else:
        fields["config_source"] = source
        fields["synonyms"] = [Synonym(name=n, value=v, source=s) for n, v, s in synonym_list] if synonyms else []
    if version >= 3:
        fields["config_type"] = _CONFIG_TYPES.get(config_type, 0)
        fields["documentation"] = None
    return Entry(**fields)


async def _describe_topic(ctx: BrokerContext, name: str, keys: list[str] | None, version: int,
                          synonyms: bool) -> list[ApiStruct]:
    if name not in ctx.snapshot.topics:
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
    stored = await ctx.in_thread(ctx.layout.topic_config, name)
    overrides = stored.config if stored is not None else {}
    base = ctx.config.log_config()
    entries = []
    for key in TOPIC_CONFIG_KEYS.values():
        if keys is not None and key.name not in keys:
            continue
        default = default_value(base, key.name)
        chain: list[tuple[str, str | None, int]] = [(broker_property(key.name) or key.name, default, DEFAULT_CONFIG)]
        if key.name in overrides:
            value, source = overrides[key.name], DYNAMIC_TOPIC_CONFIG
            chain.insert(0, (key.name, value, DYNAMIC_TOPIC_CONFIG))
        else:
            value, source = default, DEFAULT_CONFIG
        entries.append(_entry(version, synonyms, key.name, value, source, False, key.kind, chain))
    return entries


def _describe_broker(ctx: BrokerContext, name: str, keys: list[str] | None, version: int,
                     synonyms: bool) -> list[ApiStruct]:
    if name not in ("", str(ctx.broker_id)):
        raise AdminError(ErrorCode.INVALID_REQUEST, f"broker {name}'s configs are described by broker {name}, this is"
                                          f" broker {ctx.broker_id}")
    entries = []
    for key, value in config_properties(ctx.config).items():
        if keys is not None and key not in keys:
            continue
        sensitive = "password" in key
        entries.append(_entry(version, synonyms, key, None if sensitive else value, STATIC_BROKER_CONFIG, True,
                              "STRING", [(key, value, STATIC_BROKER_CONFIG)]))
    return entries


async def _describe(ctx: BrokerContext, resource: ApiStruct, keys: list[str] | None, version: int,
                    synonyms: bool) -> list[ApiStruct]:
    if resource.resource_type == TOPIC:
        require(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, resource.resource_name)
        return await _describe_topic(ctx, resource.resource_name, keys, version, synonyms)
    if resource.resource_type == BROKER:
        require(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
        return _describe_broker(ctx, resource.resource_name, keys, version, synonyms)
    raise AdminError(ErrorCode.INVALID_REQUEST, f"metaq describes topic and broker configs, not resource type"
                                      f" {resource.resource_type}")


async def describe_configs(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    Result = DescribeConfigsResponse.DescribeConfigsResult
    synonyms = bool(version >= 1 and request.include_synonyms)
    results = []
    for resource in request.resources:
        keys = list(resource.configuration_keys) if resource.configuration_keys is not None else None
        code, message, configs = await attempt(f"DescribeConfigs {resource.resource_name}",
                                               _describe(ctx, resource, keys, version, synonyms))
        results.append(Result(error_code=code, error_message=message, resource_type=resource.resource_type,
                              resource_name=resource.resource_name, configs=configs or []))
    return DescribeConfigsResponse[version](throttle_time_ms=0, results=results)


# ------------------------------------------------------------------------------------------ alter


def _incremental(current: dict[str, str], ops: list[ApiStruct], known: Collection[str] = TOPIC_CONFIG_KEYS,
                 what: str = "topic") -> dict[str, str]:
    """Kafka's IncrementalAlterConfigs semantics on a topic's overrides or a broker's dynamic configs."""
    result = dict(current)
    names = [op.name for op in ops]
    for op in ops:
        if names.count(op.name) > 1:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {op.name}")
        if op.name not in known:
            raise AdminError(ErrorCode.INVALID_CONFIG, f"Unknown {what} config name: {op.name}")
        operation = op.config_operation
        if operation == SET:
            result[op.name] = op.value
        elif operation == DELETE:
            result.pop(op.name, None)
        elif operation in (APPEND, SUBTRACT):
            if op.name not in LIST_KEYS:
                raise AdminError(ErrorCode.INVALID_CONFIG, f"Config value append/subtract is not allowed for config key"
                                                 f" {op.name}")
            items = [v for v in result.get(op.name, "delete").split(",") if v]
            given = [v.strip() for v in (op.value or "").split(",") if v.strip()]
            if operation == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            result[op.name] = ",".join(items)
        else:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {op.name}")
    return result


async def _alter(ctx: BrokerContext, resource: ApiStruct, validate_only: bool,
                 change: Callable[[dict[str, str]], dict[str, str]]) -> None:
    if resource.resource_type == BROKER:
        await _alter_broker(ctx, resource.resource_name, validate_only, change)
        return
    if resource.resource_type != TOPIC:
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"metaq alters topic configs, not resource type {resource.resource_type}")
    topic = resource.resource_name
    require(ctx, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, topic)
    if topic not in ctx.snapshot.topics:
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {topic} does not exist")
    stored = await ctx.in_thread(ctx.layout.topic_config, topic)
    try:
        new = validate_topic_config(change(dict(stored.config) if stored is not None else {}))
    except ConfigError as e:
        raise AdminError(ErrorCode.INVALID_CONFIG, str(e)) from e
    if validate_only:
        return
    await ctx.in_thread(ctx.layout.set_topic_config, topic, new)
    log.info("topic %s: config set to %s", topic, new)


async def _alter_broker(ctx: BrokerContext, name: str, validate_only: bool,
                        change: Callable[[dict[str, str]], dict[str, str]]) -> None:
    """A broker's dynamic configs (``/config/brokers/<id>``, ``<default>`` for the name ""): the replication
    throttle rates only (docs/quotas.md), as Kafka's ``ZkAdminManager`` writes them with
    ``AdminZkClient.changeBrokerConfig``; every other broker config is read-only (the properties file)."""
    require(ctx, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)
    if name not in ("", str(ctx.broker_id)):
        raise AdminError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.broker_id} or empty string, "
                                                    f"but received {name}")
    node = name or DEFAULT_BROKER
    new = change(await ctx.in_thread(ctx.layout.broker_config, node))
    for key, value in new.items():
        if key not in DYNAMIC_BROKER_KEYS:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"{key} is read-only in metaq: set it in the broker's "
                                                        f"properties file and restart it (dynamic broker configs: "
                                                        f"{', '.join(DYNAMIC_BROKER_KEYS)})")
        if not value.strip().isdigit():
            raise AdminError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}: "
                                                       f"a whole number of bytes per second is required")
    if validate_only:
        return
    await ctx.in_thread(ctx.layout.set_broker_config, node, new)
    log.info("broker %s: dynamic config set to %s", node, new)


async def _alter_all(ctx: BrokerContext, request: ApiRequest, result_cls: StructClass,
                     change_of: Callable[[ApiStruct], Callable[[dict[str, str]], dict[str, str]]]) -> list[ApiStruct]:
    results = []
    for resource in request.resources:
        code, message, _ = await attempt(f"altering the configs of {resource.resource_name}",
                                         _alter(ctx, resource, bool(request.validate_only), change_of(resource)))
        results.append(result_cls(error_code=code, error_message=message, resource_type=resource.resource_type,
                                  resource_name=resource.resource_name))
    return results


async def alter_configs(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    """AlterConfigs replaces the whole set of overrides: keys left out return to their defaults."""
    def change_of(resource: ApiStruct) -> Callable[[dict[str, str]], dict[str, str]]:
        names = [c.name for c in resource.configs]
        duplicate = next((n for n in names if names.count(n) > 1), None)

        def replace(_: dict[str, str]) -> dict[str, str]:
            if duplicate is not None:
                raise AdminError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {duplicate}")
            return {c.name: c.value for c in resource.configs}
        return replace

    results = await _alter_all(ctx, request, AlterConfigsResponse.AlterConfigsResourceResponse, change_of)
    return AlterConfigsResponse[version](throttle_time_ms=0, responses=results)


async def incremental_alter_configs(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    def change_of(resource: ApiStruct) -> Callable[[dict[str, str]], dict[str, str]]:
        if resource.resource_type == BROKER:  # a removed key outside the dynamic ones is nothing to remove
            return lambda current: _incremental(current, list(resource.configs),
                                                set(DYNAMIC_BROKER_KEYS) | {LOG_DIR_RATE}, "dynamic broker")
        return lambda current: _incremental(current, list(resource.configs), TOPIC_CONFIG_KEYS, "topic")

    results = await _alter_all(ctx, request, IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
                               change_of)
    return IncrementalAlterConfigsResponse[version](throttle_time_ms=0, responses=results)
