"""Topic creation: spread partitions over the live brokers and write the topic's nodes in ZooKeeper.

As Kafka's ``AdminZkClient.createTopicWithAssignment`` and ``addPartitions``, only the assignment
(``/brokers/topics/<t>``) and the config (``/config/topics/<t>``) are written: the controller (metaq's,
metaq/broker/replication/controller.py, or a real Kafka cluster's) creates each new partition's ``state`` node
and so elects its first leader. A pre-written state node makes a real Kafka controller's first election fail
(docs/testing-apache-kafka.md). Where a controller is elected, creation then waits (at most
``STATE_WAIT_S``) until the controller has written the state of every partition with a live replica, so callers
find leaders on return as before; with no controller (no broker up yet) it returns at once and the first
controller elected creates them.

Used by ``metaq topics create`` and by the broker's auto-creation. Replicas are placed as Kafka's
``AdminUtils.assignReplicasToBrokers`` (rack unaware) places them: the first replicas round-robin from a
random broker, the followers shifted by a second random amount that grows by one per round of brokers, so
leaders and followers both spread evenly. The first replica is the preferred leader.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence

from metaq.errors import ConfigError, MalformedNodeError, TopicCollisionError, TopicError, UnknownTopicError
from zk_layout import TopicAssignment, ZkLayout, validate_topic

log = logging.getLogger(__name__)

STATE_WAIT_S = 10.0
STATE_POLL_S = 0.05


def assign_replicas(
    broker_ids: Sequence[int],
    partitions: int,
    replication_factor: int = 1,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """Partition -> replicas for partitions ``first_partition..first_partition+partitions-1`` (Kafka's
    rack-unaware assignment; ``start_index`` and ``replica_shift`` fix its two random choices, for tests)."""
    if partitions <= 0:
        raise ConfigError(f"partitions: {partitions} must be > 0")
    if replication_factor <= 0:
        raise ConfigError(f"replication factor: {replication_factor} must be > 0")
    brokers = sorted(broker_ids)
    if not brokers:
        raise TopicError("no live brokers are registered in ZooKeeper (/brokers/ids is empty)")
    n = len(brokers)
    if replication_factor > n:
        raise TopicError(f"replication factor: {replication_factor} larger than available brokers: {n} "
                         f"(live brokers {brokers})")
    start = random.randrange(n) if start_index is None else start_index
    shift = random.randrange(n) if replica_shift is None else replica_shift
    result: dict[int, list[int]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        result[partition] = replicas
    return result


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
    _check_collision(layout, topic)
    if assignment is None:
        assignment = assign_replicas(layout.broker_ids(), partitions, replication_factor)
    layout.create_topic(topic, assignment, {}, config=config)
    log.info("created topic %s with %d partitions: %s", topic, len(assignment), dict(assignment))
    await_partition_states(layout, topic, assignment)
    return TopicAssignment(partitions={p: tuple(r) for p, r in assignment.items()})


def _check_collision(layout: ZkLayout, topic: str) -> None:
    """TopicCollisionError if an existing topic's name equals ``topic``'s once '.' is read as '_' (Kafka's
    ``Topic.hasCollision``: ``a.b`` and ``a_b`` would share metric names)."""
    if "." not in topic and "_" not in topic:
        return
    unified = topic.replace(".", "_")
    colliding = [t for t in layout.topics() if t != topic and t.replace(".", "_") == unified]
    if colliding:
        raise TopicCollisionError(f"Topic '{topic}' collides with existing topics: {', '.join(colliding)}")


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
        factor = len(current.partitions[min(current.partitions)]) if current.partitions else 1
        added = assign_replicas(layout.broker_ids(), count - have, factor, first_partition=have)
    else:
        added = {have + i: list(r) for i, r in enumerate(new_assignment)}
    full = {**{p: list(r) for p, r in current.partitions.items()}, **added}
    layout.add_partitions(topic, full, {})
    log.info("topic %s: added partitions %s", topic, added)
    await_partition_states(layout, topic, added)
    return TopicAssignment(partitions={p: tuple(r) for p, r in full.items()})


def await_partition_states(layout: ZkLayout, topic: str, assignment: Mapping[int, Sequence[int]],
                           timeout_s: float = STATE_WAIT_S) -> bool:
    """Wait until the controller has created the ``state`` node of each partition of ``assignment`` that has a
    live replica (the others get none until one registers). Returns at once, False, if no controller is elected;
    False after ``timeout_s`` (logged: the topic exists, its leaders come later)."""
    try:
        if layout.controller() is None:
            return False
    except MalformedNodeError as e:  # not ours to judge here: the brokers report it
        log.warning("topic %s: not waiting for its partition states: %s", topic, e)
        return False
    live = set(layout.broker_ids())
    wanted = [(topic, p) for p, replicas in assignment.items() if live.intersection(replicas)]
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [key for key, state in layout.partition_states(wanted).items() if state is None]
        if not missing:
            return True
        if time.monotonic() >= deadline:
            log.warning("topic %s: the controller has not created the state of partitions %s within %.0f s; "
                        "they have no leader yet", topic, sorted(p for _, p in missing), timeout_s)
            return False
        time.sleep(STATE_POLL_S)
