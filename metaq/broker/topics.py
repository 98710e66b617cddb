"""Topic creation: spread partitions over the live brokers and write the topic's nodes in ZooKeeper.

Used by ``metaq topics create`` and by the broker's auto-creation. metaq does not replicate, so every
partition has one replica, which is its leader (as in a Kafka cluster with replication factor 1).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

from metaq.errors import ConfigError, TopicError
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
    layout: ZkLayout, topic: str, partitions: int, *, replication_factor: int = 1
) -> TopicAssignment:
    """Create ``topic`` with ``partitions`` partitions; TopicExistsError if it exists."""
    validate_topic(topic)
    if replication_factor != 1:
        raise ConfigError(
            f"replication factor {replication_factor}: metaq brokers do not replicate; use 1"
        )
    assignment = assign_replicas(layout.broker_ids(), partitions)
    states = {
        p: PartitionState(leader=replicas[0], leader_epoch=0, isr=tuple(replicas), controller_epoch=1)
        for p, replicas in assignment.items()
    }
    layout.create_topic(topic, assignment, states)
    log.info("created topic %s with %d partitions: %s", topic, partitions, assignment)
    return TopicAssignment(partitions={p: tuple(r) for p, r in assignment.items()})
