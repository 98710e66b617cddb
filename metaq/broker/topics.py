"""Topic creation: spread partitions over the live brokers and write the topic's nodes in ZooKeeper.

Used by ``metaq topics create`` and by the broker's auto-creation. metaq does not replicate, so every
partition has one replica, which is its leader (as in a Kafka cluster with replication factor 1).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence

from metaq.errors import ConfigError, TopicError, UnknownTopicError
from zk_layout import PartitionState, TopicAssignment, ZkLayout, validate_topic

log = logging.getLogger(__name__)


def assign_replicas(
    broker_ids: Sequence[int], partitions: int, *, start_index: int | None = None
) -> dict[int, list[int]]:
    """Round-robin placement from a random start, as Kafka's ``assignReplicasToBrokers`` does for RF 1."""
    if partitions <= 0:
        raise ConfigError(f"partitions: {partitions} must be > 0")
    brokers = sorted(broker_ids)
    if not brokers:
        raise TopicError("no live brokers are registered in ZooKeeper (/brokers/ids is empty)")
    start = random.randrange(len(brokers)) if start_index is None else start_index
    return {p: [brokers[(start + p) % len(brokers)]] for p in range(partitions)}


def create_topic(
    layout: ZkLayout,
    topic: str,
    partitions: int,
    *,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    assignment: Mapping[int, Sequence[int]] | None = None,
) -> TopicAssignment:
    """Create ``topic`` with ``partitions`` partitions (or the explicit ``assignment``) and its config
    overrides (``/config/topics/<t>``); TopicExistsError if it exists."""
    validate_topic(topic)
    if replication_factor != 1:
        raise ConfigError(
            f"replication factor {replication_factor}: metaq brokers do not replicate; use 1"
        )
    if assignment is None:
        assignment = assign_replicas(layout.broker_ids(), partitions)
    layout.create_topic(topic, assignment, initial_states(assignment), config=config)
    log.info("created topic %s with %d partitions: %s", topic, len(assignment), dict(assignment))
    return TopicAssignment(partitions={p: tuple(r) for p, r in assignment.items()})


def initial_states(assignment: Mapping[int, Sequence[int]]) -> dict[int, PartitionState]:
    """The ``state`` node of each new partition: its only replica leads, at leader epoch 0."""
    return {
        p: PartitionState(leader=replicas[0], leader_epoch=0, isr=tuple(replicas), controller_epoch=1)
        for p, replicas in assignment.items()
    }


def add_partitions(
    layout: ZkLayout, topic: str, count: int, new_assignment: Sequence[Sequence[int]] | None = None
) -> TopicAssignment:
    """Grow ``topic`` to ``count`` partitions; the new ones are placed round-robin on the live brokers
    unless ``new_assignment`` gives their replicas. TopicError if the topic is missing or not smaller."""
    current = layout.topic_assignment(topic)
    if current is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist")
    have = len(current.partitions)
    if count <= have:
        raise ConfigError(
            f"Topic currently has {have} partitions, which is higher than the requested {count}."
            if count < have else f"Topic already has {have} partitions."
        )
    if new_assignment is None:
        placed = assign_replicas(layout.broker_ids(), count - have)
        added = {have + p: r for p, r in placed.items()}
    else:
        added = {have + i: list(r) for i, r in enumerate(new_assignment)}
    full = {**{p: list(r) for p, r in current.partitions.items()}, **added}
    layout.add_partitions(topic, full, initial_states(added))
    log.info("topic %s: added partitions %s", topic, added)
    return TopicAssignment(partitions={p: tuple(r) for p, r in full.items()})
