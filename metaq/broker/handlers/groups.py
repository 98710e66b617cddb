"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup: thin codecs around GroupCoordinator."""

from __future__ import annotations

from metaq.broker.context import BrokerContext
from metaq.errors import ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import (
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from zk_layout.acl_formats import AclOperation, ResourceType

GROUP_KEY, TRANSACTION_KEY = 0, 1


async def find_coordinator(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    key_type = request.key_type if version >= 1 else GROUP_KEY
    if key_type == TRANSACTION_KEY:  # the transaction coordinator (docs/transactions.md)
        error = ctx.denied(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, request.key)
        node_id, host, port = -1, "", -1
        if not error:
            if ctx.transactions is None:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                error, node_id, host, port = await ctx.transactions.find_coordinator(request.key, ctx.listener)
        return FindCoordinatorResponse[version](throttle_time_ms=0, error_code=error, error_message=None,
                                                node_id=node_id, host=host, port=port)
    if key_type != GROUP_KEY:
        return FindCoordinatorResponse[version](
            throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"unknown coordinator key type {request.key_type}", node_id=-1, host="", port=-1)
    if denied := ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, request.key):
        return FindCoordinatorResponse[version](throttle_time_ms=0, error_code=denied, error_message=None,
                                                node_id=-1, host="", port=-1)
    found = await ctx.coordinator.find_coordinator(request.key, ctx.listener)
    return FindCoordinatorResponse[version](throttle_time_ms=0, error_code=found.error_code, error_message=None,
                                            node_id=found.node_id, host=found.host, port=found.port)


async def join_group(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    if denied := ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return JoinGroupResponse[version](throttle_time_ms=0, error_code=denied, generation_id=-1, protocol_name="",
                                          leader="", member_id=request.member_id, members=[])
    result = await ctx.coordinator.join_group(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 5 else None,
        request.header.client_id or "",
        "/" + ctx.session.client_host,  # as Kafka shows a member's host
        request.session_timeout_ms,
        request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=version >= 4,
    )
    Member = JoinGroupResponse.JoinGroupResponseMember
    return JoinGroupResponse[version](
        throttle_time_ms=0,
        error_code=result.error_code,
        generation_id=result.generation_id,
        protocol_name=result.protocol_name or "",
        leader=result.leader,
        member_id=result.member_id,
        members=[Member(member_id=m, group_instance_id=i, metadata=md) for m, i, md in result.members],
    )


async def sync_group(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    if denied := ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return SyncGroupResponse[version](throttle_time_ms=0, error_code=denied, assignment=b"")
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    error, assignment = await ctx.coordinator.sync_group(
        request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if version >= 3 else None, assignments)
    return SyncGroupResponse[version](throttle_time_ms=0, error_code=error, assignment=assignment)


async def heartbeat(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error = ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id) or ctx.coordinator.heartbeat(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id if version >= 3 else None)
    return HeartbeatResponse[version](throttle_time_ms=0, error_code=error)


async def leave_group(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error = (ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id)
             or ctx.coordinator.leave_group(request.group_id, request.member_id))
    return LeaveGroupResponse[version](throttle_time_ms=0, error_code=error)
