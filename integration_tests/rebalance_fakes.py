"""Fakes a ZKRebalancerListener is given by the rebalance tests: the subscription and the fetcher manager (the
rebalance itself runs against a real ZooKeeper)."""

from __future__ import annotations

from collections.abc import Iterable

from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from zk_layout import PartitionState, TopicCount

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)


class FakeSubscription:
    """One static subscription (topic "t", one stream) and its one chunk queue."""

    is_wildcard = False

    def __init__(self) -> None:
        self.queue = ChunkQueue(2)

    def topic_count(self) -> TopicCount:
        return TopicCount(subscription={"t": 1})

    def queue_for(self, topic: str, thread_id: str) -> ChunkQueue:
        return self.queue

    def clear_queues(self) -> None:
        pass


class FakeFetcher:
    """Records which partitions a rebalance started fetching."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []

    def start_connections(self, infos: Iterable[PartitionTopicInfo]) -> None:
        self.started = sorted(info.key for info in infos)

    def stop_connections(self) -> None:
        pass
