"""Clients follow leader changes (issue 9, "Clients"): three real brokers, RF 3, min.insync.replicas 2, and
the leader of a partition killed with SIGKILL while real clients produce and consume. The metaq consumer
group, metaq.Producer with acks=all, a confluent-kafka group, kcat and kafka-python keep going after one
metadata refresh plus the election: nothing acknowledged is lost, and no record is read twice by a group
whose members did not fail."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import BrokerCluster
from metaq.testing.group import GroupHarness, check_delivery, wait_consuming, wait_drained
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

pytestmark = pytest.mark.timeout(240)

SESSION_MS = 4000
FAST = {"zookeeper.session.timeout.ms": SESSION_MS, "replica.lag.time.max.ms": 3000,
        "replica.fetch.wait.max.ms": 200, "replica.fetch.backoff.ms": 200,
        "replica.high.watermark.checkpoint.interval.ms": 500}
PARTITIONS = 3


def _connect(zk_layout: ZkLayout) -> str:
    host, port = zk_layout.client.hosts[0]
    return f"{host}:{port}{zk_layout.client.chroot or ''}"


def _leader(zk_layout: ZkLayout, topic: str, partition: int = 0) -> int:
    state = zk_layout.partition_state(topic, partition)
    assert state is not None
    return int(state.leader)


def _cluster(broker_cluster: BrokerCluster, zk_layout: ZkLayout, topic: str,
             partitions: int = PARTITIONS) -> list[BrokerProcess]:
    brokers = [broker_cluster.add(i, **FAST) for i in range(3)]
    create_topic(zk_layout, topic, partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    for b in brokers:
        wait_until(lambda b=b: len(peers_leaders(b.bootstrap, topic)) == partitions, 30,
                   f"{topic} on broker {b.broker_id}")
    return brokers


def peers_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from metaq.testing.broker import topic_leaders

    try:
        return topic_leaders(bootstrap, topic)
    except Exception:  # the broker is still starting
        return {}


class AcksAllProducer(threading.Thread):
    """metaq.Producer with acks=all at a steady rate over every partition; remembers what was acknowledged
    (partition, offset) -> value, and the failures."""

    def __init__(self, zk_connect: str, topic: str, rate: float = 200.0) -> None:
        super().__init__(name="test-acks-all-producer", daemon=True)
        from metaq.producer import Producer

        self.producer = Producer({"zookeeper.connect": zk_connect, "acks": "all", "linger.ms": 5,
                                  "retries": 1000, "retry.backoff.ms": 100})
        self.topic = topic
        self.rate = rate
        self.stop_event = threading.Event()
        self.acked: dict[tuple[int, int], bytes] = {}
        self.acked_at: list[float] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def _done(self, value: bytes, fut: Any) -> None:
        try:
            md = fut.result()
        except Exception as e:
            with self._lock:
                self.failures.append(repr(e))
            return
        with self._lock:
            self.acked[(md.partition, md.offset)] = value
            self.acked_at.append(time.monotonic())

    def run(self) -> None:
        seq = 0
        start = time.monotonic()
        while not self.stop_event.is_set():
            value = b"%012d" % seq
            self.producer.send(self.topic, value).add_done_callback(lambda f, v=value: self._done(v, f))
            seq += 1
            ahead = seq / self.rate - (time.monotonic() - start)
            if ahead > 0:
                self.stop_event.wait(ahead)
        self.producer.flush(120)
        self.producer.close()

    def finish(self) -> dict[tuple[int, int], bytes]:
        self.stop_event.set()
        self.join(180)
        assert not self.is_alive(), "the producer did not finish"
        return dict(self.acked)

    def acks_after(self, since: float) -> int:
        with self._lock:
            return sum(1 for t in self.acked_at if t > since)


def _read_back(bootstrap: str, topic: str, acked: dict[tuple[int, int], bytes]) -> list[tuple[int, int]]:
    """Acknowledged (partition, offset)s that do not hold the acknowledged value on ``bootstrap``'s broker."""
    wrong = []
    for p in range(PARTITIONS):
        wanted = {o: v for (q, o), v in acked.items() if q == p}
        if not wanted:
            continue
        got = peers.confluent_consume(bootstrap, topic, p, confluent_kafka.OFFSET_BEGINNING, max(wanted) + 1,
                                      timeout=60)
        stored = {m.offset: m.value for m in got}
        wrong += [(p, o) for o, v in wanted.items() if stored.get(o) != v]
    return wrong


def test_metaq_group_and_acks_all_producer_follow_a_killed_leader(broker_cluster: BrokerCluster,
                                                                 zk_layout: ZkLayout, tmp_path: Path) -> None:
    """kill -9 the broker leading partition 0 while metaq.Producer (acks=all) writes and a two-member metaq
    consumer group reads: the producer's retries find the new leader (0 failed sends, every acknowledged
    record at its offset afterwards), and the group consumes every acknowledged record exactly once (its
    members did not fail, so there is no uncommitted window to re-read)."""
    topic = "follow"
    brokers = _cluster(broker_cluster, zk_layout, topic)
    connect = _connect(zk_layout)
    group = GroupHarness(connect, "follow-group", topic, tmp_path / "group")
    producer = AcksAllProducer(connect, topic)
    producer.start()
    members = [group.add_member() for _ in range(2)]
    for m in members:
        m.wait_started()
    group.wait_stable(zk_layout, PARTITIONS, members=2, timeout=60)
    wait_consuming(group, range(PARTITIONS), time.monotonic(), 30)

    victim = _leader(zk_layout, topic, 0)
    killed_at = time.monotonic()
    brokers[victim].kill()
    wait_until(lambda: _leader(zk_layout, topic, 0) not in (victim, -1), 30, "a new leader of partition 0")
    elected = time.monotonic() - killed_at
    wait_until(lambda: producer.acks_after(killed_at + elected) > 0, 30, "an acknowledged produce after failover")
    wait_consuming(group, range(PARTITIONS), killed_at + elected, 30)
    resumed = time.monotonic() - killed_at
    time.sleep(1.0)  # keep producing against the new leaders for a moment
    acked = producer.finish()
    assert not producer.failures, producer.failures[:3]
    assert len(acked) > 100
    drained = wait_drained(group, acked, 60)
    assert not drained.missing, f"{len(drained.missing)} acknowledged records never consumed: {drained.missing[:5]}"
    for m in members:
        assert m.stop() == 0
    report = check_delivery(group.events(), acked)
    report.assert_ok()
    assert report.duplicates == 0
    survivor = next(b for b in brokers if b.broker_id != victim)
    assert _read_back(survivor.bootstrap, topic, acked) == []
    print(f"\nfailover: elected after {elected:.2f}s, group consuming again after {resumed:.2f}s; "
          f"{len(acked)} acked, {report.duplicates} duplicates")


def _third_party_readers(bootstrap: str, topic: str, count: int) -> dict[str, Callable[[], list[peers.Msg]]]:
    """Name -> a function reading ``count`` records of partition 0 from the beginning with that client."""
    return {
        "kcat": lambda: peers.kcat_consume(bootstrap, topic, 0, "beginning", count),
        "kafka-python": lambda: _kafka_python(bootstrap, topic, count),
    }


def _kafka_python(bootstrap: str, topic: str, count: int) -> list[peers.Msg]:
    import kafka

    consumer = peers.kafka_python_consumer(bootstrap)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return peers.kafka_python_read(consumer, count)
    finally:
        consumer.close()
