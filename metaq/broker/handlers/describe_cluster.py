"""DescribeCluster v0..2 (KIP-700): the live brokers, the cluster id and the controller (the broker in
``/controller``, see :class:`metaq.broker.metadata.ClusterSnapshot`)."""

from __future__ import annotations

from metaq.broker.context import BrokerContext
from metaq.errors import ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse
from metaq.protocol.responses import DescribeClusterResponse
from zk_layout.acl_formats import AclOperation, ResourceType

BROKERS_ENDPOINT = 1

Broker = DescribeClusterResponse.DescribeClusterBroker


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    snapshot = ctx.snapshot
    fields: dict[str, int] = {}
    if version >= 1:
        fields["endpoint_type"] = request.endpoint_type
        if request.endpoint_type != BROKERS_ENDPOINT:
            return DescribeClusterResponse[version](
                throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                cluster_id=snapshot.cluster_id or "",
                error_message="metaq has no controller endpoints: ask for brokers", brokers=[], **fields)
    if denied := ctx.denied(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return DescribeClusterResponse[version](
            throttle_time_ms=0, error_code=denied, error_message="not authorized to describe the cluster",
            cluster_id=snapshot.cluster_id or "", controller_id=-1, brokers=[], **fields)
    brokers = [Broker(broker_id=info.id, host=host, port=port, rack=info.rack)
               for info, (host, port) in ctx.broker_addresses(snapshot)]
    return DescribeClusterResponse[version](
        throttle_time_ms=0, error_code=0, error_message=None, cluster_id=snapshot.cluster_id or "",
        controller_id=snapshot.controller_id, brokers=brokers,
        **fields)
