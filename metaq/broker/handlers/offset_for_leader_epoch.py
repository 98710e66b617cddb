"""OffsetForLeaderEpoch v2..3 (API 23, KIP-101/KIP-279): the end offset of a leader epoch, served by the
partition's leader from its log's epoch cache (metaq/broker/replication/leader_epochs.py).

Followers ask it for their latest epoch before fetching from a new leader and truncate to the answer;
consumers that know epochs (librdkafka) use it to validate their position after a leader change. The
request's ``current_leader_epoch`` is checked as in Fetch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH)."""

from __future__ import annotations

from metaq.broker.context import BrokerContext
from metaq.protocol.messages import ApiRequest, ApiResponse, ApiStruct
from metaq.protocol.responses import OffsetForLeaderEpochResponse

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = TopicResult.EpochEndOffset


def _answer(ctx: BrokerContext, topic: str, p: ApiStruct) -> ApiStruct:
    error = ctx.serving_error(topic, p.partition) or ctx.epoch_error(topic, p.partition, p.current_leader_epoch)
    if error or ctx.replication is None:
        if error:
            ctx.count_error("OFFSET_FOR_LEADER_EPOCH", error)
        return EpochEndOffset(error_code=error, partition=p.partition, leader_epoch=-1, end_offset=-1)
    epoch, end = ctx.replication.end_offset_for_epoch(topic, p.partition, p.leader_epoch)
    return EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end)


async def handle(ctx: BrokerContext, request: ApiRequest, version: int) -> ApiResponse:
    topics = [TopicResult(topic=t.topic, partitions=[_answer(ctx, t.topic, p) for p in t.partitions])
              for t in request.topics]
    return OffsetForLeaderEpochResponse[version](throttle_time_ms=0, topics=topics)
