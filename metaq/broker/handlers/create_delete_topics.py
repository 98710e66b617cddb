"""CreateTopics v0..7, DeleteTopics v0..6 and CreatePartitions v0..3, written to ZooKeeper as Kafka's admin
tools write them (``/brokers/topics``, ``/config/topics``, ``/admin/delete_topics``). Any broker answers them
(the controller only moves leaders); the brokers apply them through their watches (:mod:`metaq.broker.admin_watcher`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, NamedTuple, NoReturn, TypeVar

from metaq.broker.context import BrokerContext
from metaq.broker.topic_config import TOPIC_CONFIG_KEYS, default_value, validate_topic_config
from metaq.broker.topics import add_partitions, create_topic
from metaq.errors import (
    ConfigError,
    ErrorCode,
    InternalTopicError,
    MetaqError,
    TopicCollisionError,
    TopicExistsError,
    UnknownTopicError,
)
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import CreatePartitionsResponse, CreateTopicsResponse, DeleteTopicsResponse
from zk_layout import validate_topic
from zk_layout.acl_formats import CLUSTER_NAME, AclOperation, ResourceType
from zk_layout.topics import check_deletable

log = logging.getLogger(__name__)


MAX_WAIT_S = 30.0
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5


T = TypeVar("T")


class AdminError(MetaqError):
    """A topic-level refusal: the Kafka error code and the message sent back."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def require(ctx: BrokerContext, operation: AclOperation, resource_type: ResourceType,
            name: str = CLUSTER_NAME) -> None:
    """Refuse with Kafka's authorization error unless the principal may do ``operation`` on the resource."""
    if denied := ctx.denied(operation, resource_type, name):
        raise AdminError(denied, f"Authorization failed: {operation.kafka_name} on {resource_type.kafka_name} "
                                 f"{name} is not allowed for {ctx.principal}")


class Outcome(NamedTuple, Generic[T]):
    """One resource's part of an admin request: its error code and message, and its result when it worked."""

    error_code: int
    error_message: str | None
    result: T | None


async def attempt(what: str, work: Awaitable[T]) -> Outcome[T]:
    """``work``'s result with code 0, or the error code and message to answer with (a refusal, or a
    ZooKeeper/storage failure logged here); never an exception that closes the connection."""
    try:
        return Outcome(ErrorCode.NONE, None, await work)
    except AdminError as e:
        return Outcome(e.code, str(e), None)
    except MetaqError as e:
        log.warning("%s failed: %s", what, e)
        return Outcome(ErrorCode.UNKNOWN_SERVER_ERROR, str(e), None)


async def _wait_until(ctx: BrokerContext, check: Callable[[], bool], timeout_ms: int) -> bool:
    """Poll ``check`` (it may read ZooKeeper) until true or ``timeout_ms`` (capped) passes."""
    deadline = time.monotonic() + min(max(timeout_ms, 0) / 1000.0, MAX_WAIT_S)
    while True:
        if await ctx.in_thread(check):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)


def _check_name(topic: str) -> None:
    try:
        validate_topic(topic)
    except ConfigError as e:
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)) from e


def _check_replicas(ctx: BrokerContext, replicas: list[int], where: str) -> None:
    live = ctx.snapshot.brokers
    if not replicas or len(set(replicas)) != len(replicas):
        raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"{where}: replicas {replicas} must be distinct broker ids (at least one)")
    for broker_id in replicas:
        if broker_id not in live:
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where}: broker {broker_id} is not a live broker")


class PartitionBudget:
    """The partitions one CreateTopics/CreatePartitions request may still add: at most
    ``metaq.max.partitions.per.request`` in all, and what ``metaq.max.partitions`` leaves of the cluster's.
    Charged before anything is planned or allocated, so a count of 2^31-1 costs nothing."""

    def __init__(self, ctx: BrokerContext) -> None:
        self._per_request = ctx.config.max_partitions_per_request
        self._cluster_max = ctx.config.max_partitions
        self._cluster_used = sum(len(parts) for parts in ctx.snapshot.topics.values())
        self._request_used = 0

    def charge(self, partitions: int) -> None:
        if self._request_used + partitions > self._per_request:
            raise AdminError(ErrorCode.POLICY_VIOLATION, f"{partitions} partitions would exceed the"
                             f" {self._per_request} partitions one request may add"
                             f" (metaq.max.partitions.per.request)")
        if self._cluster_used + partitions > self._cluster_max:
            raise AdminError(ErrorCode.POLICY_VIOLATION, f"{partitions} partitions would exceed the"
                             f" {self._cluster_max} partitions of the cluster (metaq.max.partitions; it has"
                             f" {self._cluster_used})")
        self._request_used += partitions
        self._cluster_used += partitions


# ------------------------------------------------------------------------------------------ CreateTopics


@dataclass(frozen=True)
class TopicPlan:
    """What one CreatableTopic asks for, checked."""

    partitions: int
    replication_factor: int
    assignment: dict[int, list[int]] | None
    """The explicit replica assignment, or None to compute one."""
    config: dict[str, str]
    """The config overrides."""


def _plan_topic(ctx: BrokerContext, topic: ApiStruct, budget: PartitionBudget) -> TopicPlan:
    """The plan of one CreatableTopic, or AdminError."""
    assignment = None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise AdminError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and"
                             " replicasAssignments were set. Both cannot be used at the same time.")
        budget.charge(len(topic.assignments))
        assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        if sorted(assignment) != list(range(len(assignment))):
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"partitions must be 0..n-1, got {sorted(assignment)}")
        for partition, replicas in assignment.items():
            _check_replicas(ctx, replicas, f"partition {partition}")
        partitions = len(assignment)
        factor = len(assignment[0])
    else:
        partitions = ctx.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if partitions <= 0:
            raise AdminError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        budget.charge(partitions)
        factor = ctx.config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        live = len(ctx.snapshot.brokers)
        if factor <= 0:
            raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if factor > live:
            raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {factor} larger than available brokers: {live}.")
    try:
        config = validate_topic_config({c.name: c.value for c in topic.configs})
    except ConfigError as e:
        raise AdminError(ErrorCode.INVALID_CONFIG, str(e)) from e
    return TopicPlan(partitions, factor, assignment, config)


async def _create_one(
    ctx: BrokerContext, topic: ApiStruct, validate_only: bool, timeout_ms: int, budget: PartitionBudget
) -> TopicPlan:
    if not ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER):
        require(ctx, AclOperation.CREATE, ResourceType.TOPIC, topic.name)
    _check_name(topic.name)
    if topic.name in await ctx.in_thread(ctx.layout.topics_marked_for_deletion):
        raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' is marked for deletion.")
    if topic.name in ctx.snapshot.topics or await ctx.in_thread(ctx.layout.topic_assignment, topic.name) is not None:
        raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
    plan = _plan_topic(ctx, topic, budget)
    if validate_only:
        return plan
    try:
        await ctx.in_thread(lambda: create_topic(ctx.layout, topic.name, plan.partitions, config=plan.config,
                                                 assignment=plan.assignment,
                                                 replication_factor=plan.replication_factor))
    except TopicExistsError as e:
        raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.") from e
    except TopicCollisionError as e:
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)) from e
    ctx.metadata.request_reload()
    await _wait_until(ctx, lambda: ctx.snapshot.has_leaders(topic.name), timeout_ms)
    return plan


async def _refuse(code: int, message: str) -> NoReturn:
    raise AdminError(code, message)


async def create_topics(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    Result = CreateTopicsResponse.CreatableTopicResult
    validate_only = bool(version >= 1 and request.validate_only)
    names = [t.name for t in request.topics]
    budget = PartitionBudget(ctx)
    results = []
    for topic in request.topics:
        work: Awaitable[TopicPlan]
        if names.count(topic.name) > 1:
            work = _refuse(ErrorCode.INVALID_REQUEST, f"Create topics request from client contains a duplicate topic"
                                            f" {topic.name}")
        else:
            work = _create_one(ctx, topic, validate_only, request.timeout_ms, budget)
        code, message, created = await attempt(f"CreateTopics {topic.name}", work)
        fields: dict[str, object] = {"name": topic.name, "error_code": code, "error_message": message}
        if created is not None and version >= 5:
            config = created.config
            base = ctx.config.log_config()
            fields.update(num_partitions=created.partitions, replication_factor=created.replication_factor, configs=[
                Result.CreatableTopicConfigs(
                    name=name, value=config.get(name, default_value(base, name)), read_only=False,
                    config_source=DYNAMIC_TOPIC_CONFIG if name in config else DEFAULT_CONFIG,
                    is_sensitive=False)
                for name in TOPIC_CONFIG_KEYS])
        if version < 1:
            fields.pop("error_message")
        results.append(Result(**fields))
    return CreateTopicsResponse[version](throttle_time_ms=0, topics=results)


# ------------------------------------------------------------------------------------------ DeleteTopics


async def _delete_one(ctx: BrokerContext, topic: str, timeout_ms: int) -> None:
    require(ctx, AclOperation.DELETE, ResourceType.TOPIC, topic)
    try:
        check_deletable(topic)
    except InternalTopicError as e:
        raise AdminError(ErrorCode.INVALID_REQUEST, str(e)) from e
    _check_name(topic)
    if await ctx.in_thread(ctx.layout.topic_assignment, topic) is None:
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    await ctx.in_thread(ctx.layout.mark_topic_for_deletion, topic)
    ctx.metadata.request_reload()
    log.info("topic %s marked for deletion", topic)
    if timeout_ms <= 0:
        return

    def gone() -> bool:
        return ctx.layout.topic_assignment(topic) is None and topic not in ctx.layout.topics_marked_for_deletion()

    if not await _wait_until(ctx, gone, timeout_ms):
        raise AdminError(ErrorCode.REQUEST_TIMED_OUT, f"topic {topic} is marked for deletion, but the brokers"
                         f" hosting its partitions have not deleted them within {timeout_ms} ms")


async def delete_topics(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    Result = DeleteTopicsResponse.DeletableTopicResult
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        work: Awaitable[None] = (_refuse(ErrorCode.UNKNOWN_TOPIC_ID, "metaq deletes topics by name only")
                                 if name is None else _delete_one(ctx, name, request.timeout_ms))
        code, message, _ = await attempt(f"DeleteTopics {name}", work)
        fields: dict[str, object] = {"name": name, "error_code": code}
        if version >= 5:
            fields["error_message"] = message
        if version >= 6 and topic_id is not None:
            fields["topic_id"] = topic_id
        results.append(Result(**fields))
    return DeleteTopicsResponse[version](throttle_time_ms=0, responses=results)


# ------------------------------------------------------------------------------------------ CreatePartitions


async def _add_one(ctx: BrokerContext, topic: ApiStruct, validate_only: bool, timeout_ms: int,
                   budget: PartitionBudget) -> None:
    require(ctx, AclOperation.ALTER, ResourceType.TOPIC, topic.name)
    current = ctx.snapshot.topics.get(topic.name)
    if current is None:
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic.name}' does not exist.")
    if topic.count > len(current):
        budget.charge(topic.count - len(current))
    new = None
    if topic.assignments is not None:
        new = [list(a.broker_ids) for a in topic.assignments]
        if len(new) != topic.count - len(current):
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Increasing the number of partitions by"
                                                         f" {topic.count - len(current)} but {len(new)} assignments"
                                                         f" provided.")
        for i, replicas in enumerate(new):
            _check_replicas(ctx, replicas, f"new partition {len(current) + i}")
    if topic.count <= len(current):
        raise AdminError(ErrorCode.INVALID_PARTITIONS, f"Topic currently has {len(current)} partitions, which is higher"
                                             f" than the requested {topic.count}." if topic.count < len(current)
                         else f"Topic already has {len(current)} partitions.")
    if validate_only:
        return
    try:
        await ctx.in_thread(add_partitions, ctx.layout, topic.name, topic.count, new)
    except UnknownTopicError as e:
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(e)) from e
    except ConfigError as e:
        raise AdminError(ErrorCode.INVALID_PARTITIONS, str(e)) from e
    ctx.metadata.request_reload()
    await _wait_until(ctx, lambda: len(ctx.snapshot.topics.get(topic.name, {})) >= topic.count
                      and ctx.snapshot.has_leaders(topic.name), timeout_ms)


async def create_partitions(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    budget = PartitionBudget(ctx)
    results = []
    for topic in request.topics:
        code, message, _ = await attempt(f"CreatePartitions {topic.name}",
                                         _add_one(ctx, topic, bool(request.validate_only), request.timeout_ms,
                                                  budget))
        results.append(Result(name=topic.name, error_code=code, error_message=message))
    return CreatePartitionsResponse[version](throttle_time_ms=0, results=results)
