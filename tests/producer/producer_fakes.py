"""An in-memory stand-in for zk_layout.ZkLayout, for ClusterMetadata and Producer tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from metaq.errors import ZooKeeperUnavailableError


@dataclass
class Assignment:
    partitions: dict[int, tuple[int, ...]]


@dataclass
class State:
    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()


@dataclass
class BrokerInfo:
    id: int
    host: str
    port: int


@dataclass
class FakeLayout:
    """The ZkLayout methods ClusterMetadata reads, over dicts a test edits."""

    assignments: dict[str, Assignment] = field(default_factory=dict)
    states: dict[tuple[str, int], State] = field(default_factory=dict)
    broker_infos: dict[int, BrokerInfo] = field(default_factory=dict)
    reads: int = 0
    down: bool = False

    def topic_assignment(self, topic: str) -> Assignment | None:
        if self.down:
            raise ZooKeeperUnavailableError("ZooKeeper is down (test)")
        self.reads += 1
        return self.assignments.get(topic)

    def partition_state(self, topic: str, partition: int) -> State | None:
        return self.states.get((topic, partition))

    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self.broker_infos)

    def add_broker(self, broker_id: int, port: int, host: str = "127.0.0.1") -> None:
        self.broker_infos[broker_id] = BrokerInfo(broker_id, host, port)

    def add_topic(self, topic: str, partitions: int, leader: int = 0) -> None:
        self.assignments[topic] = Assignment({p: (leader,) for p in range(partitions)})
        for p in range(partitions):
            self.states[(topic, p)] = State(leader, isr=(leader,))

    def move_leader(self, topic: str, partition: int, leader: int) -> None:
        self.states[(topic, partition)] = State(leader, isr=(leader,))
