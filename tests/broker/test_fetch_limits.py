"""Fetch request shaping (pure logic): duplicate partitions merged, the answer's byte budget capped."""

from __future__ import annotations

from types import SimpleNamespace

from kafka.protocol.consumer import FetchRequest

from metaq.broker.config import BrokerConfig
from metaq.broker.handlers.fetch import _merge_partitions, response_budget

FP = FetchRequest.FetchTopic.FetchPartition


def _request(replica_id: int = -1, max_bytes: int = 0x7FFFFFFF, topics=()):
    return FetchRequest[4](replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
                           isolation_level=0, topics=list(topics))


def _ctx(**props):
    return SimpleNamespace(config=BrokerConfig.from_properties({"zookeeper.connect": "h:1", **props}))


def test_duplicates_merged_last_mention_wins_first_position_kept() -> None:
    req = _request(topics=[
        FetchRequest.FetchTopic(topic="a", partitions=[FP(partition=0, fetch_offset=1, partition_max_bytes=10),
                                                       FP(partition=1, fetch_offset=5, partition_max_bytes=10)]),
        FetchRequest.FetchTopic(topic="b", partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=10)]),
        FetchRequest.FetchTopic(topic="a", partitions=[FP(partition=0, fetch_offset=9, partition_max_bytes=10)]
                                * 1000),
    ])
    merged = _merge_partitions(req)
    assert [(t, [(p.partition, p.fetch_offset) for p in ps]) for t, ps in merged] == [
        ("a", [(0, 9), (1, 5)]), ("b", [(0, 0)])]


def test_budget_capped_by_fetch_max_bytes_and_for_replicas_by_replica_fetch_response_max_bytes() -> None:
    ctx = _ctx(**{"fetch.max.bytes": 1000, "replica.fetch.response.max.bytes": 300})
    assert response_budget(ctx, _request(), 4) == 1000
    assert response_budget(ctx, _request(max_bytes=500), 4) == 500
    assert response_budget(ctx, _request(replica_id=2), 4) == 300
    assert response_budget(ctx, _request(max_bytes=-5), 4) == 0
    assert response_budget(_ctx(), _request(), 4) == 50 * 1024 * 1024  # Kafka's default fetch.max.bytes
