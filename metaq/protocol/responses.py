"""The broker's response classes (kafka-python's, built from Kafka's JSON schemas), typed: ``Family[version]``
builds an :class:`~metaq.protocol.messages.ApiResponse`, so a handler's answer is checked as one.

    return JoinGroupResponse[version](throttle_time_ms=0, error_code=error, ...)   # an ApiResponse
"""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterClientQuotasResponse as _AlterClientQuotasResponse,
)
from kafka.protocol.admin import (
    AlterConfigsResponse as _AlterConfigsResponse,
)
from kafka.protocol.admin import (
    AlterPartitionReassignmentsResponse as _AlterPartitionReassignmentsResponse,
)
from kafka.protocol.admin import (
    AlterReplicaLogDirsResponse as _AlterReplicaLogDirsResponse,
)
from kafka.protocol.admin import (
    CreateAclsResponse as _CreateAclsResponse,
)
from kafka.protocol.admin import (
    CreatePartitionsResponse as _CreatePartitionsResponse,
)
from kafka.protocol.admin import (
    CreateTopicsResponse as _CreateTopicsResponse,
)
from kafka.protocol.admin import (
    DeleteAclsResponse as _DeleteAclsResponse,
)
from kafka.protocol.admin import (
    DeleteGroupsResponse as _DeleteGroupsResponse,
)
from kafka.protocol.admin import (
    DeleteRecordsResponse as _DeleteRecordsResponse,
)
from kafka.protocol.admin import (
    DeleteTopicsResponse as _DeleteTopicsResponse,
)
from kafka.protocol.admin import (
    DescribeAclsResponse as _DescribeAclsResponse,
)
from kafka.protocol.admin import (
    DescribeClientQuotasResponse as _DescribeClientQuotasResponse,
)
from kafka.protocol.admin import (
    DescribeClusterResponse as _DescribeClusterResponse,
)
from kafka.protocol.admin import (
    DescribeConfigsResponse as _DescribeConfigsResponse,
)
from kafka.protocol.admin import (
    DescribeGroupsResponse as _DescribeGroupsResponse,
)
from kafka.protocol.admin import (
    DescribeLogDirsResponse as _DescribeLogDirsResponse,
)
from kafka.protocol.admin import (
    DescribeTransactionsResponse as _DescribeTransactionsResponse,
)
from kafka.protocol.admin import (
    ElectLeadersResponse as _ElectLeadersResponse,
)
from kafka.protocol.admin import (
    IncrementalAlterConfigsResponse as _IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin import (
    ListGroupsResponse as _ListGroupsResponse,
)
from kafka.protocol.admin import (
    ListPartitionReassignmentsResponse as _ListPartitionReassignmentsResponse,
)
from kafka.protocol.admin import (
    ListTransactionsResponse as _ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatResponse as _HeartbeatResponse,
)
from kafka.protocol.consumer import (
    JoinGroupResponse as _JoinGroupResponse,
)
from kafka.protocol.consumer import (
    LeaveGroupResponse as _LeaveGroupResponse,
)
from kafka.protocol.consumer import (
    ListOffsetsResponse as _ListOffsetsResponse,
)
from kafka.protocol.consumer import (
    OffsetCommitResponse as _OffsetCommitResponse,
)
from kafka.protocol.consumer import (
    OffsetDeleteResponse as _OffsetDeleteResponse,
)
from kafka.protocol.consumer import (
    OffsetFetchResponse as _OffsetFetchResponse,
)
from kafka.protocol.consumer import (
    OffsetForLeaderEpochResponse as _OffsetForLeaderEpochResponse,
)
from kafka.protocol.consumer import (
    SyncGroupResponse as _SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsResponse as _ApiVersionsResponse,
)
from kafka.protocol.metadata import (
    FindCoordinatorResponse as _FindCoordinatorResponse,
)
from kafka.protocol.metadata import (
    MetadataResponse as _MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdResponse as _InitProducerIdResponse,
)
from kafka.protocol.producer import (
    ProduceResponse as _ProduceResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse as _AddOffsetsToTxnResponse,
)
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnResponse as _AddPartitionsToTxnResponse,
)
from kafka.protocol.producer.transaction import (
    EndTxnResponse as _EndTxnResponse,
)
from kafka.protocol.producer.transaction import (
    TxnOffsetCommitResponse as _TxnOffsetCommitResponse,
)
from kafka.protocol.producer.transaction import (
    WriteTxnMarkersResponse as _WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateResponse as _SaslAuthenticateResponse,
)
from kafka.protocol.sasl import (
    SaslHandshakeResponse as _SaslHandshakeResponse,
)

from metaq.protocol.messages import ResponseFamily

AlterConfigsResponse: ResponseFamily = _AlterConfigsResponse
AlterReplicaLogDirsResponse: ResponseFamily = _AlterReplicaLogDirsResponse
DescribeLogDirsResponse: ResponseFamily = _DescribeLogDirsResponse
AlterPartitionReassignmentsResponse: ResponseFamily = _AlterPartitionReassignmentsResponse
ElectLeadersResponse: ResponseFamily = _ElectLeadersResponse
ListPartitionReassignmentsResponse: ResponseFamily = _ListPartitionReassignmentsResponse
AlterClientQuotasResponse: ResponseFamily = _AlterClientQuotasResponse
DescribeClientQuotasResponse: ResponseFamily = _DescribeClientQuotasResponse
ApiVersionsResponse: ResponseFamily = _ApiVersionsResponse
CreateAclsResponse: ResponseFamily = _CreateAclsResponse
CreatePartitionsResponse: ResponseFamily = _CreatePartitionsResponse
CreateTopicsResponse: ResponseFamily = _CreateTopicsResponse
DeleteAclsResponse: ResponseFamily = _DeleteAclsResponse
DeleteGroupsResponse: ResponseFamily = _DeleteGroupsResponse
DeleteRecordsResponse: ResponseFamily = _DeleteRecordsResponse
DeleteTopicsResponse: ResponseFamily = _DeleteTopicsResponse
DescribeAclsResponse: ResponseFamily = _DescribeAclsResponse
DescribeClusterResponse: ResponseFamily = _DescribeClusterResponse
DescribeConfigsResponse: ResponseFamily = _DescribeConfigsResponse
DescribeGroupsResponse: ResponseFamily = _DescribeGroupsResponse
FindCoordinatorResponse: ResponseFamily = _FindCoordinatorResponse
HeartbeatResponse: ResponseFamily = _HeartbeatResponse
IncrementalAlterConfigsResponse: ResponseFamily = _IncrementalAlterConfigsResponse
InitProducerIdResponse: ResponseFamily = _InitProducerIdResponse
JoinGroupResponse: ResponseFamily = _JoinGroupResponse
LeaveGroupResponse: ResponseFamily = _LeaveGroupResponse
ListGroupsResponse: ResponseFamily = _ListGroupsResponse
ListOffsetsResponse: ResponseFamily = _ListOffsetsResponse
MetadataResponse: ResponseFamily = _MetadataResponse
OffsetCommitResponse: ResponseFamily = _OffsetCommitResponse
OffsetDeleteResponse: ResponseFamily = _OffsetDeleteResponse
OffsetFetchResponse: ResponseFamily = _OffsetFetchResponse
OffsetForLeaderEpochResponse: ResponseFamily = _OffsetForLeaderEpochResponse
ProduceResponse: ResponseFamily = _ProduceResponse
SaslAuthenticateResponse: ResponseFamily = _SaslAuthenticateResponse
SaslHandshakeResponse: ResponseFamily = _SaslHandshakeResponse
SyncGroupResponse: ResponseFamily = _SyncGroupResponse
AddOffsetsToTxnResponse: ResponseFamily = _AddOffsetsToTxnResponse
AddPartitionsToTxnResponse: ResponseFamily = _AddPartitionsToTxnResponse
EndTxnResponse: ResponseFamily = _EndTxnResponse
TxnOffsetCommitResponse: ResponseFamily = _TxnOffsetCommitResponse
WriteTxnMarkersResponse: ResponseFamily = _WriteTxnMarkersResponse
DescribeTransactionsResponse: ResponseFamily = _DescribeTransactionsResponse
ListTransactionsResponse: ResponseFamily = _ListTransactionsResponse
