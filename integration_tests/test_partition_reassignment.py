"""Partition reassignment and leader election on real metaq broker processes (docs/reassignment.md), driven by
Kafka's own ``kafka-reassign-partitions`` (2.8.2 with ``--zookeeper``, 3.9.2 with ``--bootstrap-server``) and
``kafka-leader-election`` (3.9.2), and by ``metaq topics reassign``.

One cluster for the module: broker 4 starts first, so it is the controller until a test kills it; brokers 1, 2, 3
hold the topics. Each test makes its own topics. The module's own ZooKeeper has a tickTime of 2 s, so that broker 3,
with a 30 s session, stays registered (so a valid target) while it is paused: its reassignment stays half-way as
long as the test needs (cancellation, controller failover) without depending on timing.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.admin import ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse

from integration_tests.peers import confluent_consume
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.cli.main import main as cli_main
from metaq.errors import ErrorCode
from metaq.testing.broker import request
from metaq.testing.group import GroupHarness, SteadyProducer, check_delivery, wait_consuming, wait_drained
from metaq.testing.kafka_tools import run_kafka_tool
from metaq.testing.kafka_versions import V2_8, V3_9
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import embedded_server
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import PartitionState, ZkLayout

pytestmark = pytest.mark.timeout(300)
log = logging.getLogger(__name__)

# replica.fetch.max.bytes 256 KiB: a throttled move advances in steps small against its throttle (a rate is measured)
FAST = {"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 200,
        "replica.fetch.backoff.ms": 200, "replica.high.watermark.checkpoint.interval.ms": 500,
        "replica.fetch.max.bytes": 262144}
THROTTLE = 1048576  # bytes/s


class Cluster:
    def __init__(self, zk_connect: str, directory: Path) -> None:
        self.zk_connect = zk_connect
        self.directory = directory
        self.brokers: dict[int, BrokerProcess] = {}
        self.client = connect(zk_connect, session_timeout_ms=10000)
        self.layout = ZkLayout(self.client)

    def start(self, broker_id: int) -> BrokerProcess:
        # broker 3 outlives a pause (the module docstring)
        properties = {**FAST, "zookeeper.session.timeout.ms": 30000} if broker_id == 3 else FAST
        broker = self.brokers.get(broker_id) or BrokerProcess(self.zk_connect, broker_id, self.directory,
                                                                properties=properties)
        self.brokers[broker_id] = broker
        return broker.start()

    @property
    def bootstrap(self) -> str:
        """Brokers 1 and 2, never paused (a client whose bootstrap broker is paused waits for it)."""
        return f"{self.brokers[1].bootstrap},{self.brokers[2].bootstrap}"

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
        for broker in self.brokers.values():  # SIGKILL: a clean shutdown's leadership moves are not under test
            broker.resume()
            broker.kill()
        self.client.stop()
        self.client.close()


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with embedded_server(tmp_path_factory, tick_time_ms=2000) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(zk_server.connect_string, tmp_path_factory.mktemp("reassign"))
    try:
        cluster.start(4)  # first: the controller
        wait_until(lambda: (c := cluster.layout.controller()) is not None and c.broker_id == 4, 30,
                   "broker 4 to be the controller")
        for broker_id in (1, 2, 3):  # one after the other: a child dies with the thread that started it
            cluster.start(broker_id)
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


def _log_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.exists() else 0


def _fill(bootstrap: str, topic: str, partitions: int, total: int) -> None:
    """``total`` bytes of 10 KB records spread over the partitions, acknowledged by all replicas."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"x" * 10000
    for i in range(total // len(value)):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


THROTTLED_BROKER_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


class ConfluentGroup:
    """One confluent-kafka group member (subscribe; the broker's group coordinator) on its own thread, keeping the
    (partition, offset) of every record it reads."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.read: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                        "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000}
        self._thread = threading.Thread(target=self._run, args=(topic,), name=f"test-confluent-{group}", daemon=True)
        self._thread.start()

    def _run(self, topic: str) -> None:
        consumer = confluent_kafka.Consumer(self._config)
        try:
            consumer.subscribe([topic])
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:  # errors while leaders move: the client retries
                    self.read.add((msg.partition(), msg.offset()))
        except Exception as e:  # reported by the test
            self.errors.append(repr(e))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive() and not self.errors, self.errors


@pytest.mark.compat("kafka-reassign-partitions --zookeeper moves a topic under acks=all load", f"Kafka {V2_8}")
@pytest.mark.compat("kafka-reassign-partitions --throttle holds a move to its rate", f"Kafka {V2_8}")
def test_kafka_28_zookeeper_tool_moves_a_topic_under_load(cluster: Cluster, tmp_path: Path) -> None:
    """``kafka-reassign-partitions --zookeeper --execute --throttle`` (2.8.2) moves both partitions (4 MiB) from
    {1,2} to {2,3} while a metaq producer writes with acks=all, a metaq group (ZooKeeper) and a confluent-kafka
    group (the brokers' coordinator) read. The tool sets the moving brokers' rates and the topic's throttled
    replicas (sources leader-, destinations follower-throttled), and broker 3, the new replica of both
    partitions, fills its logs no faster than the throttle. Nothing acknowledged is lost, both groups read
    everything, broker 1's copies are deleted and the request node is gone."""
    topic = cluster.topic("moved28", {0: [1, 2], 1: [2, 1]})
    _fill(cluster.bootstrap, topic, 2, 4 * THROTTLE)
    group = GroupHarness(cluster.zk_connect, "g28", topic, tmp_path / "group")
    member = group.add_member()
    confluent = ConfluentGroup(cluster.bootstrap, "g28-confluent", topic)
    producer = SteadyProducer(cluster.zk_connect, topic, rate=200, acks="all")
    producer.start()
    samples: list[tuple[float, int]] = []
    try:
        wait_until(lambda: len(producer.acked) > 100, 30, "records acknowledged before the move")
        wait_consuming(group, [0, 1], 0, 60)
        target = {0: [2, 3], 1: [3, 2]}
        (tmp_path / "plan.json").write_text(plan(topic, target))
        size = _log_bytes(cluster.log_dir(1, topic, 0)) + _log_bytes(cluster.log_dir(2, topic, 1))
        out = kafka(V2_8, "kafka-reassign-partitions", "--zookeeper", cluster.zk_connect,
                    "--reassignment-json-file", str(tmp_path / "plan.json"), "--execute", "--throttle", str(THROTTLE))
        assert "Successfully started" in out and f"The inter-broker throttle limit was set to {THROTTLE} B/s" in out
        config = cluster.layout.topic_config(topic)
        assert config is not None and config.config["leader.replication.throttled.replicas"] == "0:1,0:2,1:1,1:2"
        assert config.config["follower.replication.throttled.replicas"] == "0:3,1:3"
        for broker in (1, 2, 3):
            assert {k: cluster.layout.broker_config(str(broker)).get(k) for k in THROTTLED_BROKER_KEYS} == \
                dict.fromkeys(THROTTLED_BROKER_KEYS, str(THROTTLE))

        def copied() -> bool:
            samples.append((time.monotonic(), _log_bytes(cluster.log_dir(3, topic, 0))
                            + _log_bytes(cluster.log_dir(3, topic, 1))))
            return samples[-1][1] >= size

        wait_until(copied, 120, lambda: f"broker 3 copied {size} bytes: {samples[-1:]}", interval=0.1)
        cluster.wait_moved(topic, target)
        before = len(producer.acked)
        wait_until(lambda: len(producer.acked) > before + 50, 30, "records acknowledged after the move")
    finally:
        acked = producer.finish()
    first = next((t, moved) for t, moved in samples if moved > 0)
    rate = (samples[-1][1] - first[1]) / (samples[-1][0] - first[0])
    log.info("a throttled move copied %d bytes at %.3f x the throttle", samples[-1][1], rate / THROTTLE)
    assert rate <= 1.3 * THROTTLE, f"the move ran at {rate / THROTTLE:.2f} x its throttle"
    assert producer.failed == 0
    report = wait_drained(group, acked, 60)
    report.assert_ok()
    member.stop()
    try:
        wait_until(lambda: set(acked) <= confluent.read, 60,
                   lambda: f"the confluent group to read everything: {len(set(acked) - confluent.read)} missing")
    finally:
        confluent.stop()
    read_all(cluster.brokers[2].bootstrap, topic, 2, acked)
    for partition in (0, 1):
        wait_until(lambda p=partition: not cluster.log_dir(1, topic, p).exists(), 20, f"broker 1's {topic}-{partition}")
        assert cluster.log_dir(3, topic, partition).exists()
    assert check_delivery(group.events(), acked).missing == []
    code, verified = metaq_cli(cluster, "topics", "reassign", "--verify", "--reassignment-json-file",
                               str(tmp_path / "plan.json"))  # clears the throttles, as Kafka's --verify
    assert code == 0 and verified["throttles_cleared"]
    config = cluster.layout.topic_config(topic)
    assert config is not None and not {"leader.replication.throttled.replicas",
                                       "follower.replication.throttled.replicas"} & set(config.config)
    for broker in (1, 2, 3):
        assert not set(THROTTLED_BROKER_KEYS) & set(cluster.layout.broker_config(str(broker)))


@pytest.mark.compat("kafka-reassign-partitions --bootstrap-server --execute/--verify", f"Kafka {V3_9}")
def test_kafka_39_bootstrap_tool_moves_a_topic_and_verifies(cluster: Cluster, tmp_path: Path) -> None:
    """``kafka-reassign-partitions --bootstrap-server`` (3.9.2: AlterPartitionReassignments, then
    ListPartitionReassignments for ``--verify``) under acks=all load: nothing acknowledged is lost."""
    topic = cluster.topic("moved39", {0: [1, 2], 1: [2, 1]})
    producer = SteadyProducer(cluster.zk_connect, topic, rate=200, acks="all")
    producer.start()
    target = {0: [2, 3], 1: [3, 2]}
    (tmp_path / "plan.json").write_text(plan(topic, target))
    try:
        wait_until(lambda: len(producer.acked) > 100, 30, "records acknowledged before the move")
        out = kafka(V3_9, "kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                    "--reassignment-json-file", str(tmp_path / "plan.json"), "--execute",
                    "--throttle", str(50 * THROTTLE))  # IncrementalAlterConfigs on the topic and each broker
        assert "Successfully started partition reassignments" in out, out
        assert cluster.layout.broker_config("3")["follower.replication.throttled.rate"] == str(50 * THROTTLE)
        cluster.wait_moved(topic, target)
    finally:
        acked = producer.finish()
    assert producer.failed == 0
    out = kafka(V3_9, "kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                "--reassignment-json-file", str(tmp_path / "plan.json"), "--verify")
    assert f"Reassignment of partition {topic}-0 is completed." in out, out
    assert f"Reassignment of partition {topic}-1 is completed." in out, out
    assert "Clearing broker-level throttles" in out, out
    for broker in (1, 2, 3, 4):
        assert not set(THROTTLED_BROKER_KEYS) & set(cluster.layout.broker_config(str(broker)))
    config = cluster.layout.topic_config(topic)
    assert config is not None and "leader.replication.throttled.replicas" not in config.config
    read_all(cluster.brokers[2].bootstrap, topic, 2, acked)
    for partition in (0, 1):
        wait_until(lambda p=partition: not cluster.log_dir(1, topic, p).exists(), 20, f"broker 1's {topic}-{partition}")


@pytest.mark.compat("kafka-reassign-partitions --cancel half-way", f"Kafka {V3_9}")
def test_cancel_half_way_reverts_to_the_original_replicas(cluster: Cluster, tmp_path: Path) -> None:
    """Broker 3 is paused, so the move to {2,3} cannot complete; ``--cancel`` (AlterPartitionReassignments with
    null replicas) puts the partition back on {1,2} and nothing is listed in progress any more."""
    topic = cluster.topic("cancelled", {0: [1, 2]})
    (tmp_path / "plan.json").write_text(plan(topic, {0: [2, 3]}))
    cluster.brokers[3].pause()
    try:
        kafka(V3_9, "kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap,
              "--reassignment-json-file", str(tmp_path / "plan.json"), "--execute")
        assignment = cluster.layout.topic_assignment(topic)
        assert assignment is not None
        assert assignment.partitions[0] == (2, 3, 1) and assignment.adding_replicas == {0: (3,)}
        assert assignment.removing_replicas == {0: (1,)}
        out = kafka(V3_9, "kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap,
                    "--reassignment-json-file", str(tmp_path / "plan.json"), "--cancel", "--preserve-throttles")
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in out, out
        wait_until(lambda: cluster.moved(topic, {0: [2, 1]}), 30, "the original replicas back")
    finally:
        cluster.brokers[3].resume()
    state = cluster.layout.partition_state(topic, 0)
    assert state is not None and state.leader in (1, 2)


def test_a_new_controller_resumes_a_move_after_a_sigkill(cluster: Cluster, tmp_path: Path) -> None:
    """The controller (broker 4) is SIGKILLed while the move waits for paused broker 3; a new controller
    resumes from the topic node's adding/removing replicas and completes it once broker 3 catches up."""
    topic = cluster.topic("failover", {0: [1, 2]})
    producer = SteadyProducer(cluster.zk_connect, topic, rate=200, acks="all")
    producer.start()
    cluster.brokers[3].pause()
    try:
        wait_until(lambda: len(producer.acked) > 50, 30, "records acknowledged before the move")
        assert cluster.layout.request_reassignment({(topic, 0): (2, 3)})  # what --zookeeper --execute writes
        wait_until(lambda: (a := cluster.layout.topic_assignment(topic)) is not None and a.adding_replicas, 30,
                   "the move started")
        controller = cluster.layout.controller()
        assert controller is not None and controller.broker_id == 4
        cluster.brokers[4].kill()
        wait_until(lambda: (c := cluster.layout.controller()) is not None and c.broker_id != 4, 30,
                   "a new controller")
    finally:
        cluster.brokers[3].resume()
    try:
        cluster.wait_moved(topic, {0: [2, 3]})
    finally:
        acked = producer.finish()
    assert producer.failed == 0
    read_all(cluster.brokers[2].bootstrap, topic, 1, acked)
    wait_until(lambda: not cluster.log_dir(1, topic, 0).exists(), 20, "broker 1's copy deleted")
    cluster.start(4)


def test_replication_factor_one_to_three_on_a_live_topic(cluster: Cluster, tmp_path: Path) -> None:
    """The same path raises the replication factor: [1] -> [1,2,3] while producing; the records written before
    are on the new replicas (read from broker 3 once it leads) and the ISR is all three."""
    topic = cluster.topic("grown", {0: [1]})
    producer = SteadyProducer(cluster.zk_connect, topic, rate=200, acks="all")
    producer.start()
    (tmp_path / "plan.json").write_text(plan(topic, {0: [1, 2, 3]}))
    try:
        wait_until(lambda: len(producer.acked) > 50, 30, "records acknowledged before the move")
        assert metaq_cli(cluster, "topics", "reassign", "--execute", "--reassignment-json-file",
                         str(tmp_path / "plan.json"))[0] == 0
        cluster.wait_moved(topic, {0: [1, 2, 3]})
        wait_until(lambda: (s := cluster.layout.partition_state(topic, 0)) is not None and len(s.isr) == 3, 30,
                   "all three in the ISR")
    finally:
        acked = producer.finish()
    assert producer.failed == 0
    read_all(cluster.brokers[1].bootstrap, topic, 1, acked)
    assert cluster.log_dir(3, topic, 0).exists() and cluster.log_dir(2, topic, 0).exists()


@pytest.mark.compat("kafka-leader-election preferred and unclean", f"Kafka {V3_9}")
def test_kafka_leader_election_preferred_and_unclean(cluster: Cluster, tmp_path: Path) -> None:
    """``kafka-leader-election`` (3.9.2, ElectLeaders v2): preferred moves leadership back to the first replica
    and reports a partition already led by it; unclean elects a live out-of-sync replica of a partition whose
    only in-sync replica (broker 5) is gone."""
    topic = cluster.topic("elect", {0: [1, 2], 1: [2, 1]})
    state = cluster.layout.partition_state_versioned(topic, 0)
    assert state is not None and state[0].leader == 1
    # leadership moved to broker 2 (as after broker 1 restarted), the ISR unchanged
    cluster.layout.set_partition_state(topic, 0, PartitionState(2, state[0].leader_epoch + 1, state[0].isr,
                                                                state[0].controller_epoch), state[1])
    (tmp_path / "partitions.json").write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0},
                                                                          {"topic": topic, "partition": 1}]}))
    out = kafka(V3_9, "kafka-leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type",
                "PREFERRED", "--path-to-json-file", str(tmp_path / "partitions.json"))
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out, out
    assert f"Valid replica already elected for partitions {topic}-1" in out, out
    assert (s := cluster.layout.partition_state(topic, 0)) is not None and s.leader == 1

    offline = "offline"
    cluster.layout.create_topic(offline, {0: [5, 1]}, {0: PartitionState(-1, 3, (5,), 1)})
    out = kafka(V3_9, "kafka-leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type",
                "UNCLEAN", "--topic", offline, "--partition", "0")
    assert f"Successfully completed leader election (UNCLEAN) for partitions {offline}-0" in out, out
    state = cluster.layout.partition_state(offline, 0)
    assert state is not None and state.leader == 1 and state.isr == (1,) and state.leader_epoch == 4


def metaq_cli(cluster: Cluster, *args: str) -> tuple[int, Any]:
    """``metaq <args> --zookeeper ... --json`` in this process: (exit code, parsed output)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main([*args, "--zookeeper", cluster.zk_connect, "--json"])
    return code, json.loads(out.getvalue())


def test_metaq_topics_reassign_generate_execute_verify_cancel(cluster: Cluster, tmp_path: Path) -> None:
    """``metaq topics reassign``: --generate proposes {2,3} for every partition, --execute moves them under
    acks=all load (describe shows the replicas being added while broker 3 is paused, --verify says in progress,
    exit 1, then completed), and --cancel puts a half-way move back."""
    topic = cluster.topic("viacli", {0: [1, 2], 1: [2, 1]})
    (tmp_path / "topics.json").write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    code, generated = metaq_cli(cluster, "topics", "reassign", "--generate", "--topics-to-move-json-file",
                                str(tmp_path / "topics.json"), "--broker-list", "2,3")
    assert code == 0
    proposed = {e["partition"]: e["replicas"] for e in generated["proposed"]}
    assert {p: sorted(r) for p, r in proposed.items()} == {0: [2, 3], 1: [2, 3]}
    (tmp_path / "plan.json").write_text(plan(topic, proposed))
    producer = SteadyProducer(cluster.zk_connect, topic, rate=200, acks="all")
    producer.start()
    cluster.brokers[3].pause()
    try:
        wait_until(lambda: len(producer.acked) > 50, 30, "records acknowledged before the move")
        code, started = metaq_cli(cluster, "topics", "reassign", "--execute", "--reassignment-json-file",
                                  str(tmp_path / "plan.json"), "--throttle", str(50 * THROTTLE))
        assert code == 0 and {e["partition"]: e["replicas"] for e in started["current"]} == {0: [1, 2], 1: [2, 1]}
        config = cluster.layout.topic_config(topic)
        assert config is not None and config.config["follower.replication.throttled.replicas"] == "0:3,1:3"
        assert cluster.layout.broker_config("3")["follower.replication.throttled.rate"] == str(50 * THROTTLE)
        wait_until(lambda: metaq_cli(cluster, "topics", "describe", topic)[1]["topics"][0]["partitions"][0]
                   ["adding_replicas"] == [3], 30, "describe shows broker 3 being added")
        code, verified = metaq_cli(cluster, "topics", "reassign", "--verify", "--reassignment-json-file",
                                   str(tmp_path / "plan.json"))
        assert code == 1 and {e["status"] for e in verified["partitions"]} == {"in progress"}
    finally:
        cluster.brokers[3].resume()
    try:
        wait_until(lambda: metaq_cli(cluster, "topics", "reassign", "--verify", "--reassignment-json-file",
                                     str(tmp_path / "plan.json"))[0] == 0, 60, "--verify to say completed")
    finally:
        acked = producer.finish()
    assert producer.failed == 0
    config = cluster.layout.topic_config(topic)  # --verify cleared the throttles once completed
    assert config is not None and "follower.replication.throttled.replicas" not in config.config
    assert not set(THROTTLED_BROKER_KEYS) & set(cluster.layout.broker_config("3"))
    read_all(cluster.brokers[2].bootstrap, topic, 2, acked)
    for partition in (0, 1):
        wait_until(lambda p=partition: not cluster.log_dir(1, topic, p).exists(), 20, f"broker 1's {topic}-{partition}")

    half = cluster.topic("viacli-cancel", {0: [1, 2]})
    (tmp_path / "half.json").write_text(plan(half, {0: [2, 3]}))
    cluster.brokers[3].pause()
    try:
        assert metaq_cli(cluster, "topics", "reassign", "--execute", "--reassignment-json-file",
                         str(tmp_path / "half.json"))[0] == 0
        wait_until(lambda: (a := cluster.layout.topic_assignment(half)) is not None and a.adding_replicas, 30,
                   "the move started")
        code, cancelled = metaq_cli(cluster, "topics", "reassign", "--cancel", "--reassignment-json-file",
                                    str(tmp_path / "half.json"))
        assert code == 0 and cancelled["cancelled"] == [{"topic": half, "partition": 0}]
        wait_until(lambda: cluster.moved(half, {0: [2, 1]}), 30, "the original replicas back")
    finally:
        cluster.brokers[3].resume()


def test_metaq_elect_leaders_unclean(cluster: Cluster) -> None:
    """``metaq topics elect-leaders --type unclean`` (ElectLeaders to the controller) gives a partition whose
    only in-sync replica is gone a live leader."""
    cluster.layout.create_topic("offline-cli", {0: [5, 2]}, {0: PartitionState(-1, 3, (5,), 1)})
    code, result = metaq_cli(cluster, "topics", "elect-leaders", "offline-cli", "--type", "unclean")
    assert code == 0 and result["leaders"] == [{"topic": "offline-cli", "partition": 0, "leader": 2,
                                                "result": "elected"}]


def test_a_broker_that_is_not_the_controller_answers_not_controller(cluster: Cluster) -> None:
    """As Kafka's ZooKeeper-mode brokers: the client looks the controller up again (Metadata's controller_id)."""
    controller = cluster.layout.controller()
    assert controller is not None
    other = next(b for i, b in cluster.brokers.items() if i != controller.broker_id and i != 3)
    req = ListPartitionReassignmentsRequest[0](timeout_ms=1000, topics=None)
    assert request(other.bootstrap, req, ListPartitionReassignmentsResponse, 0).error_code == ErrorCode.NOT_CONTROLLER
    answer = request(cluster.brokers[controller.broker_id].bootstrap, req, ListPartitionReassignmentsResponse, 0)
    assert answer.error_code == 0 and answer.topics == []
