"""One module per Kafka API the broker answers; ``HANDLERS`` maps an API key to its handler.

Most handlers answer one Kafka message (``HANDLERS``: typed :data:`metaq.broker.response.MessageHandler`);
a handler that writes its answer itself (Fetch's file slices, Produce's struct-packed answer) answers a
:class:`metaq.broker.response.Response` (``RESPONDERS``). ``DISPATCH`` is what the network layer serves: every
API key to a handler answering a ``Response``.
"""

from __future__ import annotations

from metaq.broker.handlers import (
    acls,
    api_versions,
    client_quotas,
    configs,
    create_delete_topics,
    delete_records,
    describe_cluster,
    fetch,
    group_admin,
    groups,
    init_producer_id,
    list_offsets,
    log_dirs,
    metadata,
    offset_commit_fetch,
    offset_for_leader_epoch,
    produce,
    reassignment,
    txn_apis,
)
from metaq.broker.response import Handler, MessageHandler, encoded
from metaq.protocol.apis import ApiKey

HANDLERS: dict[ApiKey, MessageHandler] = {
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.INIT_PRODUCER_ID: init_producer_id.handle,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.OFFSET_COMMIT: offset_commit_fetch.offset_commit,
    ApiKey.OFFSET_FETCH: offset_commit_fetch.offset_fetch,
    ApiKey.LIST_GROUPS: group_admin.list_groups,
    ApiKey.DESCRIBE_GROUPS: group_admin.describe_groups,
    ApiKey.DELETE_GROUPS: group_admin.delete_groups,
    ApiKey.OFFSET_DELETE: group_admin.offset_delete,
    ApiKey.CREATE_TOPICS: create_delete_topics.create_topics,
    ApiKey.DELETE_TOPICS: create_delete_topics.delete_topics,
    ApiKey.CREATE_PARTITIONS: create_delete_topics.create_partitions,
    ApiKey.DELETE_RECORDS: delete_records.handle,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster.handle,
    ApiKey.DESCRIBE_ACLS: acls.describe_acls,
    ApiKey.CREATE_ACLS: acls.create_acls,
    ApiKey.DELETE_ACLS: acls.delete_acls,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
    ApiKey.ADD_PARTITIONS_TO_TXN: txn_apis.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: txn_apis.add_offsets_to_txn,
    ApiKey.END_TXN: txn_apis.end_txn,
    ApiKey.WRITE_TXN_MARKERS: txn_apis.write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: txn_apis.txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: txn_apis.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: txn_apis.list_transactions,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: log_dirs.alter_replica_log_dirs,
    ApiKey.ELECT_LEADERS: reassignment.elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignment.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignment.list_partition_reassignments,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.alter_client_quotas,
}

RESPONDERS: dict[ApiKey, Handler] = {
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
}

DISPATCH: dict[ApiKey, Handler] = {**{key: encoded(handler) for key, handler in HANDLERS.items()}, **RESPONDERS}
