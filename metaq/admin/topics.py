"""Topics as ZooKeeper and the leaders describe them: partitions, leader, replicas, ISR, log start and end.

    list_topics(layout)                               # [TopicSummary("clicks", partitions=3)]
    describe_topic(layout, log_offsets, "clicks")     # TopicDetail("clicks", [PartitionDetail(0, leader=0, ...)])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metaq.admin.log_offsets import LogOffsets
from metaq.errors import UnknownTopicError
from zk_layout import ZkLayout, validate_topic


@dataclass(frozen=True)
class TopicSummary:
    topic: str
    partitions: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partitions": self.partitions}


@dataclass(frozen=True)
class PartitionDetail:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start: int | None
    log_end: int | None
    error: str | None = None

    @property
    def messages(self) -> int | None:
        """Records still in the log (``log end - log start``)."""
        if self.log_start is None or self.log_end is None:
            return None
        return self.log_end - self.log_start

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "leader": self.leader, "replicas": list(self.replicas),
                "isr": list(self.isr), "log_start_offset": self.log_start, "log_end_offset": self.log_end,
                "messages": self.messages, "error": self.error}


@dataclass(frozen=True)
class TopicDetail:
    topic: str
    partitions: list[PartitionDetail]
    config: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "config": self.config, "partitions": [p.to_json() for p in self.partitions]}


def list_topics(layout: ZkLayout) -> list[TopicSummary]:
    result = []
    for topic in layout.topics():
        assignment = layout.topic_assignment(topic)
        if assignment is not None:  # deleted while listing
            result.append(TopicSummary(topic, len(assignment.partitions)))
    return result


def describe_topic(layout: ZkLayout, log_offsets: LogOffsets, topic: str,
                   progress: Callable[[int], None] | None = None) -> TopicDetail:
    """UnknownTopicError if the topic does not exist."""
    validate_topic(topic)
    assignment = layout.topic_assignment(topic)
    if assignment is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    marks = log_offsets.watermarks((topic, p) for p in assignment.partition_ids)
    details = []
    for partition in assignment.partition_ids:
        state = layout.partition_state(topic, partition)
        m = marks.get((topic, partition))
        leader = state.leader if state is not None and state.leader >= 0 else None
        details.append(PartitionDetail(partition, leader, tuple(assignment.partitions[partition]),
                                       tuple(state.isr) if state is not None else (),
                                       m.start if m else None, m.end if m else None, m.error if m else None))
        if progress is not None:
            progress(1)
    config = layout.topic_config(topic)
    return TopicDetail(topic, details, dict(config.config) if config is not None else {})
