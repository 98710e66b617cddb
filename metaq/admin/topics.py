"""Topics as ZooKeeper and the leaders describe them: partitions, leader, replicas, ISR, log start and end.

    list_topics(layout)                               # [TopicSummary("clicks", partitions=3)]
    describe_topic(layout, log_offsets, "clicks")     # TopicDetail("clicks", [PartitionDetail(0, leader=0, ...)])
    delete_topics(layout, ["clicks"], wait_s=30)      # [] once every hosting broker removed its logs
    alter_topic_config(layout, "clicks", {"retention.ms": "3600000"}, ["segment.bytes"])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metaq.broker.topic_config import TOPIC_CONFIG_KEYS, validate_topic_config
from metaq.errors import ConfigError, MalformedNodeError, UnknownTopicError
from metaq.json_types import JsonObject
from zk_layout import ZkLayout, validate_topic
from zk_layout.topics import check_deletable

if TYPE_CHECKING:  # its module brings in the Kafka clients, which listing topics does not need
    from metaq.admin.log_offsets import LogOffsets


@dataclass(frozen=True)
class TopicSummary:
    topic: str
    partitions: int
    error: str | None = None  # the topic's node does not decode (names the node); partitions is then 0

    def to_json(self) -> JsonObject:
        out: JsonObject = {"topic": self.topic, "partitions": self.partitions}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class PartitionDetail:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start: int | None
    log_end: int | None
    error: str | None = None
    status: str = "ok"  # see partition_status
    adding: tuple[int, ...] = ()  # a reassignment in progress (docs/reassignment.md): replicas being added
    removing: tuple[int, ...] = ()  # and being removed

    @property
    def messages(self) -> int | None:
        """Records still in the log (``log end - log start``)."""
        if self.log_start is None or self.log_end is None:
            return None
        return self.log_end - self.log_start

    def to_json(self) -> JsonObject:
        return {"partition": self.partition, "leader": self.leader, "replicas": list(self.replicas),
                "isr": list(self.isr), "log_start_offset": self.log_start, "log_end_offset": self.log_end,
                "messages": self.messages, "error": self.error, "status": self.status,
                "adding_replicas": list(self.adding), "removing_replicas": list(self.removing)}


OK, UNDER_REPLICATED, OFFLINE = "ok", "under-replicated", "offline"


def partition_status(leader: int | None, replicas: Iterable[int], isr: Iterable[int], live: Iterable[int]) -> str:
    """``offline`` without a live leader, ``under-replicated`` with fewer live in-sync replicas than replicas
    (as Kafka's ``--under-replicated-partitions`` counts them), else ``ok``."""
    alive = set(live)
    if leader is None or leader not in alive:
        return OFFLINE
    return UNDER_REPLICATED if len([b for b in isr if b in alive]) < len(list(replicas)) else OK


@dataclass(frozen=True)
class PartitionHealth:
    topic: str
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    status: str

    def to_json(self) -> JsonObject:
        return {"topic": self.topic, "partition": self.partition, "leader": self.leader,
                "replicas": list(self.replicas), "isr": list(self.isr), "status": self.status}


def unhealthy_partitions(layout: ZkLayout) -> list[PartitionHealth]:
    """Every under-replicated or offline partition of every topic (``metaq topics list --under-replicated``)."""
    live = set(layout.broker_ids())
    found = []
    for topic in layout.topics():
        assignment = layout.topic_assignment(topic)
        if assignment is None:
            continue
        states = layout.partition_states((topic, p) for p in assignment.partition_ids)
        for partition in assignment.partition_ids:
            state = states.get((topic, partition))
            leader = state.leader if state is not None and state.leader >= 0 else None
            isr = tuple(state.isr) if state is not None else ()
            replicas = tuple(assignment.partitions[partition])
            status = partition_status(leader, replicas, isr, live)
            if status != OK:
                found.append(PartitionHealth(topic, partition, leader, replicas, isr, status))
    return found


@dataclass(frozen=True)
class TopicDetail:
    topic: str
    partitions: list[PartitionDetail]
    config: dict[str, str]
    total_partitions: int | None = None  # the topic's count when ``partitions`` is a filtered subset

    @property
    def partition_count(self) -> int:
        return len(self.partitions) if self.total_partitions is None else self.total_partitions

    @property
    def replication_factor(self) -> int:
        """As kafka-topics --describe's ReplicationFactor: the replica count (of the first partition)."""
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def min_isr(self) -> int:
        """The topic's ``min.insync.replicas`` override, else the default 1 (a broker-wide setting is not
        visible in ZooKeeper)."""
        return int(self.config.get("min.insync.replicas", "1"))

    def under_min_isr(self) -> list[PartitionDetail]:
        """kafka-topics --under-min-isr-partitions: no leader, or fewer in-sync replicas than ``min_isr``."""
        return [p for p in self.partitions if p.status == OFFLINE or len(p.isr) < self.min_isr]

    def unavailable(self) -> list[PartitionDetail]:
        """kafka-topics --unavailable-partitions: no leader, or a leader that is not a live broker."""
        return [p for p in self.partitions if p.status == OFFLINE]

    def to_json(self) -> JsonObject:
        return {"topic": self.topic, "replication_factor": self.replication_factor, "config": self.config,
                "partitions": [p.to_json() for p in self.partitions]}


def list_topics(layout: ZkLayout) -> list[TopicSummary]:
    """Every topic; one whose node does not decode is listed with its error, the others as usual."""
    result = []
    for topic in layout.topics():
        try:
            assignment = layout.topic_assignment(topic)
        except MalformedNodeError as e:
            result.append(TopicSummary(topic, 0, str(e)))
            continue
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
    live = layout.broker_ids()
    details = []
    for partition in assignment.partition_ids:
        state = layout.partition_state(topic, partition)
        m = marks.get((topic, partition))
        leader = state.leader if state is not None and state.leader >= 0 else None
        replicas, isr = tuple(assignment.partitions[partition]), tuple(state.isr) if state is not None else ()
        details.append(PartitionDetail(partition, leader, replicas, isr,
                                       m.start if m else None, m.end if m else None, m.error if m else None,
                                       partition_status(leader, replicas, isr, live),
                                       assignment.adding_replicas.get(partition, ()),
                                       assignment.removing_replicas.get(partition, ())))
        if progress is not None:
            progress(1)
    config = layout.topic_config(topic)
    return TopicDetail(topic, details, dict(config.config) if config is not None else {})


def _require(layout: ZkLayout, topic: str) -> None:
    if layout.topic_assignment(topic) is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")


def delete_topics(layout: ZkLayout, topics: Iterable[str], *, wait_s: float = 0.0) -> list[str]:
    """Mark ``topics`` for deletion (``/admin/delete_topics``); the brokers hosting their partitions delete
    them. Waits up to ``wait_s`` and returns the topics still pending (a hosting broker may be down)."""
    names = list(topics)
    for topic in names:  # all checked before any is marked: a refused name leaves nothing half done
        check_deletable(topic)
        _require(layout, topic)
    for topic in names:
        layout.mark_topic_for_deletion(topic)
    deadline = time.monotonic() + wait_s
    pending = names
    while pending and time.monotonic() < deadline:
        time.sleep(0.1)
        marked = set(layout.topics_marked_for_deletion())
        pending = [t for t in pending if t in marked or layout.topic_assignment(t) is not None]
    return pending


def alter_topic_config(layout: ZkLayout, topic: str, updates: Mapping[str, str],
                       removals: Iterable[str] = ()) -> dict[str, str]:
    """Set ``updates`` and remove ``removals`` from a topic's overrides (validated; ConfigError names the
    key); the brokers apply the result through ``/config/changes``. Returns the new overrides."""
    removed = list(removals)
    unknown = [k for k in removed if k not in TOPIC_CONFIG_KEYS]
    if unknown:
        raise ConfigError(f"Unknown topic config name: {unknown[0]} (metaq supports {', '.join(TOPIC_CONFIG_KEYS)})")
    valid = validate_topic_config(updates)
    _require(layout, topic)
    stored = layout.topic_config(topic)
    config = {k: v for k, v in (stored.config if stored else {}).items() if k not in removed}
    config.update(valid)
    layout.set_topic_config(topic, config)
    return config


def elect_preferred_leaders(layout: ZkLayout, topics: Iterable[str] = (), *,
                            wait_s: float = 30.0) -> dict[tuple[str, int], int]:
    """Ask the controller to move each replicated partition of ``topics`` (default: all) back to its first
    replica (Kafka's ``/admin/preferred_replica_election``), wait up to ``wait_s`` for it to finish, and
    return each partition's leader afterwards. ConfigError if a request is already pending."""
    names = list(topics) or layout.topics()
    partitions = []
    for topic in names:
        validate_topic(topic)
        assignment = layout.topic_assignment(topic)
        if assignment is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        partitions += [(topic, p) for p, r in assignment.partitions.items() if len(r) > 1]
    if partitions and not layout.request_preferred_election(partitions):
        raise ConfigError("a preferred leader election is already pending in /admin/preferred_replica_election")
    deadline = time.monotonic() + wait_s
    while partitions and layout.preferred_election_request() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    states = layout.partition_states(partitions)
    return {key: state.leader if state is not None else -1 for key, state in states.items()}
