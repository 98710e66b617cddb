"""metaq's ZooKeeper consumer against real Apache Kafka brokers (3.9.2, 2.8.2, 1.1.1; the RF-3 cluster on 3.9.2):
the rows of docs/compatibility.md about consuming, committing and following leaders.

- ``metaq topics create --zookeeper`` on a real cluster: the real controller elects the leaders.
- A group of two ``metaq verifiable-consumer`` processes (the stream API) and two listener members: everything read
  once, committed to ZooKeeper, a SIGKILLed member's partitions taken over from the committed offsets.
- ``offsets.storage=kafka`` (dual commit) against the real group coordinator, and max(zookeeper, kafka) on claim.
- The listener's delivery lease (nothing delivered while ZooKeeper is unreachable) and retry-then-skip.
- A 3-broker cluster, RF 3: the group follows the leaders through a SIGKILL and a controlled shutdown.

One broker per version for the module (``kafka_broker``), a topic and a group per test; the records come from
confluent-kafka, so that only the consumer side is metaq's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import tenacity
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from integration_tests.peers import confluent_committed, zk_committed
from metaq.consumer import Consumer
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.connector import ZookeeperConsumerConnector
from metaq.consumer.listener import MessageConsumer
from metaq.consumer.membership import RebalanceListener
from metaq.consumer.message import MessageAndMetadata
from metaq.testing.apache_kafka import ApacheKafkaBroker, ApacheKafkaCluster
from metaq.testing.group import (
    GatedProxy,
    GroupHarness,
    check_delivery,
    drain_stream,
    wait_consuming,
    wait_drained,
)
from metaq.testing.kafka_fixtures import kafka_matrix
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until
from metaq.zkclient import close as close_zk
from metaq.zkclient import connect as connect_zk
from zk_layout import PartitionState, ZkLayout

pytestmark = pytest.mark.timeout(300)

FAST_GROUP = {"zookeeper.session.timeout.ms": 3000, "auto.commit.interval.ms": 200, "rebalance.backoff.ms": 300,
              "rebalance.max.retries": 20, "auto.offset.reset": "smallest"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def layout(kafka_broker: ApacheKafkaBroker) -> Iterator[ZkLayout]:
    zk = connect_zk(kafka_broker.zk_connect, session_timeout_ms=10000)
    try:
        yield ZkLayout(zk)
    finally:
        close_zk(zk)


def produce(bootstrap: str, topic: str, partitions: int, count: int, *, start: int = 0,
            **conf: Any) -> set[tuple[int, int]]:
    """``count`` records round-robin over the partitions; the acknowledged (partition, offset)s."""
    acked: set[tuple[int, int]] = set()
    errors: list[Any] = []

    def done(err: Any, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.add((msg.partition(), msg.offset()))

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(start, start + count):
        producer.produce(topic, value=b"m%05d" % i, partition=i % partitions, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors
    return acked


class SteadyProducer(threading.Thread):
    """confluent-kafka producing at a steady rate until stopped; what was acknowledged (``acked``)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 200.0, **conf: Any) -> None:
        super().__init__(name="steady-confluent-producer", daemon=True)
        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                                   "message.timeout.ms": 120000, **conf})
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.stop_event = threading.Event()
        self.acked: set[tuple[int, int]] = set()
        self.failed: list[str] = []

    def _done(self, err: Any, msg: confluent_kafka.Message) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.add((msg.partition(), msg.offset()))

    def run(self) -> None:
        i = 0
        while not self.stop_event.wait(1.0 / self.rate):
            self._producer.produce(self.topic, value=b"s%06d" % i, partition=i % self.partitions,
                                   on_delivery=self._done)
            self._producer.poll(0)
            i += 1
        self._producer.flush(120)

    def finish(self) -> set[tuple[int, int]]:
        self.stop_event.set()
        self.join(150)
        return set(self.acked)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> log end offset (confluent-kafka's watermarks)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watermarks")})
    try:
        return {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=20)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


# -- 1. metaq topics create --zookeeper ---------------------------------------------------------------------------

@kafka_matrix("metaq topics create --zookeeper")
def test_metaq_topics_create_on_a_real_cluster(kafka_broker: ApacheKafkaBroker, layout: ZkLayout) -> None:
    """metaq writes what Kafka's TopicCommand --zookeeper writes (the assignment and the config), and the real
    controller creates the partition states: leaders are elected, the config applies, confluent-kafka produces and
    consumes."""
    topic = unique("created")
    done = subprocess.run([sys.executable, "-m", "metaq", "topics", "create", "--zookeeper", kafka_broker.zk_connect,
                           "--topic", topic, "--partitions", "3", "--topic-config", "retention.ms=3600000"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    def states() -> dict[tuple[str, int], PartitionState | None]:
        return layout.partition_states([(topic, p) for p in range(3)])

    wait_until(lambda: all(s is not None and s.leader == kafka_broker.broker_id for s in states().values()), 60,
               lambda: f"the real controller to elect leaders: {states()}")
    assert all(s is not None and s.leader_epoch == 0 for s in states().values())
    acked = produce(kafka_broker.bootstrap, topic, 3, 30)
    consumer = confluent_kafka.Consumer({**kafka_broker.librdkafka_config(), "group.id": unique("check"),
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(3)])
    seen: set[tuple[int, int]] = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < len(acked) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add((message.partition(), message.offset()))
    finally:
        consumer.close()
    assert seen == acked
    admin = AdminClient(kafka_broker.librdkafka_config())
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"  # the broker applies metaq's /config/topics node


# -- 2. a ZooKeeper group: stream members (processes) and listener members ---------------------------------------

@kafka_matrix("ZooKeeper consumer group: stream and listener members, SIGKILL takeover")
def test_zookeeper_group_reads_once_and_survives_a_sigkill(kafka_broker: ApacheKafkaBroker, layout: ZkLayout,
                                                          tmp_path: Path) -> None:
    """Two verifiable-consumer processes under a steady producer; one is SIGKILLed and the other takes over
    from the committed offsets: nothing acknowledged is lost, duplicates only in the victim's uncommitted window,
    and the final ZooKeeper offsets are the log end. Then two listener members of another group read the same
    topic: every record exactly once, committed to the end."""
    topic = unique("group")
    partitions = 4
    kafka_broker.create_topic(topic, partitions=partitions)
    group = GroupHarness(kafka_broker.zk_connect, "streams", topic, tmp_path / "group", FAST_GROUP)
    producer = SteadyProducer(kafka_broker.bootstrap, topic, partitions)
    producer.start()
    try:
        members = [group.add_member() for _ in range(2)]
        for m in members:
            m.wait_started(60)
        group.wait_stable(layout, partitions, members=2, timeout=60)
        wait_consuming(group, range(partitions), time.monotonic(), 30)
        victim = members[1]
        victim.kill()
        group.wait_stable(layout, partitions, members=1, timeout=30)
        wait_consuming(group, range(partitions), time.monotonic(), 30)
        acked = producer.finish()
        assert not producer.failed, producer.failed[:3]
        assert not wait_drained(group, acked, 60).missing
        end = end_offsets(kafka_broker.bootstrap, topic, partitions)
        wait_until(lambda: zk_committed(layout, "streams", topic) == end, 30,
                   lambda: f"committed {zk_committed(layout, 'streams', topic)} == log end {end}")
        assert members[0].stop() == 0, f"the survivor did not exit cleanly; see {members[0].log_path}"
    finally:
        producer.stop_event.set()
        for m in group.members:
            m.kill()
    report = check_delivery(group.events(), acked, failed_members=[victim.name])
    report.assert_ok()

    # the listener API: two members in one process, each record once
    handled: Counter[tuple[int, int]] = Counter()
    lock = threading.Lock()

    class Recorder:
        executor = None

        def receive_message(self, message: MessageAndMetadata) -> None:
            with lock:
                handled[(message.partition, message.offset)] += 1

    props = {"group.id": "listeners", "zookeeper.connect": kafka_broker.zk_connect, **FAST_GROUP}
    with MessageConsumer({**props, "metaq.recover.dir": str(tmp_path / "r0")}) as first, \
            MessageConsumer({**props, "metaq.recover.dir": str(tmp_path / "r1")}) as second:
        for member in (first, second):
            member.subscribe(topic, 1 << 20, Recorder()).complete_subscribe()
        wait_until(lambda: zk_committed(layout, "listeners", topic) == end, 60,
                   lambda: f"listener commits {zk_committed(layout, 'listeners', topic)} == log end {end}")
        owners = {o.rsplit("-", 1)[0] for (t, _), o in layout.owners("listeners").items() if t == topic}
    assert len(owners) == 2, f"both listener members own partitions: {owners}"
    assert set(handled) == {(p, o) for p, e in end.items() for o in range(e)}
    assert max(handled.values()) == 1


# -- 3. offsets.storage=kafka and dual commit --------------------------------------------------------------------

@kafka_matrix("offsets.storage=kafka, dual commit, max(zookeeper, kafka) on claim")
def test_kafka_offset_storage_against_the_real_coordinator(kafka_broker: ApacheKafkaBroker,
                                                          layout: ZkLayout) -> None:
    """A storage=kafka consumer's clean close commits what it consumed to the real coordinator
    (confluent-kafka's ``committed()`` reads it) and to ZooKeeper; on the next claim each partition resumes
    from the larger of the two, whichever store is ahead."""
    topic = unique("kstore")
    group = unique("kg")
    kafka_broker.create_topic(topic, partitions=3)
    sent = produce(kafka_broker.bootstrap, topic, 3, 60)
    props = {"group.id": group, "zookeeper.connect": kafka_broker.zk_connect, "consumer.timeout.ms": 1000,
             "offsets.storage": "kafka", "offsets.channel.backoff.ms": 200, **FAST_GROUP}
    with Consumer(props) as consumer:
        first = drain_stream(consumer, topic, 30)
    assert len(first) == 30
    # an idle partition is committed at its reset position (0)
    expected = {p: 1 + max((o for pp, o in first if pp == p), default=-1) for p in range(3)}
    assert confluent_committed(kafka_broker.bootstrap, group, topic, 3) == expected
    assert zk_committed(layout, group, topic) == expected

    # half of the 60 records read: the two least-read partitions are below offset 16 (the sum is 30). Put Kafka
    # ahead on one (a standard client's commit), ZooKeeper ahead on the other
    kafka_ahead, zk_ahead = sorted(range(3), key=lambda p: expected[p])[:2]
    committer = confluent_kafka.Consumer({**kafka_broker.librdkafka_config(), "group.id": group})
    try:
        committer.commit(offsets=[confluent_kafka.TopicPartition(topic, kafka_ahead, 18)], asynchronous=False)
    finally:
        committer.close()
    layout.write_offset(group, topic, zk_ahead, 17)
    assert zk_committed(layout, group, topic)[kafka_ahead] < 18
    assert confluent_committed(kafka_broker.bootstrap, group, topic, 3)[zk_ahead] < 17
    starts = {**expected, kafka_ahead: 18, zk_ahead: 17}
    rest = {(p, o) for p, o in sent if o >= starts[p]}
    with Consumer(props) as consumer:
        second = drain_stream(consumer, topic, len(rest), linger=0.5)
        consumer.commit_offsets()
    assert second == rest
    assert confluent_committed(kafka_broker.bootstrap, group, topic, 3) == {p: 20 for p in range(3)}
    assert zk_committed(layout, group, topic) == {p: 20 for p in range(3)}


# -- 4. the listener's delivery lease and retry-then-skip ---------------------------------------------------------

class Flaky:
    """A listener taking ``work_s`` per message that fails on the values in ``failing``; notes every call."""

    executor = None

    def __init__(self, failing: set[bytes], work_s: float) -> None:
        self.failing = failing
        self.work_s = work_s
        self.lock = threading.Lock()
        self.started: list[float] = []
        self.attempts: Counter[bytes] = Counter()
        self.handled: Counter[bytes] = Counter()

    def receive_message(self, message: MessageAndMetadata) -> None:
        with self.lock:
            self.started.append(time.monotonic())
            self.attempts[message.value] += 1
        time.sleep(self.work_s)
        if message.value in self.failing:
            raise ValueError(f"cannot handle {message.value!r}")
        with self.lock:
            self.handled[message.value] += 1

    def started_between(self, after: float, before: float) -> int:
        with self.lock:
            return sum(1 for t in self.started if after < t < before)


class SessionEvents:
    """The consumer's ZooKeeper session events with their times."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []

    def factory(self, config: ConsumerConfig, listener: RebalanceListener | None) -> ZookeeperConsumerConnector:
        connector = ZookeeperConsumerConnector(config, rebalance_listener=listener)
        connector.add_session_listener(lambda state: self.events.append((state, time.monotonic())))
        return connector

    def first(self, state: str, after: float) -> float | None:
        return min((t for s, t in self.events if s == state and t > after), default=None)


@kafka_matrix("listener: delivery lease and retry-then-skip")
def test_listener_lease_and_retry_then_skip(kafka_broker: ApacheKafkaBroker, layout: ZkLayout,
                                            tmp_path: Path) -> None:
    """One listener member whose ZooKeeper connection (only its own: the broker keeps its session) goes through
    a proxy. (a) The proxy drops it for 1.5 s mid-stream: no listener call starts between SUSPENDED and
    CONNECTED. (b) Every 25th message fails: it is tried 1 + ``metaq.max.fetch.retries`` times, set aside in the
    recover store, and the committed offsets still reach the log end."""
    topic = unique("lease")
    kafka_broker.create_topic(topic, partitions=2)
    values = [b"m%05d" % i for i in range(200)]
    failing = set(values[::25])
    produce(kafka_broker.bootstrap, topic, 2, len(values))
    end = end_offsets(kafka_broker.bootstrap, topic, 2)
    zk_host, zk_port = kafka_broker.zk_hosts.split(",")[0].rsplit(":", 1)
    proxy = GatedProxy(zk_host, int(zk_port))
    listener = Flaky(failing, 0.01)
    session = SessionEvents()
    group = unique("lease")
    props = {"group.id": group, "zookeeper.connect": f"127.0.0.1:{proxy.port}{kafka_broker.chroot}",
             "metaq.recover.dir": str(tmp_path / "recover"), "metaq.max.fetch.retries": 2,
             "metaq.recover.interval.ms": 3600000, **FAST_GROUP}
    try:
        with MessageConsumer(props, connector_factory=session.factory, retry_wait=tenacity.wait_fixed(0.005),
                             recover_initial_delay_s=3600) as consumer:
            consumer.subscribe(topic, 1 << 20, listener).complete_subscribe()
            wait_until(lambda: sum(listener.attempts.values()) >= 20, 60, "20 deliveries")
            down_at = time.monotonic()
            proxy.close()
            time.sleep(1.5)  # the fault: this member's ZooKeeper is unreachable (below the session timeout)
            proxy.open()
            wait_until(lambda: session.first("CONNECTED", down_at) is not None, 30, "the session to reconnect")
            suspended_at = session.first("SUSPENDED", down_at)
            connected_at = session.first("CONNECTED", down_at)
            assert suspended_at is not None and connected_at is not None
            during_outage = listener.started_between(suspended_at, connected_at)
            store = consumer.recover_store(topic)
            wait_until(lambda: set(listener.handled) == set(values) - failing, 60, "every good message handled")
            wait_until(lambda: sorted(e.to_message().value for e in store.list()) == sorted(failing), 30,
                       "the failing messages set aside")
            wait_until(lambda: zk_committed(layout, group, topic) == end, 30,
                       lambda: f"committed {zk_committed(layout, group, topic)} == log end {end}")
    finally:
        proxy.stop()
    assert during_outage == 0, f"{during_outage} listener calls started while ZooKeeper was SUSPENDED"
    assert [s for s, _ in session.events if s == "LOST"] == [], "the outage was meant to keep the session"
    assert max(listener.handled.values()) == 1
    assert all(listener.attempts[v] == 3 for v in failing), {v: listener.attempts[v] for v in failing}


# -- 5. a 3-broker cluster: following the real controller's leader moves -----------------------------------------

@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("consumer group follows leaders: 3 brokers, RF 3, SIGKILL and controlled shutdown",
                    f"Kafka {V3_9}")
def test_group_follows_leaders_through_a_kill_and_a_controlled_shutdown(kafka_cluster: ApacheKafkaCluster,
                                                                       tmp_path: Path) -> None:
    """A metaq member consumes an RF-3 topic under an acks=all producer while the leader of partition 0 is
    SIGKILLed, then the leader of partition 1 is stopped with SIGTERM (Kafka's controlled shutdown): the real
    controller moves the leaders, metaq follows the state nodes, and nothing acknowledged is lost. (The
    module's cluster serves this test alone: it is not restarted, and killed at the end.)"""
    topic = unique("rf3")
    partitions = 3
    kafka_cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    zk = connect_zk(kafka_cluster.zk_connect, session_timeout_ms=10000)
    layout = ZkLayout(zk)
    group = GroupHarness(kafka_cluster.zk_connect, "rf3", topic, tmp_path / "group", FAST_GROUP)
    producer = SteadyProducer(kafka_cluster.bootstrap, topic, partitions, acks="all")

    def state(partition: int) -> PartitionState:
        current = layout.partition_state(topic, partition)
        assert current is not None
        return current

    stopped: list[int] = []
    try:
        wait_until(lambda: all(len(state(p).isr) == 3 for p in range(partitions)), 60, "full ISRs")
        producer.start()
        member = group.add_member()
        member.wait_started(60)
        group.wait_stable(layout, partitions, members=1, timeout=60)
        wait_consuming(group, range(partitions), time.monotonic(), 30)
        for partition, stop in ((0, ApacheKafkaBroker.kill), (1, ApacheKafkaBroker.stop)):
            leader = state(partition).leader
            if leader in stopped:  # the first move made it lead here too: stop a broker still up instead
                leader = next(b.broker_id for b in kafka_cluster.brokers if b.broker_id not in stopped)
            since = time.monotonic()
            stop(kafka_cluster.broker(leader))
            stopped.append(leader)
            wait_until(lambda: all(state(p).leader not in (-1, *stopped) for p in range(partitions)), 60,
                       lambda: f"new leaders off {stopped}: {[state(p) for p in range(partitions)]}")
            wait_consuming(group, range(partitions), since, 60)
        acked = producer.finish()
        assert not producer.failed, producer.failed[:3]
        report = wait_drained(group, acked, 90)
        assert not report.missing, f"{len(report.missing)} acknowledged records never consumed"
        assert member.stop() == 0, f"the member did not exit cleanly; see {member.log_path}"
    finally:
        producer.stop_event.set()
        for m in group.members:
            m.kill()
        close_zk(zk)
        for broker in kafka_cluster.brokers:  # the cluster served this test alone: no controlled shutdown to wait
            broker.kill()
    check_delivery(group.events(), acked).assert_ok()
    print(json.dumps({"acked": len(acked), "duplicates": report.duplicates, "stopped": stopped}))
