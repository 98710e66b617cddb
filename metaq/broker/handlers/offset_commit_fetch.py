"""OffsetCommit and OffsetFetch (the offsets channel).

v1+ use ``__consumer_offsets`` through the GroupCoordinator. v0 makes the broker read and write the
group's ZooKeeper offsets on the client's behalf, as Kafka 0.8.2 did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from metaq.broker.context import BrokerContext
from metaq.broker.request_bounds import in_slices
from metaq.errors import ConfigError, ErrorCode, MetaqError
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import OffsetCommitResponse, OffsetFetchResponse
from zk_layout import validate_group, validate_topic
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
CommitPartition = CommitTopic.OffsetCommitResponsePartition
FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
FetchPartition = FetchTopic.OffsetFetchResponsePartition


def _commit_response(version: int, topics: Iterable[ApiStruct], errors: dict[tuple[str, int], int]) -> ApiResponse:
    return OffsetCommitResponse[version](throttle_time_ms=0, topics=[
        CommitTopic(name=t.name, partitions=[
            CommitPartition(partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions])
        for t in topics])


async def offset_commit(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_metadata)
               for t in request.topics for p in t.partitions}
    if denied := ctx.denied(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _commit_response(version, request.topics, dict.fromkeys(offsets, denied))
    if version == 0 and not _is_valid(validate_group, request.group_id):  # a ZooKeeper node name
        return _commit_response(version, request.topics, dict.fromkeys(offsets, ErrorCode.INVALID_GROUP_ID))
    refused = {tp: code for tp in offsets if (code := _commit_refusal(ctx, tp, version))}
    offsets = {tp: value for tp, value in offsets.items() if tp not in refused}
    if version == 0:
        errors = await _commit_to_zookeeper(ctx, request.group_id, offsets)
        return _commit_response(version, request.topics, {**errors, **refused})
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    errors = await ctx.coordinator.commit_offsets(
        request.group_id, request.generation_id_or_member_epoch, request.member_id,
        request.group_instance_id if version >= 7 else None, offsets, retention) if offsets else {}
    return _commit_response(version, request.topics, {**errors, **refused})


def _commit_refusal(ctx: BrokerContext, tp: tuple[str, int], version: int) -> int:
    """Why one partition's offset is not stored, in Kafka's order (``KafkaApis.handleOffsetCommitRequest``):
    Read on the topic, then the partition must exist (else offsets of made-up topics pile up without bound).
    v0 writes ZooKeeper paths: a topic that is no valid name is refused as such first."""
    topic, partition = tp
    if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if version == 0 and not _is_valid(validate_topic, topic):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if ctx.snapshot.partition(topic, partition) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def _is_valid(validate: Callable[[str], str], name: str) -> bool:
    try:
        validate(name)
    except ConfigError:
        return False
    return True


async def _commit_to_zookeeper(ctx: BrokerContext, group: str,
                               offsets: dict[tuple[str, int], tuple[int, str]]) -> dict[tuple[str, int], int]:
    errors = {}
    for (topic, partition), (offset, _) in offsets.items():
        try:
            await ctx.in_thread(ctx.layout.write_offset, group, topic, partition, offset)
            errors[(topic, partition)] = 0
        except MetaqError as e:
            log.warning("OffsetCommit v0 for group %s %s-%d failed: %s", group, topic, partition, e)
            errors[(topic, partition)] = ErrorCode.UNKNOWN_SERVER_ERROR
    return errors


async def offset_fetch(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    wanted = None if request.topics is None else [
        (t.name, p) for t in request.topics for p in t.partition_indexes]
    if denied := ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        return OffsetFetchResponse[version](throttle_time_ms=0, error_code=denied, topics=[
            FetchTopic(name=t, partitions=[FetchPartition(partition_index=p, committed_offset=-1, metadata="",
                                                          error_code=denied)]) for t, p in wanted or []])
    refused: dict[tuple[str, int], int] = {}
    if version == 0:  # ZooKeeper paths are made of the names: names that cannot be one are refused as in a commit
        error = 0 if _is_valid(validate_group, request.group_id) else ErrorCode.INVALID_GROUP_ID
        refused = {tp: ErrorCode.INVALID_TOPIC_EXCEPTION for tp in wanted or [] if not _is_valid(validate_topic, tp[0])}
        found = {} if error else await _fetch_from_zookeeper(
            ctx, request.group_id, [tp for tp in wanted or [] if tp not in refused])
    else:
        error, committed = ctx.coordinator.fetch_offsets(request.group_id, wanted)
        found = {tp: (c.offset, c.metadata) for tp, c in committed.items()}
    unstable = _unstable(ctx, request, version)
    keys = wanted if wanted is not None else sorted(found)
    by_topic: dict[str, list[ApiStruct]] = {}
    async for topic, partition in in_slices(keys):
        offset, metadata = found.get((topic, partition), (-1, ""))
        part_error = refused.get((topic, partition), error if version < 2 else 0)
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
            if wanted is None:
                continue  # all of the group's offsets: the topics the principal may not see are left out
            offset, metadata, part_error = -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif (topic, partition) in unstable:
            offset, metadata, part_error = -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT
        by_topic.setdefault(topic, []).append(FetchPartition(
            partition_index=partition, committed_offset=offset, metadata=metadata, error_code=part_error))
    return OffsetFetchResponse[version](
        throttle_time_ms=0, error_code=error,
        topics=[FetchTopic(name=t, partitions=parts) for t, parts in by_topic.items()])


def _unstable(ctx: BrokerContext, request: ApiRequest, version: int) -> set[tuple[str, int]]:
    """v7+ with require_stable (KIP-447): the partitions whose offsets a transaction has staged but not ended,
    answered UNSTABLE_OFFSET_COMMIT (retriable) so that a read_committed consumer does not start from an offset
    that could still change (Kafka's ``GroupMetadataManager.getOffsets``)."""
    if version < 7 or not request.require_stable:
        return set()
    return set(ctx.coordinator.pending_txn_partitions(request.group_id))


async def _fetch_from_zookeeper(ctx: BrokerContext, group: str,
                                wanted: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, str]]:
    found = {}
    for topic, partition in wanted:
        offset = await ctx.in_thread(ctx.layout.read_offset, group, topic, partition)
        if offset is not None and offset >= 0:
            found[(topic, partition)] = (offset, "")
    return found
