"""The replication throttle of a reassignment, set and cleared as Kafka's ``kafka-reassign-partitions --throttle``
does (``ReassignPartitionsCommand`` 2.8.2: ``calculateProposedMoveMap``, ``calculateLeaderThrottles``,
``calculateFollowerThrottles``, ``calculateReassigningBrokers``, ``clearAllThrottles``; docs/reassignment.md):

* each moving partition's current replicas (its *sources*) are leader-throttled and the replicas it gains (its
  *destinations*) follower-throttled: the topic configs ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas`` list them as ``partition:broker``;
* every source and destination broker gets ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` (``/config/brokers/<id>``);
* ``--verify``, once every partition of the plan completed, removes the three broker-level throttles from every
  registered broker and the plan's brokers, and the two topic-level ones from the plan's topics.

The brokers apply the configs through ``/config/changes`` (metaq/broker/quota/, docs/quotas.md). Writes go through
a :class:`ThrottleConfigs`: ZooKeeper (``--zookeeper``) or IncrementalAlterConfigs (``--bootstrap-server``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from metaq.broker.quota.replication import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS
from zk_layout import ZkLayout

TopicPartition = tuple[str, int]
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


@dataclass(frozen=True)
class ReassignmentThrottles:
    """What ``--throttle`` sets: per topic the leader and follower throttled replicas, and the brokers whose
    rates it sets."""

    leader: dict[str, str]
    follower: dict[str, str]
    brokers: frozenset[int]


def reassignment_throttles(current: Mapping[TopicPartition, Sequence[int]],
                           plan: Mapping[TopicPartition, Sequence[int]]) -> ReassignmentThrottles:
    """The throttles of moving ``current`` to ``plan`` (Kafka's move map: sources are the current replicas,
    destinations the target replicas not among them; entries sorted as strings, as Kafka's ``TreeSet``)."""
    leader: dict[str, set[str]] = {}
    follower: dict[str, set[str]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in plan.items():
        sources = list(current[(topic, partition)])
        destinations = [b for b in target if b not in sources]
        leader.setdefault(topic, set()).update(f"{partition}:{b}" for b in sources)
        follower.setdefault(topic, set()).update(f"{partition}:{b}" for b in destinations)
        brokers.update(sources, destinations)
    return ReassignmentThrottles({t: ",".join(sorted(v)) for t, v in leader.items()},
                                 {t: ",".join(sorted(v)) for t, v in follower.items()}, frozenset(brokers))


class ThrottleConfigs(Protocol):
    """Where the throttle configs are changed: keys set (a value) or removed (None), other keys kept."""

    def alter_topic(self, topic: str, changes: Mapping[str, str | None]) -> None: ...

    def alter_broker(self, broker_id: int, changes: Mapping[str, str | None]) -> None: ...

    def broker_ids(self) -> list[int]: ...


def set_throttles(configs: ThrottleConfigs, throttles: ReassignmentThrottles, rate: int) -> None:
    """Write the topic configs, then the rates of the brokers (Kafka's order: ``modifyReassignmentThrottle``)."""
    for topic in sorted(set(throttles.leader) | set(throttles.follower)):
        configs.alter_topic(topic, {LEADER_REPLICAS: throttles.leader.get(topic, ""),
                                    FOLLOWER_REPLICAS: throttles.follower.get(topic, "")})
    for broker in sorted(throttles.brokers):
        configs.alter_broker(broker, {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})


@dataclass(frozen=True)
class ClearedThrottles:
    brokers: list[int]
    topics: list[str]


def clear_throttles(configs: ThrottleConfigs, plan: Mapping[TopicPartition, Sequence[int]]) -> ClearedThrottles:
    """Remove every reassignment throttle of the registered brokers, the plan's brokers and the plan's topics
    (Kafka's ``clearAllThrottles``: it cannot tell which throttles an earlier run set, so it clears them all)."""
    brokers = sorted(set(configs.broker_ids()) | {b for replicas in plan.values() for b in replicas})
    for broker in brokers:
        configs.alter_broker(broker, dict.fromkeys(BROKER_THROTTLES))
    topics = sorted({t for t, _ in plan})
    for topic in topics:
        configs.alter_topic(topic, dict.fromkeys(TOPIC_THROTTLES))
    return ClearedThrottles(brokers, topics)


class ZooKeeperThrottleConfigs:
    """:class:`ThrottleConfigs` over ZooKeeper, as ``AdminZkClient.changeTopicConfig``/``changeBrokerConfig``: a
    node is rewritten (and announced) only when a key changes."""

    def __init__(self, layout: ZkLayout) -> None:
        self._layout = layout

    def alter_topic(self, topic: str, changes: Mapping[str, str | None]) -> None:
        stored = self._layout.topic_config(topic)
        current = dict(stored.config) if stored is not None else {}
        new = _changed(current, changes)
        if new != current:
            self._layout.set_topic_config(topic, new)

    def alter_broker(self, broker_id: int, changes: Mapping[str, str | None]) -> None:
        current = self._layout.broker_config(str(broker_id))
        new = _changed(current, changes)
        if new != current:
            self._layout.set_broker_config(str(broker_id), new)

    def broker_ids(self) -> list[int]:
        return self._layout.broker_ids()


def _changed(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    new = dict(current)
    for key, value in changes.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    return new


def describe_throttles(throttles: ReassignmentThrottles, rate: int) -> Iterable[str]:
    """Lines for the operator (what was set where)."""
    yield f"The inter-broker throttle limit was set to {rate} B/s"
    for topic in sorted(throttles.leader):
        yield f"Topic {topic}: {LEADER_REPLICAS}={throttles.leader[topic]} " \
              f"{FOLLOWER_REPLICAS}={throttles.follower.get(topic, '')}"
