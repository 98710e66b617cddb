"""Partition reassignment and leader election on real metaq broker processes (docs/reassignment.md), driven by
Kafka's own ``kafka-reassign-partitions`` (2.8.2 with ``--zookeeper``, 3.9.2 with ``--bootstrap-server``) and
``kafka-leader-election`` (3.9.2), and by ``metaq topics reassign``.

One cluster for the module: broker 4 starts first, so it is the controller until a test kills it; brokers 1, 2, 3
hold the topics. Each test makes its own topics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.peers import confluent_consume
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.apache_kafka import V2_8, V3_9, run_kafka_tool
from metaq.testing.group import GroupHarness, SteadyProducer, check_delivery, wait_consuming, wait_drained
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import ZooKeeperEndpoint, own_chroot
from metaq.zkclient import connect
from zk_layout import ZkLayout

pytestmark = pytest.mark.timeout(300)

FAST = {"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 200,
        "replica.fetch.backoff.ms": 200, "replica.high.watermark.checkpoint.interval.ms": 500}


class Cluster:
    def __init__(self, zk_connect: str, directory: Path) -> None:
        self.zk_connect = zk_connect
        self.directory = directory
        self.brokers: dict[int, BrokerProcess] = {}
        self.client = connect(zk_connect, session_timeout_ms=10000)
        self.layout = ZkLayout(self.client)

    def start(self, broker_id: int) -> BrokerProcess:
        broker = self.brokers.get(broker_id) or BrokerProcess(self.zk_connect, broker_id, self.directory,
                                                                properties=FAST)
        self.brokers[broker_id] = broker
        return broker.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.proc is not None and b.proc.poll() is None)

    def log_dir(self, broker_id: int, topic: str, partition: int) -> Path:
        return self.directory / f"logs-{broker_id}" / f"{topic}-{partition}"

    def topic(self, name: str, assignment: dict[int, list[int]]) -> str:
        create_topic(self.layout, name, len(assignment), assignment=assignment)
        wait_until(lambda: all((s := self.layout.partition_state(name, p)) is not None and
                               set(s.isr) == set(r) for p, r in assignment.items()), 30, f"{name} in sync")
        return name

    def moved(self, topic: str, target: dict[int, list[int]]) -> bool:
        """Whether every partition of ``topic`` is on ``target`` alone, nothing in progress."""
        assignment = self.layout.topic_assignment(topic)
        return (assignment is not None and self.layout.reassignment_request() is None
                and {p: list(r) for p, r in assignment.partitions.items()} == target
                and not assignment.adding_replicas and not assignment.removing_replicas)

    def wait_moved(self, topic: str, target: dict[int, list[int]], timeout: float = 60) -> None:
        wait_until(lambda: self.moved(topic, target), timeout,
                   lambda: f"{topic} moved to {target}: {self.layout.topic_assignment(topic)}")
        for partition, replicas in target.items():
            wait_until(lambda p=partition, r=replicas: (s := self.layout.partition_state(topic, p)) is not None
                       and s.leader in r and set(s.isr) <= set(r), 30, f"{topic}-{partition} led inside {replicas}")

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.resume()
            broker.stop()
        self.client.stop()
        self.client.close()


@pytest.fixture(scope="module")
def cluster(zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_chroot(zk_server, "reassign") as zk_connect:
        cluster = Cluster(zk_connect, tmp_path_factory.mktemp("reassign"))
        try:
            for broker_id in (4, 1, 2, 3):  # 4 first: the controller
                cluster.start(broker_id)
                if broker_id == 4:
                    wait_until(lambda: (c := cluster.layout.controller()) is not None and c.broker_id == 4, 30,
                               "broker 4 to be the controller")
            yield cluster
        finally:
            cluster.stop()


def plan(topic: str, target: dict[int, list[int]]) -> str:
    """Kafka's reassignment JSON (``--reassignment-json-file``)."""
    return json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": r}
                                                    for p, r in sorted(target.items())]})


def kafka(version: str, tool: str, *args: str) -> str:
    done = run_kafka_tool(version, tool, list(args))
    assert done.returncode == 0, f"Kafka {version} {tool} {args} exited {done.returncode}:\n{done.stdout}\n" \
                                 f"{done.stderr}"
    return done.stdout


def read_all(bootstrap: str, topic: str, partitions: int, acked: dict[tuple[int, int], Any]) -> None:
    """Every acknowledged record is read back from the new replicas (a consumer of the Kafka client)."""
    for partition in range(partitions):
        wanted = sorted(o for p, o in acked if p == partition)
        if not wanted:
            continue
        got = confluent_consume(bootstrap, topic, partition, 0, wanted[-1] + 1, timeout=30)
        offsets = {m.offset for m in got}
        assert set(wanted) <= offsets, f"{topic}-{partition}: {len(set(wanted) - offsets)} acknowledged lost"


def test_kafka_28_zookeeper_tool_moves_a_topic_under_load(cluster: Cluster, tmp_path: Path) -> None:
    """``kafka-reassign-partitions --zookeeper --execute`` (2.8.2) moves both partitions from {1,2} to {2,3}
    while a metaq producer writes with acks=all and a metaq group reads: nothing acknowledged is lost, the
    group reads everything, broker 1's copies are deleted and the request node is gone."""
    topic = cluster.topic("moved28", {0: [1, 2], 1: [2, 1]})
    group = GroupHarness(cluster.zk_connect, "g28", topic, tmp_path / "group")
    member = group.add_member()
    producer = SteadyProducer(cluster.zk_connect, topic, rate=200, acks="all")
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) > 100, 30, "records acknowledged before the move")
        wait_consuming(group, [0, 1], 0, 60)
        target = {0: [2, 3], 1: [3, 2]}
        (tmp_path / "plan.json").write_text(plan(topic, target))
        out = kafka(V2_8, "kafka-reassign-partitions", "--zookeeper", cluster.zk_connect,
                    "--reassignment-json-file", str(tmp_path / "plan.json"), "--execute")
        assert "Successfully started" in out, out
        cluster.wait_moved(topic, target)
        before = len(producer.acked)
        wait_until(lambda: len(producer.acked) > before + 50, 30, "records acknowledged after the move")
    finally:
        acked = producer.finish()
    assert producer.failed == 0
    report = wait_drained(group, acked, 60)
    report.assert_ok()
    member.stop()
    read_all(cluster.brokers[2].bootstrap, topic, 2, acked)
    for partition in (0, 1):
        wait_until(lambda p=partition: not cluster.log_dir(1, topic, p).exists(), 20, f"broker 1's {topic}-{partition}")
        assert cluster.log_dir(3, topic, partition).exists()
    assert check_delivery(group.events(), acked).missing == []
