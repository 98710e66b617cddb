"""``group.coordination=kafka``: metaq's consumer API on Kafka's group protocol, against a real metaq broker.

Members split the partitions through the broker's coordinator (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat), rebalance when one joins, leaves or is SIGKILLed (session expiry), commit with their generation
and resume from OffsetFetch; a metaq member and a confluent-kafka (librdkafka) member share a group; the
committed offsets are what ``metaq groups describe`` and confluent's ``committed()`` show.

One broker for the module, with group.min.session.timeout.ms lowered so that a dead member is noticed in ~2 s.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from metaq.broker.process import BrokerProcess
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.consumer.message import MessageAndMetadata
from metaq.errors import ConfigError
from metaq.producer import Producer
from metaq.testing.broker import SharedBroker
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import ZooKeeperEndpoint
from zk_layout import split_connect

SESSION_MS = 2000
HEARTBEAT_MS = 300
BROKER = {"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 4}
MEMBER = {"group.coordination": "kafka", "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
          "max.poll.interval.ms": 10000, "auto.commit.interval.ms": 300, "auto.offset.reset": "smallest",
          "consumer.timeout.ms": 100, "rebalance.backoff.ms": 500, "rebalance.max.retries": 10}


@pytest.fixture(scope="module")
def coord(zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    hosts, base = split_connect(zk_server.connect_string)
    zk_connect = f"{hosts}{base}/metaq-coord-{uuid.uuid4().hex}"
    broker = BrokerProcess(zk_connect, 0, tmp_path_factory.mktemp("coord"), properties=BROKER).start()
    try:
        yield SharedBroker(broker, zk_connect)
    finally:
        broker.stop()


def _produce(zk_connect: str, topic: str, partitions: int, per_partition: int) -> set[tuple[int, int]]:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, f"m-{i}".encode(), partition=i % partitions)
                   for i in range(per_partition * partitions)]
        producer.flush()
        return {(f.result().partition, f.result().offset) for f in futures}


class Reader:
    """One in-process member reading its single stream on a thread, recording (partition, offset)."""

    def __init__(self, coord: SharedBroker, group: str, topic: str, **properties: Any) -> None:
        self.consumer = Consumer({"group.id": group, "zookeeper.connect": coord.zk_connect, **MEMBER, **properties})
        [self.stream] = self.consumer.create_message_streams({topic: 1})[topic]
        self.seen: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"reader-{group}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                message: MessageAndMetadata = next(self.stream)
            except ConsumerTimeoutError:
                continue
            except StopIteration:
                return
            self.seen.append((message.partition, message.offset))

    def owned(self) -> set[int]:
        return {p for _, p in self.consumer.state.owned}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.shutdown()


def _split(readers: list[Reader], partitions: int) -> bool:
    owned = [r.owned() for r in readers]
    union = set().union(*owned)
    return (union == set(range(partitions)) and sum(len(o) for o in owned) == partitions
            and all(r.consumer.state.state == "STABLE" for r in readers))


def test_config_rejects_an_unknown_coordination() -> None:
    with pytest.raises(ConfigError, match="group.coordination"):
        Consumer({"group.id": "g", "zookeeper.connect": "127.0.0.1:1", "group.coordination": "etcd"})


def test_two_members_split_and_rebalance_on_leave(coord: SharedBroker) -> None:
    topic = coord.topic("split", partitions=6)
    group = "split-g"
    acked = _produce(coord.zk_connect, topic, 6, 20)
    a = Reader(coord, group, topic)
    b = Reader(coord, group, topic)
    try:
        wait_until(lambda: _split([a, b], 6) and a.owned() and b.owned(), 30, "two members to split 6 partitions")
        assert len(a.owned()) == len(b.owned()) == 3  # range: 3 + 3
        wait_until(lambda: set(a.seen) | set(b.seen) >= acked, 30, "every message read")
        more = _produce(coord.zk_connect, topic, 6, 10)
        wait_until(lambda: set(a.seen) | set(b.seen) >= more, 30, "the second batch read")
        b.close()  # commits, then LeaveGroup: the survivor takes everything now, not after the session timeout
        wait_until(lambda: _split([a], 6), 30, "the survivor to own all 6 partitions")
        last = _produce(coord.zk_connect, topic, 6, 10)
        wait_until(lambda: set(a.seen) >= last, 30, "the third batch read by the survivor")
        counts = Counter(a.seen + b.seen)
        assert set(counts) == acked | more | last
        assert [key for key, n in counts.items() if n > 1] == []  # clean hand-over: committed before revoking
    finally:
        a.close()
        b.close()
