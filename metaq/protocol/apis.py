"""The Kafka APIs metaq's broker speaks, their codec classes, and the version ranges it advertises.

The ranges follow docs/wire-protocol.md §1: contiguous, non-flexible (except ApiVersions v3), chosen so that
librdkafka 2.0.2 (kcat), confluent-kafka 2.16 and kafka-python 3.0.12 all pick record batch v2.
"""

from __future__ import annotations

from enum import IntEnum

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


# api key -> (request class, response class, min version, max version) served by the broker
BROKER_APIS: dict[ApiKey, tuple[type, type, int, int]] = {
    # v0..2 carry message sets v0/v1, converted to record batch v2 on append (metaq/broker/log/upconvert.py)
    ApiKey.PRODUCE: (ProduceRequest, ProduceResponse, 0, 7),
    ApiKey.FETCH: (FetchRequest, FetchResponse, 0, 11),  # v0..3 down-converted (metaq/broker/downconvert.py)
    ApiKey.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse, 0, 5),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse, 0, 8),  # v9+ is flexible
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse, 0, 3),
    # v3: KIP-360's producer id and epoch in the request; v4: PRODUCER_FENCED; v5+ is KIP-890's
    ApiKey.INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse, 0, 2),
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse, 0, 5),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse, 0, 3),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse, 0, 3),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse, 0, 1),
    # from v0: the 0.8 consumer with offsets.storage=kafka sends v1, and v0 is served from ZooKeeper
    ApiKey.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse, 0, 7),
    # v6 is flexible, v7 adds require_stable (KIP-447: Kafka Streams' exactly_once_v2 sends it); v8 batches groups
    ApiKey.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse, 0, 7),
    # KIP-101 truncation of followers (v3 adds replica_id); librdkafka validates positions with v2
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 3),
    # transactions (docs/transactions.md): up to v3 (flexible, no tagged fields), before KIP-890's v4+;
    # WriteTxnMarkers v1 only: kafka-python's codec starts there (Kafka 3.9 serves 0..1)
    ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
    ApiKey.END_TXN: (EndTxnRequest, EndTxnResponse, 0, 3),
    ApiKey.WRITE_TXN_MARKERS: (WriteTxnMarkersRequest, WriteTxnMarkersResponse, 1, 1),
    ApiKey.TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
    # kafka-transactions describe/list; ListTransactions v1 (KIP-994's duration filter) as Kafka 3.9
    ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0),
    ApiKey.LIST_TRANSACTIONS: (ListTransactionsRequest, ListTransactionsResponse, 0, 1),
    # DeleteTopics 4, DeleteRecords 2, CreatePartitions 2, AlterConfigs 2, IncrementalAlterConfigs 1,
    # DescribeConfigs 1). The flexible versions among them are answered with no tagged fields.
    # Topic admin, up to the highest versions kafka-python 3.0.12 sends (librdkafka 2.16 stops at CreateTopics 4,
    # group admin: the maxima of librdkafka 2.16 (ListGroups 5, DescribeGroups 5, DeleteGroups 2) and of
    # kafka-python 3.0.12 (DescribeGroups 6); flexible versions answer with no tagged fields
    ApiKey.ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse, 0, 2),
    ApiKey.CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
    ApiKey.CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse, 0, 7),
    ApiKey.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    ApiKey.DELETE_RECORDS: (DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
    ApiKey.DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse, 0, 6),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse, 0, 2),
    ApiKey.DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse, 0, 4),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse, 0, 6),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse, 0, 5),
    ApiKey.OFFSET_DELETE: (OffsetDeleteRequest, OffsetDeleteResponse, 0, 0),
    # cluster operation, answered by the controller (docs/reassignment.md); Kafka 3.9 serves these ranges too
    ApiKey.ELECT_LEADERS: (ElectLeadersRequest, ElectLeadersResponse, 0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
                                           0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0),
    # client quotas (docs/quotas.md): v1 is flexible (no tagged fields)
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (DescribeClientQuotasRequest, DescribeClientQuotasResponse, 0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1),
    # ACL admin (kafka-acls, AdminClient *_acls): v1 adds prefixed patterns, v2+ are flexible (no tagged fields)
    ApiKey.DESCRIBE_ACLS: (DescribeAclsRequest, DescribeAclsResponse, 0, 3),
    ApiKey.CREATE_ACLS: (CreateAclsRequest, CreateAclsResponse, 0, 3),
    ApiKey.DELETE_ACLS: (DeleteAclsRequest, DeleteAclsResponse, 0, 3),
    # log directories (docs/log-dirs.md): Kafka 3.9's ranges; v2+ flexible, answered with no tagged fields
    ApiKey.ALTER_REPLICA_LOG_DIRS: (AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, 0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (DescribeLogDirsRequest, DescribeLogDirsResponse, 0, 4),
    # SASL (metaq/broker/auth/sasl.py): handled by the network layer, which holds the connection's state
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
}


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API{api_key}"
