"""Transactions across crashes on three real brokers (docs/transactions.md): ``__transaction_state`` and
``__consumer_offsets`` replicated three times; the broker leading a transactional id's ``__transaction_state``
partition SIGKILLed while confluent-kafka's producer is inside a transaction; and a consume-transform-produce
loop (a subprocess, integration_tests/txn_processor.py) that survives the SIGKILL of its group coordinator between
``send_offsets_to_transaction`` and the commit, then its own SIGKILL inside a transaction, with every input
record in the read_committed output exactly once."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import pytest

from metaq.admin.broker_groups import BrokerGroups, CoordinatorGroup
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, partition_for
from metaq.broker.coordinator.txn_partition import TRANSACTION_TOPIC
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import BrokerCluster, topic_leaders
from metaq.testing.group import GroupHarness, SteadyProducer, check_delivery, owned_by_hooks
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import ZooKeeperEndpoint
from metaq.zkclient import session
from zk_layout import ZkLayout

pytestmark = pytest.mark.timeout(300)

STATE_PARTITIONS = 3  # __transaction_state and __consumer_offsets partitions
FAST = {"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 200,
        "replica.fetch.backoff.ms": 200, "transaction.state.log.num.partitions": STATE_PARTITIONS,
        "offsets.topic.num.partitions": STATE_PARTITIONS, "group.min.session.timeout.ms": 1000}
LOADING = (confluent_kafka.KafkaError.NOT_COORDINATOR, confluent_kafka.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
           confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE)


@dataclass
class Cluster:
    brokers: list[BrokerProcess]
    zk_connect: str
    restart: list[BrokerProcess] = field(default_factory=list)  # killed by a test: started again after it

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def topic(self, prefix: str, partitions: int = 2) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        with session(self.zk_connect) as client:
            create_topic(ZkLayout(client), name, partitions, replication_factor=3,
                         config={"min.insync.replicas": "2"})
        wait_until(lambda: len(topic_leaders(self.brokers[0].bootstrap, name)) == partitions, 30, f"topic {name}")
        return name

    def leader(self, topic: str, partition: int) -> int:
        with session(self.zk_connect) as client:
            state = ZkLayout(client).partition_state(topic, partition)
        return -1 if state is None else int(state.leader)

    def replicas(self, topic: str) -> list[int]:
        with session(self.zk_connect) as client:
            assignment = ZkLayout(client).topic_assignment(topic)
        assert assignment is not None, f"{topic} does not exist"
        return sorted(len(r) for r in assignment.partitions.values())

    def kill(self, broker_id: int) -> None:
        """SIGKILL a broker (started again by the ``healed`` fixture after the test)."""
        self.restart.append(self.brokers[broker_id])
        self.brokers[broker_id].kill()

    def live_bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b not in self.restart)


@pytest.fixture(scope="module")
def cluster(zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory: Path = tmp_path_factory.mktemp("txn-failover")
    zk_connect = f"{zk_server.connect_string}/metaq-txn-failover-{uuid.uuid4().hex}"
    brokers = BrokerCluster(zk_connect, directory)
    try:
        for i in range(3):
            brokers.add(i, **FAST)
        cluster = Cluster(brokers.brokers, zk_connect)
        _create_internal_topics(cluster)
        yield cluster
    finally:
        brokers.stop()


def _create_internal_topics(cluster: Cluster) -> None:
    """``__transaction_state`` and ``__consumer_offsets`` made by the brokers (FindCoordinator) while all three
    are up: a topic created while one is down gets two replicas."""
    probe = cluster.topic("probe", 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "probe"})
    producer.init_transactions(60)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "probe"})

    def offsets_answer() -> bool:
        try:
            consumer.committed([confluent_kafka.TopicPartition(probe, 0)], timeout=30)
        except confluent_kafka.KafkaException as e:  # the partition's leader still loading it: ask again
            if e.args[0].code() not in LOADING:
                raise
            return False
        return True

    try:
        wait_until(offsets_answer, 90, "the group coordinator of the new __consumer_offsets", interval=0.5)
    finally:
        consumer.close()


@pytest.fixture
def healed(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, with the brokers a test killed started again after it."""
    yield cluster
    while cluster.restart:
        cluster.restart.pop().start()


def read_committed(bootstrap: str, topic: str, partitions: int = 2) -> list[str]:
    """Every value of ``topic`` a read_committed consumer gets, read up to the end of each partition."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "enable.partition.eof": True})
    c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[str] = []
    at_end: set[int] = set()
    try:
        def more() -> bool:
            msg = c.poll(0.5)
            if msg is None:
                return False
            if msg.error() is None:
                got.append(msg.value().decode())
                at_end.discard(msg.partition())
            elif msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                raise AssertionError(msg.error())
            return len(at_end) == partitions
        wait_until(more, 60, f"the end of {topic}")
    finally:
        c.close()
    return got


def test_coordinator_failover_mid_transaction(healed: Cluster) -> None:
    """SIGKILL the broker leading the transactional id's ``__transaction_state`` partition (RF 3) while the
    producer has written a transaction: the producer commits it through the new coordinator, then a new
    instance with the same transactional.id fences it and commits its own; read_committed sees both
    transactions once and the aborted one of the fenced instance nowhere."""
    cluster = healed
    assert cluster.replicas(TRANSACTION_TOPIC) == [3] * STATE_PARTITIONS
    topic = cluster.topic("failover-out")
    txn_id = f"failover-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 60000,
            "message.timeout.ms": 60000}
    first = confluent_kafka.Producer(conf)
    first.init_transactions(60)
    coordinator = cluster.leader(TRANSACTION_TOPIC, partition_for(txn_id, STATE_PARTITIONS))

    first.begin_transaction()
    for i in range(20):
        first.produce(topic, f"a{i}".encode(), partition=i % 2)
    first.flush(60)
    cluster.kill(coordinator)
    wait_until(lambda: cluster.leader(TRANSACTION_TOPIC, partition_for(txn_id, STATE_PARTITIONS))
               not in (coordinator, -1), 60, "a new transaction coordinator")
    first.commit_transaction(120)

    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(60)
    second = confluent_kafka.Producer({**conf, "bootstrap.servers": cluster.live_bootstrap()})
    second.init_transactions(120)  # fences the first and aborts its open transaction
    second.begin_transaction()
    for i in range(10):
        second.produce(topic, f"b{i}".encode(), partition=i % 2)
    second.commit_transaction(120)
    with pytest.raises(confluent_kafka.KafkaException):
        first.commit_transaction(60)

    got = read_committed(cluster.live_bootstrap(), topic)
    assert sorted(got) == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(10)])


class Processor:
    """integration_tests/txn_processor.py in a subprocess, its stdout lines collected."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, txn_id: str,
                 hold_at: int = 0, release: Path | None = None) -> None:
        args = [sys.executable, "-m", "integration_tests.txn_processor", "--bootstrap", bootstrap, "--input", source,
                "--output", sink, "--group", group, "--transactional-id", txn_id]
        if hold_at:
            assert release is not None
            args += ["--hold-at", str(hold_at), "--release", str(release)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).resolve().parent.parent)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, name="txn-processor-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def said(self, line: str) -> bool:
        if self.proc.poll() not in (None, 0):
            raise AssertionError(f"the processor exited with {self.proc.returncode}: {self.lines[-5:]}")
        return line in self.lines

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def test_consume_transform_produce_exactly_once_across_crashes(healed: Cluster, tmp_path: Path) -> None:
    """The processor holds a transaction whose offsets it has sent (TxnOffsetCommit done) while the test
    SIGKILLs the group's coordinator; released, it commits through the failover, then writes part of the next
    transaction and is SIGKILLed in it. A new processor (same group, same transactional.id) finishes the
    input: each input record is in the read_committed output exactly once. (With the offsets of a transaction
    held in the old coordinator's memory only, the new coordinator committed none of the held transaction's
    offsets and the new processor wrote its records again.)"""
    cluster = healed
    source = cluster.topic("ctp-in")
    sink = cluster.topic("ctp-out")
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    txn_id = f"ctp-{uuid.uuid4().hex[:6]}"
    total = 300
    feeder = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(total):
        feeder.produce(source, f"v{i}".encode(), partition=i % 2)
    assert feeder.flush(60) == 0

    release = tmp_path / "release"
    first = Processor(cluster.bootstrap, source, sink, group, txn_id, hold_at=100, release=release)
    try:
        wait_until(lambda: first.said("HOLD"), 120, "the processor holding a transaction with its offsets sent")
        assert cluster.replicas(OFFSETS_TOPIC) == [3] * STATE_PARTITIONS
        index = partition_for(group, STATE_PARTITIONS)
        coordinator = cluster.leader(OFFSETS_TOPIC, index)
        cluster.kill(coordinator)
        wait_until(lambda: cluster.leader(OFFSETS_TOPIC, index) not in (coordinator, -1), 60,
                   "a new group coordinator")
        release.touch()
        wait_until(lambda: first.said("STALLED"), 120, "the held transaction committed, the next one open")
    finally:
        first.kill()
    committed = [line for line in first.lines if line.startswith("COMMITTED")]
    assert committed, first.lines

    second = Processor(cluster.live_bootstrap(), source, sink, group, txn_id)
    try:
        assert second.proc.wait(180) == 0, second.lines
    finally:
        second.kill()
    got = read_committed(cluster.live_bootstrap(), sink)
    assert len(got) == total and sorted(got) == sorted(f"out-v{i}" for i in range(total)), \
        f"{len(got)} records, {len(got) - len(set(got))} duplicates"


GROUP_MEMBER = {"group.coordination": "kafka", "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 2000, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 10000,
                "auto.commit.interval.ms": 300, "auto.offset.reset": "smallest"}


def _described(cluster: Cluster, group: str) -> CoordinatorGroup | None:
    with session(cluster.zk_connect) as client:
        return BrokerGroups(ZkLayout(client), timeout_ms=2000).list().groups.get(group)


def _settled(cluster: Cluster, harness: GroupHarness, partitions: int, members: int) -> CoordinatorGroup | None:
    """The coordinator's Stable group once it and the members' logs agree on a balanced split."""
    owned = owned_by_hooks(harness)
    sizes = sorted(len(parts) for parts in owned.values())
    if len(owned) != members or sum(sizes) != partitions or set().union(*owned.values()) != set(range(partitions)) \
            or sizes[-1] - sizes[0] > 1:
        return None
    group = _described(cluster, harness.group)
    if group is None or group.state != "Stable" or len(group.members) != members:
        return None
    return group if sorted(len(m.assignment) for m in group.members) == sizes else None


def test_group_coordinator_sigkilled_during_a_rebalance(cluster: Cluster, tmp_path: Path) -> None:
    """Three metaq members (group.coordination=kafka, cooperative-sticky) under a steady producer; one leaves
    while another is stopped (SIGSTOP), which holds the group in the rebalance the leave started; then the broker
    leading the group's ``__consumer_offsets`` partition (RF 3) is SIGKILLed. The new coordinator loads the
    group and its offsets from the replicated partition (the member that left still in it until its session
    expires there); the members find it and settle on a balanced split: every acked record read, no commit
    backwards, duplicates only inside the uncommitted window of a member that gave its partitions up as lost
    while no coordinator answered its heartbeats. The module's last test: the killed broker stays down (a test
    after it would take ``healed``, which starts it again)."""
    assert cluster.replicas(OFFSETS_TOPIC) == [3] * STATE_PARTITIONS
    partitions = 6
    topic = cluster.topic("rebal", partitions)
    group = f"rebal-{uuid.uuid4().hex[:6]}"
    index = partition_for(group, STATE_PARTITIONS)
    harness = GroupHarness(cluster.zk_connect, group, topic, tmp_path, properties=GROUP_MEMBER)
    producer = SteadyProducer(cluster.zk_connect, topic, rate=50, acks="all")
    producer.start()
    try:
        first = harness.add_member()
        held = harness.add_member(**{"session.timeout.ms": 30000})  # outlives its pause at either coordinator
        leaving = harness.add_member()
        wait_until(lambda: _settled(cluster, harness, partitions, 3), 90,
                   lambda: f"3 members: {owned_by_hooks(harness)}",
                   interval=0.25)
        before = _described(cluster, group)
        assert before is not None
        coordinator = before.coordinator
        assert coordinator == cluster.leader(OFFSETS_TOPIC, index)
        held.pause()
        leaving.stop()  # commits and leaves: the coordinator waits for the held member to rejoin
        wait_until(lambda: getattr(_described(cluster, group), "state", None) == "PreparingRebalance", 30,
                   "the leave to start a rebalance", interval=0.1)
        killed_at = time.monotonic()
        cluster.kill(coordinator)
        wait_until(lambda: cluster.leader(OFFSETS_TOPIC, index) not in (coordinator, -1), 60,
                   "a new leader of the group's __consumer_offsets partition")
        held.resume()
        wait_until(lambda: _settled(cluster, harness, partitions, 2), 90,
                   lambda: f"2 members: {owned_by_hooks(harness)}",
                   interval=0.25)
        after = _described(cluster, group)
        assert after is not None and after.coordinator not in (coordinator, -1)
        assert first.alive and held.alive
        acked = producer.finish()
        wait_until(lambda: not check_delivery(harness.events(), acked).missing, 60, "every acked record read",
                   interval=0.5)
    finally:
        producer.finish()
        harness.stop_all()
    gave_up = {e["member"] for e in harness.events() if e["name"] == "partitions_lost" and e["time"] > killed_at}
    check_delivery(harness.events(), acked, failed_members=gave_up).assert_ok()
