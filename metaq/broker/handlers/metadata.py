"""Metadata v0..8: live brokers, and topics with their leaders, from the ZooKeeper snapshot.

v5 adds offline replicas (none: a replica is either live or left out of the ISR), v7 the partition leader
epoch and v8 authorized operations (not computed: INT32_MIN, Kafka's "not requested"). The leader epoch of a
single-replica partition is answered -1 (unknown) on purpose: its leader never changes, and with -1 a client
that knows epochs (librdkafka >= 1.9) skips validating its fetch position, as against a pre-2.1 broker. A
replicated partition answers its epoch from the state node (docs/architecture.md, "Replication"). sarama sends
v5 and kafka-python with ``api_version=(2,1)`` v7 without asking ApiVersions first (docs/wire-protocol.md section 1)."""

from __future__ import annotations

import logging

from metaq.broker.context import BrokerContext
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ConfigError, ErrorCode
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import MetadataResponse
from zk_layout import validate_topic
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Topics one Metadata request may auto-create (a constant, not a config: Kafka has no such bound). The
# rest are answered UNKNOWN_TOPIC_OR_PARTITION, a retriable error: a client that really uses them asks
# again and gets the next ones created, while one request cannot flood ZooKeeper with topics.
AUTO_CREATE_MAX_PER_REQUEST = 20

Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
Broker = MetadataResponse.MetadataResponseBroker


def _requested_topics(request: ApiRequest, version: int, snapshot: ClusterSnapshot) -> list[str]:
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return sorted(snapshot.topics)
    return [t.name for t in topics]


def _topic_entry(snapshot: ClusterSnapshot, name: str, error: int = 0) -> ApiStruct:
    parts = snapshot.topics.get(name)
    if parts is None:
        return Topic(error_code=error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                     partitions=[])
    entries = []
    for index in sorted(parts):
        meta = parts[index]
        alive = meta.leader in snapshot.brokers
        entries.append(
            Partition(
                error_code=0 if alive else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=meta.leader if alive else -1,
                leader_epoch=meta.leader_epoch if len(meta.replicas) > 1 else -1,  # see the module doc
                replica_nodes=list(meta.replicas),
                isr_nodes=[b for b in meta.isr if b in snapshot.brokers],
            )
        )
    return Topic(error_code=0, name=name, is_internal=name in INTERNAL_TOPICS, partitions=entries)


async def _maybe_create(ctx: BrokerContext, name: str, allowed: bool) -> int:
    """Error code for a topic that does not exist: created (LEADER_NOT_AVAILABLE) or unknown."""
    try:
        validate_topic(name)
    except ConfigError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if not (allowed and ctx.config.auto_create_topics_enable) or name in INTERNAL_TOPICS:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER):  # Kafka: Create on the cluster or topic
        if denied := ctx.denied(AclOperation.CREATE, ResourceType.TOPIC, name):
            return denied
    await ctx.auto_create(name)
    return ErrorCode.LEADER_NOT_AVAILABLE


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    snapshot = ctx.snapshot
    allow_create = version < 4 or bool(request.allow_auto_topic_creation)
    created = 0
    topics = []
    for name in _requested_topics(request, version, snapshot):
        error = 0
        if denied := ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if request.topics:  # named topics are answered with the error; a listing leaves them out
                topics.append(Topic(error_code=denied, name=name, is_internal=False, partitions=[]))
            continue
        if name not in snapshot.topics:
            error = await _maybe_create(ctx, name, allow_create and created < AUTO_CREATE_MAX_PER_REQUEST)
            created += error == ErrorCode.LEADER_NOT_AVAILABLE
            snapshot = ctx.snapshot
        topics.append(_topic_entry(snapshot, name, error))
    if allow_create and created >= AUTO_CREATE_MAX_PER_REQUEST:
        log.info("auto-created %d topics for one Metadata request (the most one may create)", created)
    brokers = [Broker(node_id=b.id, host=host, port=port, rack=b.rack)
               for b, (host, port) in ctx.broker_addresses(snapshot)]
    return MetadataResponse[version](
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=snapshot.cluster_id,
        controller_id=snapshot.controller_id,
        topics=topics,
    )
