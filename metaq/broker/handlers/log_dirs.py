"""DescribeLogDirs v0..4 and AlterReplicaLogDirs v0..2: a broker's log directories (``kafka-log-dirs``,
``kafka-reassign-partitions`` with ``log_dirs``; docs/log-dirs.md).

DescribeLogDirs answers every directory: an offline one with KAFKA_STORAGE_ERROR and no partitions, an online
one with each current and future log (size, offset lag, is_future) and, from v4, its volume's total and
usable bytes. AlterReplicaLogDirs starts moving each named partition to the named directory (a future log
the broker's :class:`metaq.broker.log.dir_mover.LogDirMover` fills and swaps in); per partition, as Kafka's
``ReplicaManager.alterReplicaLogDirs``: LOG_DIR_NOT_FOUND for a path that is not a log dir,
KAFKA_STORAGE_ERROR for an offline one or an offline replica, REPLICA_NOT_AVAILABLE for a partition without a
replica here (its log will be created in that directory when it comes), NONE otherwise (already there
included).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from metaq.broker.context import BrokerContext
from metaq.broker.log.log_dirs import LogDirDescription
from metaq.errors import ErrorCode, MetaqError
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import AlterReplicaLogDirsResponse, DescribeLogDirsResponse
from zk_layout.acl_formats import AclOperation, ResourceType

log = logging.getLogger(__name__)

DirResult = DescribeLogDirsResponse.DescribeLogDirsResult
TopicResult = DirResult.DescribeLogDirsTopic
PartitionResult = TopicResult.DescribeLogDirsPartition
AlterTopicResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
AlterPartitionResult = AlterTopicResult.AlterReplicaLogDirPartitionResult

_FIRST_ERROR_CODE_VERSION = 3
_FIRST_BYTES_VERSION = 4


def _wanted(request: ApiRequest) -> set[tuple[str, int]] | None:
    """The partitions asked about, or None for all (a null topic list)."""
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


def _dir_result(description: LogDirDescription, wanted: set[tuple[str, int]] | None, version: int) -> ApiStruct:
    by_topic: dict[str, list[ApiStruct]] = {}
    for replica in description.replicas:
        if wanted is not None and (replica.topic, replica.partition) not in wanted:
            continue
        by_topic.setdefault(replica.topic, []).append(PartitionResult(
            partition_index=replica.partition, partition_size=replica.size, offset_lag=replica.offset_lag,
            is_future_key=replica.is_future))
    fields: dict[str, int] = {}
    if version >= _FIRST_BYTES_VERSION:
        fields = {"total_bytes": description.total_bytes, "usable_bytes": description.usable_bytes}
    return DirResult(error_code=ErrorCode.NONE if description.online else ErrorCode.KAFKA_STORAGE_ERROR,
                     log_dir=str(description.path),
                     topics=[TopicResult(name=name, partitions=parts) for name, parts in sorted(by_topic.items())],
                     **fields)


async def describe_log_dirs(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    fields: dict[str, int] = {}
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.CLUSTER)
    if version >= _FIRST_ERROR_CODE_VERSION:
        fields["error_code"] = denied
    if denied:  # Kafka answers no directories (and, from v3, the error)
        return DescribeLogDirsResponse[version](throttle_time_ms=0, results=[], **fields)
    descriptions = ctx.logs.describe(lambda plog: ctx.high_watermark(plog.topic, plog.partition, plog))
    wanted = _wanted(request)
    return DescribeLogDirsResponse[version](
        throttle_time_ms=0, results=[_dir_result(d, wanted, version) for d in descriptions], **fields)


def _log_dir_named(ctx: BrokerContext, path: str) -> Path | None:
    """The broker's log dir ``path`` names (compared resolved, as Kafka compares canonical paths)."""
    wanted = Path(path).resolve()
    for log_dir in ctx.logs.log_dirs:
        if log_dir.resolve() == wanted:
            return log_dir
    return None


def _alter(ctx: BrokerContext, log_dir: Path | None, topic: str, partition: int) -> int:
    logs = ctx.logs
    if log_dir is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    if log_dir not in logs.online_dirs() or logs.is_offline(topic, partition):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if logs.get(topic, partition) is None:
        logs.set_preferred_dir(topic, partition, log_dir)
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if logs.log_dir_of(topic, partition) == log_dir:
        logs.abandon_future(topic, partition)  # moving back where it is: a move elsewhere is cancelled
        return ErrorCode.NONE
    try:
        logs.create_future(topic, partition, log_dir)
    except (MetaqError, OSError) as e:
        log.error("cannot start moving %s-%d to %s: %s", topic, partition, log_dir, e)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


def _partitions(entries: Iterable[ApiStruct]) -> Iterable[tuple[str, int]]:
    for topic in entries:
        for partition in topic.partitions:
            yield topic.name, partition


async def alter_replica_log_dirs(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    denied = ctx.denied(AclOperation.ALTER, ResourceType.CLUSTER)
    results: dict[str, list[ApiStruct]] = {}
    for entry in request.dirs:
        log_dir = _log_dir_named(ctx, entry.path)
        for topic, partition in _partitions(entry.topics):
            error = denied or _alter(ctx, log_dir, topic, partition)
            if error not in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE):
                log.warning("AlterReplicaLogDirs %s-%d to %s: %s", topic, partition, entry.path,
                            ErrorCode(error).name)
            results.setdefault(topic, []).append(AlterPartitionResult(partition_index=partition, error_code=error))
    return AlterReplicaLogDirsResponse[version](
        throttle_time_ms=0,
        results=[AlterTopicResult(topic_name=name, partitions=parts) for name, parts in sorted(results.items())])
