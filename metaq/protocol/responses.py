"""The broker's response classes (kafka-python's, built from Kafka's JSON schemas), typed: ``Family[version]``
builds an :class:`~metaq.protocol.messages.ApiResponse`, so a handler's answer is checked as one.

    return JoinGroupResponse[version](throttle_time_ms=0, error_code=error, ...)   # an ApiResponse
"""

from __future__ import annotations

from kafka.protocol import admin as _admin
from kafka.protocol import consumer as _consumer
from kafka.protocol import metadata as _metadata
from kafka.protocol import producer as _producer
from kafka.protocol import sasl as _sasl
from kafka.protocol.producer import transaction as _transaction

from metaq.protocol.messages import ResponseFamily

AlterConfigsResponse: ResponseFamily = _admin.AlterConfigsResponse
AlterReplicaLogDirsResponse: ResponseFamily = _admin.AlterReplicaLogDirsResponse
DescribeLogDirsResponse: ResponseFamily = _admin.DescribeLogDirsResponse
AlterPartitionReassignmentsResponse: ResponseFamily = _admin.AlterPartitionReassignmentsResponse
ElectLeadersResponse: ResponseFamily = _admin.ElectLeadersResponse
ListPartitionReassignmentsResponse: ResponseFamily = _admin.ListPartitionReassignmentsResponse
AlterClientQuotasResponse: ResponseFamily = _admin.AlterClientQuotasResponse
DescribeClientQuotasResponse: ResponseFamily = _admin.DescribeClientQuotasResponse
ApiVersionsResponse: ResponseFamily = _metadata.ApiVersionsResponse
CreateAclsResponse: ResponseFamily = _admin.CreateAclsResponse
CreatePartitionsResponse: ResponseFamily = _admin.CreatePartitionsResponse
CreateTopicsResponse: ResponseFamily = _admin.CreateTopicsResponse
DeleteAclsResponse: ResponseFamily = _admin.DeleteAclsResponse
DeleteGroupsResponse: ResponseFamily = _admin.DeleteGroupsResponse
DeleteRecordsResponse: ResponseFamily = _admin.DeleteRecordsResponse
DeleteTopicsResponse: ResponseFamily = _admin.DeleteTopicsResponse
DescribeAclsResponse: ResponseFamily = _admin.DescribeAclsResponse
DescribeClusterResponse: ResponseFamily = _admin.DescribeClusterResponse
DescribeConfigsResponse: ResponseFamily = _admin.DescribeConfigsResponse
DescribeGroupsResponse: ResponseFamily = _admin.DescribeGroupsResponse
FindCoordinatorResponse: ResponseFamily = _metadata.FindCoordinatorResponse
HeartbeatResponse: ResponseFamily = _consumer.HeartbeatResponse
IncrementalAlterConfigsResponse: ResponseFamily = _admin.IncrementalAlterConfigsResponse
InitProducerIdResponse: ResponseFamily = _producer.InitProducerIdResponse
JoinGroupResponse: ResponseFamily = _consumer.JoinGroupResponse
LeaveGroupResponse: ResponseFamily = _consumer.LeaveGroupResponse
ListGroupsResponse: ResponseFamily = _admin.ListGroupsResponse
ListOffsetsResponse: ResponseFamily = _consumer.ListOffsetsResponse
MetadataResponse: ResponseFamily = _metadata.MetadataResponse
OffsetCommitResponse: ResponseFamily = _consumer.OffsetCommitResponse
OffsetDeleteResponse: ResponseFamily = _consumer.OffsetDeleteResponse
OffsetFetchResponse: ResponseFamily = _consumer.OffsetFetchResponse
OffsetForLeaderEpochResponse: ResponseFamily = _consumer.OffsetForLeaderEpochResponse
ProduceResponse: ResponseFamily = _producer.ProduceResponse
SaslAuthenticateResponse: ResponseFamily = _sasl.SaslAuthenticateResponse
SaslHandshakeResponse: ResponseFamily = _sasl.SaslHandshakeResponse
SyncGroupResponse: ResponseFamily = _consumer.SyncGroupResponse
AddOffsetsToTxnResponse: ResponseFamily = _transaction.AddOffsetsToTxnResponse
AddPartitionsToTxnResponse: ResponseFamily = _transaction.AddPartitionsToTxnResponse
EndTxnResponse: ResponseFamily = _transaction.EndTxnResponse
TxnOffsetCommitResponse: ResponseFamily = _transaction.TxnOffsetCommitResponse
WriteTxnMarkersResponse: ResponseFamily = _transaction.WriteTxnMarkersResponse
DescribeTransactionsResponse: ResponseFamily = _admin.DescribeTransactionsResponse
ListTransactionsResponse: ResponseFamily = _admin.ListTransactionsResponse
