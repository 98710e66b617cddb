"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v0..3: what kafka-acls --bootstrap-server,
confluent-kafka's AdminClient (create_acls, describe_acls, delete_acls) and kafka-python use to manage ACLs.

They read and write the authorizer's ZooKeeper nodes (metaq/broker/security/authorizer.py). Kafka's rules:
Describe on the Cluster to describe, Alter on the Cluster to create or delete; without an authorizer
(``authorizer.class.name`` unset) every request is answered SECURITY_DISABLED. v1 adds pattern types (v0 means
literal); v2+ are flexible and answered with no tagged fields (docs/wire-protocol.md §1).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from metaq.broker.context import BrokerContext
from metaq.broker.security.acl_rules import AclFilter
from metaq.broker.security.authorizer import AclBinding, validate_binding
from metaq.errors import ConfigError, ErrorCode, MetaqError
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse
from zk_layout.acl_formats import (
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger(__name__)

NO_AUTHORIZER = "No Authorizer is configured on the broker (authorizer.class.name)"

E = TypeVar("E", ResourceType, AclOperation, AclPermission, PatternType)

Resource = DescribeAclsResponse.DescribeAclsResource
Description = Resource.AclDescription
CreationResult = CreateAclsResponse.AclCreationResult
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
MatchingAcl = FilterResult.DeleteAclsMatchingAcl


def _enum(cls: Callable[[int], E], code: int, unknown: E) -> E:
    try:
        return cls(code)
    except ValueError:
        return unknown


def _filter(f: ApiStruct, version: int) -> AclFilter:
    return AclFilter(
        resource_type=_enum(ResourceType, f.resource_type_filter, ResourceType.UNKNOWN),
        name=f.resource_name_filter,
        pattern_type=_enum(PatternType, f.pattern_type_filter, PatternType.UNKNOWN) if version >= 1
        else PatternType.LITERAL,
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_enum(AclOperation, f.operation, AclOperation.UNKNOWN),
        permission=_enum(AclPermission, f.permission_type, AclPermission.UNKNOWN),
    )


def _cluster_refusal(ctx: BrokerContext, operation: AclOperation) -> tuple[int, str | None]:
    """(error, message) if the request cannot be served at all, else (0, None)."""
    if ctx.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    if denied := ctx.denied(operation, ResourceType.CLUSTER):
        return denied, f"{ctx.principal} may not {operation.kafka_name} the cluster's ACLs"
    return 0, None


async def describe_acls(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error, message = _cluster_refusal(ctx, AclOperation.DESCRIBE)
    acl_filter = _filter(request, version)
    if not error and (reason := acl_filter.invalid()):
        error, message = ErrorCode.INVALID_REQUEST, reason
    if error or ctx.authorizer is None:
        return DescribeAclsResponse[version](throttle_time_ms=0, error_code=error, error_message=message,
                                             resources=[])
    grouped: dict[ResourcePattern, list[AclEntry]] = {}
    for binding in ctx.authorizer.describe(acl_filter):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    resources = [Resource(resource_type=pattern.resource_type, resource_name=pattern.name,
                          pattern_type=pattern.pattern_type, acls=[
                              Description(principal=e.principal, host=e.host, operation=e.operation,
                                          permission_type=e.permission) for e in entries])
                 for pattern, entries in grouped.items()]
    return DescribeAclsResponse[version](throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


def _binding(creation: ApiStruct, version: int) -> AclBinding:
    pattern_type = (_enum(PatternType, creation.resource_pattern_type, PatternType.UNKNOWN) if version >= 1
                    else PatternType.LITERAL)
    binding = AclBinding(
        ResourcePattern(_enum(ResourceType, creation.resource_type, ResourceType.UNKNOWN), creation.resource_name,
                        pattern_type),
        AclEntry(creation.principal, creation.host,
                 _enum(AclOperation, creation.operation, AclOperation.UNKNOWN),
                 _enum(AclPermission, creation.permission_type, AclPermission.UNKNOWN)))
    validate_binding(binding)
    return binding


async def _create_one(ctx: BrokerContext, creation: ApiStruct, version: int) -> tuple[int, str | None]:
    assert ctx.authorizer is not None
    try:
        binding = _binding(creation, version)
    except ConfigError as e:
        return ErrorCode.INVALID_REQUEST, str(e)
    try:
        await ctx.in_thread(ctx.authorizer.create, [binding])
    except MetaqError as e:
        log.warning("CreateAcls %s %s failed: %s", binding.pattern, binding.entry.describe(), e)
        return ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
    return 0, None


async def create_acls(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error, message = _cluster_refusal(ctx, AclOperation.ALTER)
    results = []
    for creation in request.creations:
        code, text = (error, message) if error else await _create_one(ctx, creation, version)
        results.append(CreationResult(error_code=code, error_message=text))
    return CreateAclsResponse[version](throttle_time_ms=0, results=results)


async def _delete_one(ctx: BrokerContext, f: ApiStruct, version: int) -> ApiStruct:
    assert ctx.authorizer is not None
    acl_filter = _filter(f, version)
    if reason := acl_filter.invalid():
        return FilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=reason, matching_acls=[])
    try:
        removed = await ctx.in_thread(ctx.authorizer.delete, acl_filter)
    except MetaqError as e:
        log.warning("DeleteAcls %s failed: %s", acl_filter, e)
        return FilterResult(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(e), matching_acls=[])
    return FilterResult(error_code=0, error_message=None, matching_acls=[
        MatchingAcl(error_code=0, error_message=None, resource_type=b.pattern.resource_type,
                    resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                    host=b.entry.host, operation=b.entry.operation, permission_type=b.entry.permission)
        for b in removed])


async def delete_acls(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    error, message = _cluster_refusal(ctx, AclOperation.ALTER)
    results = []
    for f in request.filters:
        if error:
            results.append(FilterResult(error_code=error, error_message=message, matching_acls=[]))
        else:
            results.append(await _delete_one(ctx, f, version))
    return DeleteAclsResponse[version](throttle_time_ms=0, filter_results=results)
