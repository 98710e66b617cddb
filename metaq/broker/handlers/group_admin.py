"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete: the group admin APIs (AdminClient
list/describe/delete_consumer_groups, kafka-consumer-groups), thin codecs around GroupCoordinator.

Flexible versions (ListGroups v3+, DescribeGroups v5+, DeleteGroups v2+) are answered with no tagged fields,
which librdkafka 2.0.2 skips correctly (docs/wire-protocol.md §1).
"""

from __future__ import annotations

from metaq.broker.context import BrokerContext
from metaq.broker.coordinator.group_state import DEAD
from metaq.broker.request_bounds import in_slices
from metaq.errors import ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
    OffsetDeleteResponse,
)
from zk_layout.acl_formats import AclOperation, ResourceType

CLASSIC_GROUP_TYPE = "classic"  # KIP-848's name for JoinGroup/SyncGroup groups, the only kind metaq has
# Without an authorizer every client may do everything: READ (3), DELETE (6) and DESCRIBE (8) on a group,
# as Kafka answers with no authorizer configured. The codec takes the bitfield as a set of operation codes;
# None encodes Kafka's "not requested" (INT32_MIN).
ALL_GROUP_OPERATIONS = frozenset({3, 6, 8})

ListedGroup = ListGroupsResponse.ListedGroup
DescribedGroup = DescribeGroupsResponse.DescribedGroup
DescribedMember = DescribedGroup.DescribedGroupMember
DeletableGroup = DeleteGroupsResponse.DeletableGroupResult
DeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
DeletePartition = DeleteTopic.OffsetDeleteResponsePartition


async def list_groups(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    states = request.states_filter if version >= 4 else []
    types = {t.lower() for t in request.types_filter} if version >= 5 else set()
    error, groups = await ctx.coordinator.list_groups(states)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):  # else only the groups it may describe
        groups = [g for g in groups if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)]
    if types and CLASSIC_GROUP_TYPE not in types:
        groups = []
    return ListGroupsResponse[version](throttle_time_ms=0, error_code=error, groups=[
        ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                    group_type=CLASSIC_GROUP_TYPE)
        for g in groups])


async def describe_groups(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    operations = set(ALL_GROUP_OPERATIONS) if version >= 3 and request.include_authorized_operations else None
    described = []
    async for group_id in in_slices(request.groups):
        if denied := ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(DescribedGroup(error_code=denied, group_id=group_id, group_state="", protocol_type="",
                                            protocol_data="", authorized_operations=operations, members=[]))
            continue
        error, summary = await ctx.coordinator.describe_group(group_id)
        message = None
        if not error and summary.state == DEAD and version >= 6:  # KIP-1043: v6 names an unknown group
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} is not known to its coordinator"
        described.append(DescribedGroup(
            error_code=error, error_message=message, group_id=group_id, group_state=summary.state,
            protocol_type=summary.protocol_type, protocol_data=summary.protocol_name,
            authorized_operations=operations, members=[
                DescribedMember(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                                client_host=m.client_host, member_metadata=m.metadata,
                                member_assignment=m.assignment)
                for m in summary.members]))
    return DescribeGroupsResponse[version](throttle_time_ms=0, groups=described)


async def delete_groups(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    results = [DeletableGroup(group_id=gid, error_code=ctx.denied(AclOperation.DELETE, ResourceType.GROUP, gid)
                              or await ctx.coordinator.delete_group(gid))
               for gid in dict.fromkeys(request.groups_names)]
    return DeleteGroupsResponse[version](throttle_time_ms=0, results=results)


async def offset_delete(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    if denied := ctx.denied(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse[version](throttle_time_ms=0, error_code=denied, topics=[])
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    unknown = {tp: ctx.denied(AclOperation.READ, ResourceType.TOPIC, tp[0]) or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
               for tp in wanted if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, tp[0])
               or ctx.snapshot.partition(*tp) is None}
    error, errors = await ctx.coordinator.delete_offsets(request.group_id, [tp for tp in wanted if tp not in unknown])
    errors = {**errors, **unknown}
    topics = [DeleteTopic(name=t.name, partitions=[
        DeletePartition(partition_index=p.partition_index, error_code=errors.get((t.name, p.partition_index), 0))
        for p in t.partitions]) for t in request.topics]
    return OffsetDeleteResponse[version](throttle_time_ms=0, error_code=error, topics=topics if not error else [])
