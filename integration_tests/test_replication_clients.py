"""Clients follow leader changes: three real brokers, RF 3, min.insync.replicas 2, and
the leader of a partition killed with SIGKILL while real clients produce and consume. The metaq consumer
group, metaq.Producer with acks=all, a confluent-kafka group, kcat and kafka-python keep going after one
metadata refresh plus the election: nothing acknowledged is lost, and no record is read twice by a group
whose members did not fail."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from integration_tests import peers
from integration_tests.test_replication import _connect, _replica_logs, cleanup  # noqa: F401 (a fixture)
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


def _leader(zk_layout: ZkLayout, topic: str, partition: int = 0) -> int:
    state = zk_layout.partition_state(topic, partition)
    assert state is not None
    return int(state.leader)


def _cluster(broker_cluster: BrokerCluster, zk_layout: ZkLayout, topic: str, partitions: int = PARTITIONS,
             leader_of: Callable[[list[BrokerProcess]], int] | None = None, **config: Any) -> list[BrokerProcess]:
    """Three brokers (``config`` added to their settings) and an RF-3 topic; ``leader_of(brokers)``: the
    broker to lead its (one) partition."""
    brokers = [broker_cluster.add(i, **FAST, **config) for i in range(3)]
    if leader_of is None:
        create_topic(zk_layout, topic, partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    else:
        first = leader_of(brokers)
        create_topic(zk_layout, topic, 1, assignment={0: [first, *(i for i in range(3) if i != first)]},
                     config={"min.insync.replicas": "2"})
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


class _Reader(threading.Thread):
    """Reads partition 0 of ``topic`` from the beginning with one third-party client until ``count``
    records arrived (or the deadline passed), keeping what it read."""

    def __init__(self, name: str, read: Callable[[_Reader], None], count: int) -> None:
        super().__init__(name=f"test-reader-{name}", daemon=True)
        self.client = name
        self._read = read
        self.count = count
        self.got: list[peers.Msg] = []
        self.error: BaseException | None = None
        self.done_at = 0.0

    def run(self) -> None:
        try:
            self._read(self)
        except BaseException as e:  # reported by the test
            self.error = e
        self.done_at = time.monotonic()


def _confluent_group(bootstrap: str, topic: str, deadline: float) -> Callable[[_Reader], None]:
    def read(reader: _Reader) -> None:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": "failover-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "auto.commit.interval.ms": 500, "fetch.wait.max.ms": 100,
            "session.timeout.ms": 30000, "topic.metadata.refresh.interval.ms": 1000})
        try:
            consumer.subscribe([topic])
            while len(reader.got) < reader.count and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue  # transport errors while the leader is down are expected; the client retries
                reader.got.append(peers.Msg(msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(),
                                            msg.value()))
        finally:
            consumer.close()

    return read


def _kafka_python(bootstrap: str, topic: str, deadline: float) -> Callable[[_Reader], None]:
    def read(reader: _Reader) -> None:
        import kafka

        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None,
                                       enable_auto_commit=False, fetch_max_wait_ms=100, metadata_max_age_ms=1000)
        try:
            consumer.assign([kafka.TopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            while len(reader.got) < reader.count and time.monotonic() < deadline:
                for records in consumer.poll(200).values():
                    reader.got += [peers.Msg(r.partition, r.offset, r.timestamp, r.key, r.value) for r in records]
        finally:
            consumer.close()

    return read


def _kcat(bootstrap: str, topic: str, deadline: float) -> Callable[[_Reader], None]:
    def read(reader: _Reader) -> None:
        proc = subprocess.Popen([peers.KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                                 "-f", peers.FORMAT, "-q", "-c", str(reader.count), "-X", "fetch.wait.max.ms=100",
                                 "-X", "topic.metadata.refresh.interval.ms=1000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        reader.got = peers.parse_kcat_output(out)

    return read


def test_third_party_consumers_read_through_a_leader_kill(broker_cluster: BrokerCluster,
                                                         zk_layout: ZkLayout) -> None:
    """A confluent-kafka consumer group, kcat and kafka-python read a RF-3 partition while its leader, also
    the group's coordinator, is killed (kill -9) and confluent-kafka keeps producing acks=all: each reads
    every record once, in order, at its acknowledged offset (the group resumes from its commit, which the
    new coordinator has)."""
    from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, partition_for

    def coordinator(brokers: list[BrokerProcess]) -> int:
        """The group's coordinator (creating __consumer_offsets): the broker the test kills leads both."""
        bootstrap = ",".join(b.bootstrap for b in brokers)
        # commits name existing partitions only (UNKNOWN_TOPIC_OR_PARTITION otherwise, as Kafka): a probe topic,
        # since the test's own topic is created once the coordinator is known
        create_topic(zk_layout, "coordinator-probe", 1)
        wait_until(lambda: _commit_ok(bootstrap, "failover-group", "coordinator-probe", 0), 60, "the offsets topic")
        return _leader(zk_layout, OFFSETS_TOPIC, partition_for("failover-group", 50))

    topic = "readers"
    brokers = _cluster(broker_cluster, zk_layout, topic, partitions=1, leader_of=coordinator)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    produce = {"acks": "all", "retries": 1000, "retry.backoff.ms": 200, "message.timeout.ms": 120000,
               "enable.idempotence": False}
    first = peers.confluent_produce(bootstrap, topic, 0, [(b"k", b"a%d" % i, 1_700_000_000_000 + i)
                                                          for i in range(300)], **produce)
    total = 600
    deadline = time.monotonic() + 150
    readers = [_Reader("confluent-group", _confluent_group(bootstrap, topic, deadline), total),
               _Reader("kafka-python", _kafka_python(bootstrap, topic, deadline), total),
               _Reader("kcat", _kcat(bootstrap, topic, deadline), total)]
    for r in readers:
        r.start()
    in_client = [r for r in readers if r.client != "kcat"]
    wait_until(lambda: all(len(r.got) >= 300 for r in in_client), 60, "the readers to read the first records")
    # the group committed what it read: a re-read after the failover would be outside its uncommitted window
    wait_until(lambda: _committed(bootstrap, "failover-group", topic) == 300, 30, "the group's commit of 300")
    victim = _leader(zk_layout, topic)
    assert victim == _leader(zk_layout, OFFSETS_TOPIC, partition_for("failover-group", 50))
    killed_at = time.monotonic()
    brokers[victim].kill()
    second = peers.confluent_produce(bootstrap, topic, 0, [(b"k", b"b%d" % i, 1_700_000_001_000 + i)
                                                           for i in range(300)], **produce)
    produced_after = time.monotonic() - killed_at
    for r in readers:
        r.join(max(1.0, deadline - time.monotonic()) + 5)
    read_after = time.monotonic() - killed_at
    expected = [(m.offset, m.value) for m in first + second]
    assert [o for o, _ in expected] == list(range(total))
    for r in readers:
        assert r.error is None, f"{r.client}: {r.error!r}"
        got = [(m.offset, m.value) for m in r.got]
        assert got == expected, f"{r.client} read {len(got)} records: {got[:3]} ... {got[-3:]}"
    print(f"\nthird-party failover: acks=all produce done {produced_after:.2f}s after the kill, "
          f"all readers done {read_after:.2f}s after it: "
          + ", ".join(f"{r.client} {r.done_at - killed_at:.2f}s" for r in readers))


# -- the group coordinator follows the leadership of __consumer_offsets -------------------------------


def _committed(bootstrap: str, group: str, topic: str) -> int | None:
    """The offset ``group`` committed for ``topic``-0, as the coordinator answers now (None: no answer)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        return int(found[0].offset)
    except confluent_kafka.KafkaException:
        return None
    finally:
        consumer.close()


def test_the_group_coordinator_moves_with_the_offsets_partition_leader(broker_cluster: BrokerCluster,
                                                                       zk_layout: ZkLayout,
                                                                       request: pytest.FixtureRequest) -> None:
    """__consumer_offsets gets offsets.topic.replication.factor (3) replicas; a commit made through one
    coordinator is answered by the next after the leader of the group's offsets partition changes, and a
    broker that led it before and leads it again (elect-leaders) answers what the other wrote meanwhile,
    not the offsets it had cached."""
    from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, partition_for

    brokers = [broker_cluster.add(i, **FAST, **{"offsets.topic.num.partitions": 5}) for i in range(3)]
    create_topic(zk_layout, "tracked", 1, replication_factor=3)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    group = "movers"
    wait_until(lambda: _commit_ok(bootstrap, group, "tracked", 60), 60, "a first commit")
    assignment = zk_layout.topic_assignment(OFFSETS_TOPIC)
    assert assignment is not None and all(len(r) == 3 for r in assignment.partitions.values())
    index = partition_for(group, 5)
    first = _leader(zk_layout, OFFSETS_TOPIC, index)
    assert first == assignment.partitions[index][0]  # the preferred replica leads
    wait_until(lambda: sorted(zk_layout.partition_state(OFFSETS_TOPIC, index).isr) == [0, 1, 2], 30, "full ISR")
    assert _committed(bootstrap, group, "tracked") == 60

    # the coordinator stalls past its session: another ISR member leads the offsets partition
    brokers[first].pause()
    request.getfixturevalue("cleanup").append(brokers[first])  # resumed at the end if the test fails
    wait_until(lambda: _leader(zk_layout, OFFSETS_TOPIC, index) not in (first, -1), 30, "a new coordinator")
    survivors = ",".join(b.bootstrap for b in brokers if b.broker_id != first)
    wait_until(lambda: _committed(survivors, group, "tracked") == 60, 60, "the commit from the new coordinator")
    peers.confluent_commit(survivors, group, "tracked", 80)
    brokers[first].resume()
    wait_until(lambda: sorted(zk_layout.partition_state(OFFSETS_TOPIC, index).isr) == [0, 1, 2], 60,
               "the old coordinator back in the ISR")
    # back as follower: it no longer coordinates the group (its cache said 60)
    assert _committed(brokers[first].bootstrap, group, "tracked") == 80  # (the client is sent to the leader)

    subprocess.run([sys.executable, "-m", "metaq", "topics", "elect-leaders", OFFSETS_TOPIC,
                    "--zookeeper", _connect(zk_layout)], check=True, capture_output=True, timeout=60)
    wait_until(lambda: _leader(zk_layout, OFFSETS_TOPIC, index) == first, 30, "the preferred coordinator back")
    wait_until(lambda: _committed(bootstrap, group, "tracked") is not None, 30, "an answer")
    assert _committed(bootstrap, group, "tracked") == 80


def _commit_ok(bootstrap: str, group: str, topic: str, offset: int) -> bool:
    try:
        peers.confluent_commit(bootstrap, group, topic, offset)
    except confluent_kafka.KafkaException:
        return False
    return True


# -- rolling restart -----------------------------------------------------------------------------------


def test_a_rolling_restart_under_acks_all_load_fails_nothing(broker_cluster: BrokerCluster,
                                                              zk_layout: ZkLayout) -> None:
    """SIGTERM and restart each of the three brokers in turn while confluent-kafka produces acks=all (its
    default retries) to an RF-3 topic with min.insync.replicas 2: no partition is ever offline, no produce
    fails, and every replica's log holds every acknowledged record at its acknowledged offset."""
    topic = "rolling"
    brokers = _cluster(broker_cluster, zk_layout, topic, partitions=1)
    deliveries = peers.AckLog()
    acked, errors = deliveries.acked, deliveries.errors
    offline: list[tuple[int, int]] = []
    stop = threading.Event()

    def produce() -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
                                             "enable.idempotence": False})
        n = 0
        while not stop.is_set():
            producer.produce(topic, value=b"v%d" % n, partition=0, on_delivery=deliveries)
            n += 1
            producer.poll(0.005)
        unflushed.append(producer.flush(120))

    def watch() -> None:
        while not stop.is_set():
            state = zk_layout.partition_state(topic, 0)
            if state is not None and state.leader < 0:
                offline.append((0, state.leader_epoch))
            time.sleep(0.02)

    unflushed: list[int] = []
    threads = [threading.Thread(target=produce, name="test-rolling-producer"),
               threading.Thread(target=watch, name="test-rolling-watch")]
    for t in threads:
        t.start()
    moves = []
    try:
        wait_until(lambda: len(acked) > 100, 30, "acknowledged records before the restarts")
        for b in brokers:
            before = _leader(zk_layout, topic)
            started = time.monotonic()
            assert b.stop() == 0
            moves.append((b.broker_id, before, time.monotonic() - started))
            b.start()
            wait_until(lambda: sorted(zk_layout.partition_state(topic, 0).isr) == [0, 1, 2], 60,
                       f"broker {b.broker_id} back in the ISR")
            count = len(acked)
            wait_until(lambda count=count: len(acked) > count + 50, 30, "more acknowledged records")
    finally:
        stop.set()
        for t in threads:
            t.join(180)
    assert unflushed == [0] and not errors, (unflushed, errors[:3])
    assert not offline, offline[:3]
    for b in brokers:
        assert b.stop() == 0
    logs = _replica_logs(brokers, topic)
    for broker_id, records in logs.items():
        missing = [o for o, v in acked.items() if records.get(o) != v]
        assert not missing, f"broker {broker_id} lacks acknowledged offsets {missing[:10]}"
    print(f"\nrolling restart: {len(acked)} acked, 0 failed, 0 offline; stop times "
          + ", ".join(f"broker {bid} (leader {lead}) {s:.2f}s" for bid, lead, s in moves))


class _ConfluentGroup:
    """Members of one confluent-kafka consumer group (subscribe, auto-commit to the broker's coordinator),
    each on its own thread, logging what they read and every offset they tried to commit."""

    def __init__(self, bootstrap: str, group: str, topic: str, members: int) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.stop_event = threading.Event()
        self.read: list[tuple[int, int, bytes]] = []  # (partition, offset, value) in arrival order
        self.commits: dict[int, set[int]] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, name=f"test-confluent-member-{i}", daemon=True)
                        for i in range(members)]
        for t in self.threads:
            t.start()

    def _on_commit(self, err: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        # a commit that reports an error may still have been written (the coordinator died after the write)
        with self._lock:
            for tp in partitions:
                if tp.topic == self.topic and tp.offset >= 0:
                    self.commits.setdefault(tp.partition, set()).add(tp.offset)

    def _run(self) -> None:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "auto.commit.interval.ms": 300, "on_commit": self._on_commit,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000})
        try:
            consumer.subscribe([self.topic])
            while not self.stop_event.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:  # transport errors during a restart are expected; the client retries
                    continue
                with self._lock:
                    self.read.append((msg.partition(), msg.offset(), msg.value()))
        except BaseException as e:  # reported by the test
            self.errors.append(repr(e))
        finally:
            consumer.close()  # commits what was read

    def missing(self, acked: dict[tuple[int, int], bytes]) -> list[tuple[int, int]]:
        with self._lock:
            got = {(p, o): v for p, o, v in self.read}
        return sorted(k for k, v in acked.items() if got.get(k) != v)

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(60)
        assert not any(t.is_alive() for t in self.threads), "a confluent-kafka member did not stop"

    def rereads(self) -> tuple[int, list[str]]:
        """(records read again, re-reads that did not start at an offset the group committed): a Kafka group
        may re-read what it consumed after its last commit of a partition that moved, nothing else."""
        high: dict[int, int] = {}
        last: dict[int, int] = {}
        again, wrong = 0, []
        for p, o, _ in self.read:
            top = high.get(p, -1)
            if o <= top:
                again += 1
                if o != last[p] + 1 and o != 0 and o not in self.commits.get(p, set()):
                    wrong.append(f"partition {p} re-read from offset {o} (read up to {top}; commits "
                                 f"{sorted(self.commits.get(p, set()))[-5:]})")
            high[p], last[p] = max(top, o), o
        return again, wrong


ROLLING_PARTITIONS = 4
OFFSETS_PARTITIONS = 3


def test_a_rolling_restart_under_load_loses_nothing_for_two_consumer_groups(
        broker_cluster: BrokerCluster, zk_layout: ZkLayout, tmp_path: Path) -> None:
    """SIGTERM and restart each broker in turn while metaq.Producer writes acks=all to a 4-partition RF-3
    topic (min.insync.replicas 2), a two-member metaq ZooKeeper group and a two-member confluent-kafka group
    (committing to the coordinator, which moves with __consumer_offsets' leaders) consume: no partition of
    the topic or of __consumer_offsets is ever offline, no produce fails, both groups consume every
    acknowledged record; the metaq group reads none twice (no member failed, docs/delivery-guarantees.md),
    the confluent group re-reads only from offsets it committed."""
    from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC

    topic = "rolling-groups"
    brokers = _cluster(broker_cluster, zk_layout, topic, partitions=ROLLING_PARTITIONS,
                       **{"offsets.topic.num.partitions": OFFSETS_PARTITIONS})
    bootstrap = ",".join(b.bootstrap for b in brokers)
    wait_until(lambda: _commit_ok(bootstrap, "rolling-confluent", topic, 0), 60, "the offsets topic")
    watched = [(topic, p) for p in range(ROLLING_PARTITIONS)] + [(OFFSETS_TOPIC, p)
                                                                  for p in range(OFFSETS_PARTITIONS)]
    offline: list[tuple[str, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            for t, p in watched:
                state = zk_layout.partition_state(t, p)
                if state is not None and state.leader < 0:
                    offline.append((t, p))

    def full_isr() -> bool:
        return all(sorted(zk_layout.partition_state(t, p).isr) == [0, 1, 2] for t, p in watched)

    connect = _connect(zk_layout)
    metaq_group = GroupHarness(connect, "rolling-metaq", topic, tmp_path / "group")
    members = [metaq_group.add_member() for _ in range(2)]
    confluent_group = _ConfluentGroup(bootstrap, "rolling-confluent", topic, 2)
    producer = AcksAllProducer(connect, topic, rate=150)
    watcher = threading.Thread(target=watch, name="test-rolling-watch", daemon=True)
    watcher.start()
    producer.start()
    moves = []
    try:
        for m in members:
            m.wait_started()
        metaq_group.wait_stable(zk_layout, ROLLING_PARTITIONS, members=2, timeout=60)
        wait_consuming(metaq_group, range(ROLLING_PARTITIONS), time.monotonic(), 30)
        wait_until(lambda: {p for p, _, _ in confluent_group.read} == set(range(ROLLING_PARTITIONS)), 60,
                   "the confluent-kafka group to read every partition")
        for b in brokers:
            started = time.monotonic()
            assert b.stop() == 0
            stopped = time.monotonic() - started
            b.start()
            wait_until(full_isr, 60, lambda b=b: f"broker {b.broker_id} back in every ISR: " + ", ".join(
                f"{t}-{p} {zk_layout.partition_state(t, p)}" for t, p in watched))
            back = time.monotonic()
            wait_until(lambda back=back: producer.acks_after(back) > 50, 30, "more acknowledged records")
            wait_consuming(metaq_group, range(ROLLING_PARTITIONS), back, 30)
            moves.append((b.broker_id, stopped, back - started))
    finally:
        stop.set()
        acked = producer.finish()
    watcher.join(10)
    assert not producer.failures, producer.failures[:3]
    assert not offline, sorted(set(offline))
    drained = wait_drained(metaq_group, acked, 60)
    assert not drained.missing, f"metaq group: {len(drained.missing)} acked records not consumed {drained.missing[:5]}"
    wait_until(lambda: not confluent_group.missing(acked), 60,
               lambda: f"the confluent-kafka group to read {confluent_group.missing(acked)[:5]} ...")
    confluent_group.stop()
    for m in members:
        assert m.stop() == 0
    report = check_delivery(metaq_group.events(), acked)
    report.assert_ok()
    assert report.duplicates == 0
    assert not confluent_group.errors, confluent_group.errors
    again, wrong = confluent_group.rereads()
    assert not wrong, wrong[:5]
    print(f"\nrolling restart with two groups: {len(acked)} acked over {ROLLING_PARTITIONS} partitions, "
          f"0 failed, 0 offline; metaq group 0 duplicates, confluent group {again} re-read after commits; "
          + ", ".join(f"broker {bid} stopped in {s:.2f}s, back in every ISR after {t:.2f}s" for bid, s, t in moves))


def test_a_confluent_consumer_follows_a_leader_that_moves_while_the_old_one_keeps_running(
        broker_cluster: BrokerCluster, zk_layout: ZkLayout) -> None:
    """A preferred-leader election moves the leadership away from a broker that stays up: its Fetch answers
    say NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH, with an empty record set as Kafka sends it (librdkafka
    rejects a null one as a parse failure of the whole answer, so it never saw the error and fetched in a
    loop until its next periodic metadata refresh, five minutes by default)."""
    topic = "moving"
    brokers = _cluster(broker_cluster, zk_layout, topic, partitions=1, leader_of=lambda brokers: 0)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    produce = {"acks": "all", "retries": 1000, "retry.backoff.ms": 200, "message.timeout.ms": 60000}
    assert brokers[0].stop() == 0  # controlled shutdown: broker 1 or 2 leads while 0 is away
    brokers[0].start()
    wait_until(lambda: sorted(zk_layout.partition_state(topic, 0).isr) == [0, 1, 2], 60, "broker 0 back in the ISR")
    old = _leader(zk_layout, topic)
    assert old != 0
    first = peers.confluent_produce(bootstrap, topic, 0, [(b"k", b"a%d" % i, 1_700_000_000_000 + i)
                                                          for i in range(50)], **produce)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "movers",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "fetch.wait.max.ms": 100})
    got: list[tuple[int, bytes]] = []

    def read_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))

    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        read_until(50, 60)
        assert len(got) == 50
        moved_at = time.monotonic()
        subprocess.run([sys.executable, "-m", "metaq", "topics", "elect-leaders", topic,
                        "--zookeeper", _connect(zk_layout)], check=True, capture_output=True, timeout=60)
        wait_until(lambda: _leader(zk_layout, topic) == 0, 30, "broker 0 to lead again")
        second = peers.confluent_produce(bootstrap, topic, 0, [(b"k", b"b%d" % i, 1_700_000_001_000 + i)
                                                               for i in range(50)], **produce)
        read_until(100, 60)
        followed = time.monotonic() - moved_at
    finally:
        consumer.close()
    assert got == [(m.offset, m.value) for m in first + second]
    print(f"\nleader {old} -> 0 with {old} still up: the confluent consumer read on after {followed:.2f}s")
