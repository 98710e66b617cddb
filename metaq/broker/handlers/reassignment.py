"""ElectLeaders (43) v0..2, AlterPartitionReassignments (45) v0 and ListPartitionReassignments (46) v0.

Kafka's clients send these to the controller (the ``controller_id`` of Metadata); in ZooKeeper mode Kafka's
``KafkaApis`` hands them to ``KafkaController``, and a broker that is not the controller answers NOT_CONTROLLER
(the client looks the controller up again and retries). metaq does the same: the work is the controller's
(:class:`metaq.broker.replication.controller.Controller`), run in a worker thread since it reads and writes
ZooKeeper. The steps of a reassignment are in docs/reassignment.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from metaq.broker.context import BrokerContext
from metaq.broker.replication.controller_results import NotControllerError, PartitionResult
from metaq.errors import ErrorCode, MetaqError
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import (
    AlterPartitionReassignmentsResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
)
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
TopicPartition = tuple[str, int]
UNCLEAN = 1  # ElectLeaders' election_type: 0 preferred, 1 unclean

ElectionResult = ElectLeadersResponse.ReplicaElectionResult
ElectionPartition = ElectionResult.PartitionResult
AlterTopic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
AlterPartition = AlterTopic.ReassignablePartitionResponse
OngoingTopic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
OngoingPartition = OngoingTopic.OngoingPartitionReassignment


async def _on_controller(ctx: BrokerContext, work: Callable[[], T]) -> T | int:
    """``work``'s result, or the error code to answer with (NOT_CONTROLLER, or a ZooKeeper failure)."""
    if ctx.controller is None:
        return ErrorCode.NOT_CONTROLLER
    try:
        return await asyncio.to_thread(work)
    except NotControllerError:
        return ErrorCode.NOT_CONTROLLER
    except MetaqError as e:
        log.warning("controller request failed: %s", e)
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _by_topic(results: dict[TopicPartition, R]) -> dict[str, list[tuple[int, R]]]:
    grouped: dict[str, list[tuple[int, R]]] = {}
    for (topic, partition), result in sorted(results.items()):
        grouped.setdefault(topic, []).append((partition, result))
    return grouped


async def elect_leaders(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    wanted = (None if request.topic_partitions is None
              else [(t.topic, p) for t in request.topic_partitions for p in t.partitions])
    unclean = version >= 1 and request.election_type == UNCLEAN
    top: dict[str, int] = {"error_code": 0} if version >= 1 else {}
    if denied := ctx.denied(AclOperation.ALTER, ResourceType.CLUSTER):
        results: dict[TopicPartition, PartitionResult] = {key: PartitionResult(denied) for key in wanted or ()}
        top = {"error_code": denied} if version >= 1 else {}
    else:
        controller = ctx.controller
        outcome = await _on_controller(ctx, lambda: controller.elect_leaders(wanted, unclean=unclean)
                                       if controller is not None else {})
        if isinstance(outcome, int):
            results = {key: PartitionResult(outcome) for key in wanted or ()}
        else:
            results = outcome
            if wanted is None:  # all partitions: only those elected or failed are answered (Kafka's KafkaApis)
                results = {k: r for k, r in results.items() if r.error != ErrorCode.ELECTION_NOT_NEEDED}
    return ElectLeadersResponse[version](throttle_time_ms=0, replica_election_results=[
        ElectionResult(topic=topic, partition_result=[
            ElectionPartition(partition_id=p, error_code=r.error, error_message=r.message) for p, r in parts])
        for topic, parts in _by_topic(results).items()], **top)


async def alter_partition_reassignments(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    if denied := ctx.denied(AclOperation.ALTER, ResourceType.CLUSTER):
        return AlterPartitionReassignmentsResponse[version](
            throttle_time_ms=0, error_code=denied, error_message=None, responses=[])
    wanted: dict[TopicPartition, tuple[int, ...] | None] = {
        (t.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
        for t in request.topics for p in t.partitions}
    controller = ctx.controller
    outcome = await _on_controller(ctx, lambda: controller.alter_reassignments(wanted)
                                   if controller is not None else {})
    if isinstance(outcome, int):
        return AlterPartitionReassignmentsResponse[version](
            throttle_time_ms=0, error_code=outcome, error_message=None, responses=[])
    return AlterPartitionReassignmentsResponse[version](
        throttle_time_ms=0, error_code=0, error_message=None, responses=[
            AlterTopic(name=topic, partitions=[
                AlterPartition(partition_index=p, error_code=r.error, error_message=r.message) for p, r in parts])
            for topic, parts in _by_topic(outcome).items()])


async def list_partition_reassignments(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    if denied := ctx.denied(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return ListPartitionReassignmentsResponse[version](
            throttle_time_ms=0, error_code=denied, error_message=None, topics=[])
    wanted = (None if request.topics is None
              else [(t.name, p) for t in request.topics for p in t.partition_indexes])
    controller = ctx.controller
    outcome = await _on_controller(ctx, lambda: controller.list_reassignments(wanted)
                                   if controller is not None else {})
    if isinstance(outcome, int):
        return ListPartitionReassignmentsResponse[version](
            throttle_time_ms=0, error_code=outcome, error_message=None, topics=[])
    return ListPartitionReassignmentsResponse[version](
        throttle_time_ms=0, error_code=0, error_message=None, topics=[
            OngoingTopic(name=topic, partitions=[
                OngoingPartition(partition_index=p, replicas=list(a.replicas), adding_replicas=list(a.adding),
                                 removing_replicas=list(a.removing)) for p, a in parts])
            for topic, parts in _by_topic(outcome).items()])
