"""offsets.storage=kafka against real brokers: commits through the offsets channel, fencing, migration, a
coordinator SIGKILL, and the coordinator's answers to bad commits.

Offsets are checked with a standard client (confluent-kafka's ``committed()``: FindCoordinator + OffsetFetch)
and in ZooKeeper, which storage=kafka keeps writing because its version-checked write is the fence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from integration_tests.peers import confluent_committed, zk_committed
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, partition_for
from metaq.config import ConfigError
from metaq.consumer import Consumer, ConsumerConfig
from metaq.consumer.kafka_offsets import KafkaOffsetStore
from metaq.errors import MetaqError
from metaq.producer import Producer
from metaq.protocol.records import decode_records
from metaq.testing.broker import request, topic_leaders
from metaq.testing.group import (
    GroupHarness,
    SteadyProducer,
    check_delivery,
    log_end_offsets,
    wait_consuming,
    wait_drained,
)
from metaq.testing.group import (
    drain_stream as _drain,
)
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

FAST = {"offsets.channel.backoff.ms": 100, "offsets.channel.socket.timeout.ms": 3000}
Partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition


# ---- helpers -----------------------------------------------------------------------------------------


def _produce(zk_connect: str, topic: str, n: int, partitions: int, start: int = 0) -> set[tuple[int, int]]:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, b"m%d" % i, partition=i % partitions) for i in range(start, start + n)]
        producer.flush()
        return {(f.result().partition, f.result().offset) for f in futures}


def _consumer(zk_connect: str, group: str, **props: object) -> Consumer:
    return Consumer({"group.id": group, "zookeeper.connect": zk_connect, "consumer.timeout.ms": 1500,
                     "auto.offset.reset": "smallest", "auto.commit.interval.ms": 200,
                     "zookeeper.session.timeout.ms": 3000, **FAST, **props})


def _store(zk_connect: str, layout: ZkLayout, group: str, **props: object) -> KafkaOffsetStore:
    config = ConsumerConfig.from_properties({"group.id": group, "zookeeper.connect": zk_connect,
                                             "offsets.storage": "kafka", **FAST, **props})
    return KafkaOffsetStore(layout, config)


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], tuple[int, str]], *, version: int = 2,
            generation: int = -1, member: str = "") -> dict[tuple[str, int], int]:
    topics = sorted({t for t, _ in offsets})
    req = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member, retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=[
            Partition(partition_index=p, committed_offset=o, committed_metadata=md)
            for (tt, p), (o, md) in sorted(offsets.items()) if tt == t]) for t in topics])
    resp = request(bootstrap, req, OffsetCommitResponse, version)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def _fetch(bootstrap: str, group: str, tps: list[tuple[str, int]], version: int = 3) -> tuple[int, dict]:
    req = OffsetFetchRequest[version](group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=[p for tt, p in tps if tt == t])
        for t in sorted({t for t, _ in tps})])
    resp = request(bootstrap, req, OffsetFetchResponse, version)
    return resp.error_code, {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                             for t in resp.topics for p in t.partitions}


def _find_coordinator(bootstrap: str, group: str) -> tuple[int, int]:
    """(error, node id) as FindCoordinator v1 answers at ``bootstrap``."""
    resp = request(bootstrap, FindCoordinatorRequest[1](key=group, key_type=0), FindCoordinatorResponse, 1)
    return resp.error_code, resp.node_id


def _coordinator_ready(bootstrap: str, group: str) -> bool:
    """FindCoordinator answered and the offsets partition is loaded (OffsetFetch without error)."""
    if _find_coordinator(bootstrap, group)[0]:
        return False
    return _fetch(bootstrap, group, [("t", 0)])[0] == 0


# ---- metaq's consumer with offsets.storage=kafka -------------------------------------------------------


def test_kafka_storage_commits_restart_resume(broker, make_topic, zk_connect, zk_layout) -> None:
    topic = make_topic("kstore", partitions=4)
    sent = _produce(zk_connect, topic, 200, 4)
    with _consumer(zk_connect, "kg", **{"offsets.storage": "kafka"}) as c:
        first = _drain(c, topic, 120)
    assert len(first) == 120
    expected = {p: 1 + max((o for pp, o in first if pp == p), default=-1) for p in range(4)}  # 0: reset only
    # the clean shutdown committed exactly what was consumed, to Kafka and (the fence) to ZooKeeper
    assert confluent_committed(broker.bootstrap, "kg", topic, 4) == expected
    assert zk_committed(zk_layout, "kg", topic) == expected
    more = _produce(zk_connect, topic, 40, 4, start=200)
    with _consumer(zk_connect, "kg", **{"offsets.storage": "kafka"}) as c:
        rest = _drain(c, topic, 120, linger=0.5)
        assert not first & rest and first | rest == sent | more
        c.commit_offsets()
        assert c._store.unsynced() == {}  # the Kafka copy caught up with ZooKeeper
    assert confluent_committed(broker.bootstrap, "kg", topic, 4) == {p: 60 for p in range(4)}


def test_dual_commit_disabled_is_rejected() -> None:
    with pytest.raises(ConfigError, match="dual.commit.enabled"):
        ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "x:1", "offsets.storage": "kafka",
                                        "dual.commit.enabled": "false"})
    assert ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "x:1",
                                           "offsets.storage": "kafka"}).dual_commit


def test_member_that_lost_a_partition_commits_nothing(broker, make_topic, zk_connect, zk_layout,
                                                      make_zk_client) -> None:
    """Two stores on separate ZooKeeper sessions; B takes p0 over while A still believes it owns it."""
    topic = make_topic("fenced", partitions=2)
    a = _store(zk_connect, zk_layout, "fg")
    b = _store(zk_connect, ZkLayout(make_zk_client()), "fg")
    try:
        assert a.take_ownership([(topic, 0), (topic, 1)]) == {(topic, 0): None, (topic, 1): None}
        assert a.commit({(topic, 0): 10, (topic, 1): 5}).committed.keys() == {(topic, 0), (topic, 1)}
        assert b.take_ownership([(topic, 0)]) == {(topic, 0): 10}  # the fence
        assert b.commit({(topic, 0): 20}).committed.keys() == {(topic, 0)}
        lookups = a.channel.lookups
        result = a.commit({(topic, 0): 15, (topic, 1): 7})  # the zombie: p0 lost, p1 still its own
        assert result.lost == {(topic, 0)} and set(result.committed) == {(topic, 1)}
        assert a.owned() == {(topic, 1)}
        assert a.channel.lookups == lookups  # and it needed no new channel for p1
        assert confluent_committed(broker.bootstrap, "fg", topic, 2) == {0: 20, 1: 7}
        assert zk_committed(zk_layout, "fg", topic) == {0: 20, 1: 7}
        assert a.commit({(topic, 0): 16}).committed == {}  # forgotten: not even tried
        assert confluent_committed(broker.bootstrap, "fg", topic, 2)[0] == 20
    finally:
        a.close()
        b.close()


def test_migration_zookeeper_to_kafka_and_back(broker, make_topic, zk_connect, zk_layout) -> None:
    topic = make_topic("migrate", partitions=3)
    sent = _produce(zk_connect, topic, 90, 3)
    seen: set[tuple[int, int]] = set()
    for storage, n in (("zookeeper", 30), ("kafka", 30), ("zookeeper", 15), ("kafka", 15)):
        with _consumer(zk_connect, "mg", **{"offsets.storage": storage}) as c:
            got = _drain(c, topic, n, linger=0.5 if len(seen) + n == len(sent) else 0.0)
        assert not got & seen, f"{storage}: re-delivered {sorted(got & seen)[:5]}"
        seen |= got
        zk = zk_committed(zk_layout, "mg", topic)
        if storage == "kafka":  # dual commit: both stores hold the same place, idle partitions included
            assert confluent_committed(broker.bootstrap, "mg", topic, 3) == zk
    assert seen == sent
    # a group whose place is only in Kafka (committed by a standard client) keeps it when metaq takes over
    wait_until(lambda: _coordinator_ready(broker.bootstrap, "kafka-only"), 15, "the coordinator to load")
    assert _commit(broker.bootstrap, "kafka-only", {(topic, p): (25, "") for p in range(3)}) == {
        (topic, p): 0 for p in range(3)}
    with _consumer(zk_connect, "kafka-only", **{"offsets.storage": "kafka"}) as c:
        got = _drain(c, topic, 15, linger=0.5)
    assert got == {(p, o) for p in range(3) for o in range(25, 30)}
    assert zk_committed(zk_layout, "kafka-only", topic) == {p: 30 for p in range(3)}


class _KafkaOffsetMonitor(threading.Thread):
    """Polls a group's offsets in Kafka and ZooKeeper; records when the group's effective position,
    ``max(zookeeper, kafka)`` (what a new owner resumes from), moves backwards."""

    def __init__(self, bootstrap: str, layout: ZkLayout, group: str, tps: list[tuple[str, int]]) -> None:
        super().__init__(daemon=True)
        self.args = (bootstrap, layout, group, tps)
        self.stop_event = threading.Event()
        self.last: dict[tuple[str, int], int] = {}
        self.backwards: list[str] = []
        self.kafka_only_backwards = 0
        self.polls = 0
        self._kafka_last: dict[tuple[str, int], int] = {}

    def run(self) -> None:
        bootstrap, layout, group, tps = self.args
        while not self.stop_event.wait(0.1):
            try:
                error, fetched = _fetch(bootstrap, group, tps)
                zk = layout.offsets(group)
            except Exception:
                continue
            if error:
                continue
            self.polls += 1
            for tp in tps:
                kafka = fetched[tp][0]
                if kafka < self._kafka_last.get(tp, -1):
                    self.kafka_only_backwards += 1
                self._kafka_last[tp] = kafka
                effective = max(kafka, zk.get(tp, -1))
                if effective < self.last.get(tp, -1):
                    self.backwards.append(f"{tp}: {self.last[tp]} -> {effective}")
                self.last[tp] = max(effective, self.last.get(tp, -1))


def test_member_processes_with_kafka_storage_survive_sigkill(broker, make_topic, zk_connect, zk_layout,
                                                             tmp_path) -> None:
    """verifiable-consumer processes with offsets.storage=kafka under a steady producer: one is SIGKILLed,
    the other takes its partitions over from max(zookeeper, kafka), a new member joins; nothing is lost,
    duplicates only in the victim's uncommitted window, and the group's position never moves backwards."""
    topic = make_topic("members", partitions=6)
    group = GroupHarness(zk_connect, "zg", topic, tmp_path / "group", {"offsets.storage": "kafka", **FAST})
    producer = SteadyProducer(zk_connect, topic, rate=300)
    monitor = _KafkaOffsetMonitor(broker.bootstrap, zk_layout, "zg", [(topic, p) for p in range(6)])
    producer.start()
    monitor.start()
    try:
        members = [group.add_member() for _ in range(2)]
        for m in members:
            m.wait_started()
        group.wait_stable(zk_layout, 6, members=2, timeout=30)
        wait_consuming(group, range(6), time.monotonic(), 15)
        victim = members[1]
        victim.kill()
        group.wait_stable(zk_layout, 6, members=1, timeout=15)
        wait_consuming(group, range(6), time.monotonic(), 15)
        group.add_member().wait_started()
        group.wait_stable(zk_layout, 6, members=2, timeout=30)
        wait_consuming(group, range(6), time.monotonic(), 15)
        acked = producer.finish()
        assert producer.failed == 0
        assert not wait_drained(group, acked, 60).missing
        for m in group.members:
            if m.alive:
                assert m.stop() == 0, f"{m.name} did not exit cleanly; see {m.log_path}"
    finally:
        producer.stop_event.set()
        for m in group.members:
            m.kill()
        monitor.stop_event.set()
        monitor.join(10)
    report = check_delivery(group.events(), acked, failed_members=[victim.name])
    report.assert_ok()
    assert monitor.polls > 10 and not monitor.backwards, monitor.backwards[:5]
    assert monitor.kafka_only_backwards == 0
    # the final positions are the log end, in both stores
    end = log_end_offsets(broker.bootstrap, topic, 6)
    assert confluent_committed(broker.bootstrap, "zg", topic, 6) == end
    assert zk_committed(zk_layout, "zg", topic) == end
    print(f"SIGKILL with storage=kafka: {report.duplicates} duplicates (the victim's uncommitted window)")


def test_paused_member_with_kafka_storage_commits_nothing_it_lost(broker, make_topic, zk_connect, zk_layout,
                                                                  tmp_path) -> None:
    """A GC zombie with offsets.storage=kafka: a member SIGSTOPped past its ZooKeeper session loses its
    partitions; after SIGCONT nothing it commits for them (before it is assigned them again) gets through,
    to ZooKeeper or to Kafka, and the group's position never moves backwards."""
    topic = make_topic("zombies", partitions=6)
    group = GroupHarness(zk_connect, "zombie-g", topic, tmp_path / "group", {"offsets.storage": "kafka", **FAST})
    producer = SteadyProducer(zk_connect, topic, rate=300)
    monitor = _KafkaOffsetMonitor(broker.bootstrap, zk_layout, "zombie-g", [(topic, p) for p in range(6)])
    producer.start()
    monitor.start()
    try:
        members = [group.add_member() for _ in range(2)]
        for m in members:
            m.wait_started()
        owners = group.wait_stable(zk_layout, 6, members=2, timeout=30)
        wait_consuming(group, range(6), time.monotonic(), 15)
        zombie = members[1]
        zombie_id = zombie.consumer_id()
        lost = {p for p, tid in owners.items() if tid.rsplit("-", 1)[0] == zombie_id}
        zombie.pause()
        paused_at = time.monotonic()
        group.wait_stable(zk_layout, 6, members=1, timeout=15)  # the session expired; the other owns all
        wait_consuming(group, lost, time.monotonic(), 15)
        time.sleep(max(0.0, paused_at + 7.5 - time.monotonic()))  # 2.5 session timeouts
        resumed_at = time.monotonic()
        zombie.resume()
        group.wait_stable(zk_layout, 6, members=2, timeout=30)
        wait_consuming(group, range(6), time.monotonic(), 15)
        acked = producer.finish()
        assert producer.failed == 0
        assert not wait_drained(group, acked, 60).missing
        for m in members:
            assert m.stop() == 0, f"{m.name} did not exit cleanly; see {m.log_path}"
    finally:
        producer.stop_event.set()
        for m in group.members:
            m.kill()
        monitor.stop_event.set()
        monitor.join(10)
    check_delivery(group.events(), acked, failed_members=[zombie.name]).assert_ok()
    assert monitor.polls > 10 and not monitor.backwards, monitor.backwards[:5]
    reassigned: dict[int, float] = {}
    for e in zombie.events():
        if e["name"] == "partitions_assigned" and e["time"] > resumed_at:
            for part in e["partitions"]:
                reassigned.setdefault(part["partition"], e["time"])
    commits = [e for e in zombie.events() if e["name"] == "offsets_committed" and e["started"] >= resumed_at]
    bad = [(o["partition"], o["offset"]) for e in commits for o in e["offsets"]
           if o["partition"] in lost and not reassigned.get(o["partition"], float("inf")) < e["started"]]
    assert not bad, f"the zombie committed partitions it had lost: {bad}"
    end = log_end_offsets(broker.bootstrap, topic, 6)
    assert confluent_committed(broker.bootstrap, "zombie-g", topic, 6) == end
    assert zk_committed(zk_layout, "zombie-g", topic) == end
    fenced = sorted({part["partition"] for e in commits for part in e["lost"]})
    print(f"zombie (storage=kafka): lost {sorted(lost)}, fenced commits refused for {fenced}; the Kafka copy "
          f"alone stepped back {monitor.kafka_only_backwards} times, max(zk, kafka) never")


# ---- the coordinator crashes ---------------------------------------------------------------------------


class _Committer(threading.Thread):
    """Commits increasing offsets of one group as fast as it can; records what was acknowledged by Kafka."""

    def __init__(self, store: KafkaOffsetStore, tps: list[tuple[str, int]]) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.tps = tps
        self.stop_event = threading.Event()
        self.acked: dict[tuple[str, int], int] = {}
        self.attempted: dict[tuple[str, int], int] = {}
        self.failures = 0

    def run(self) -> None:
        self.store.take_ownership(self.tps)
        n = 0
        while not self.stop_event.is_set():
            n += 1
            offsets = {tp: n * 10 + i for i, tp in enumerate(self.tps)}
            self.attempted.update(offsets)
            self.store.commit(offsets)
            unsynced = self.store.unsynced()
            if unsynced:
                self.failures += 1
                time.sleep(0.05)
            self.acked.update({tp: o for tp, o in offsets.items() if tp not in unsynced})


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_coordinator_restart_loses_no_acknowledged_commit(how, broker_cluster, zk_connect, zk_layout,
                                                          make_zk_client, make_topic) -> None:
    # one replica per offsets partition: its coordinator's death leaves the groups without one until it returns
    single = {"offsets.topic.num.partitions": 4, "offsets.topic.replication.factor": 1}
    b0 = broker_cluster.add(0, **single)
    b1 = broker_cluster.add(1, **single)
    wait_until(lambda: _find_coordinator(b0.bootstrap, "probe")[0] == 0, 15, "the offsets topic")
    leaders = topic_leaders(b0.bootstrap, OFFSETS_TOPIC)
    assert set(leaders.values()) == {0, 1}, leaders  # spread over both brokers
    groups = [f"crash-{i}" for i in range(40)]
    victim = next(g for g in groups if leaders[partition_for(g, 4)] == 0)
    survivor = next(g for g in groups if leaders[partition_for(g, 4)] == 1)
    assert _find_coordinator(b1.bootstrap, victim) == (0, 0)  # any broker answers the lookup
    tps = [("t", p) for p in range(8)]
    make_topic("t", partitions=8)  # offsets of unknown partitions are refused
    workers = {g: _Committer(_store(zk_connect, ZkLayout(make_zk_client()), g,
                                    **{"offsets.commit.max.retries": 1}), tps) for g in (victim, survivor)}
    for w in workers.values():
        w.start()
    wait_until(lambda: all(len(w.acked) == len(tps) for w in workers.values()), 20, "first commits")
    time.sleep(0.5)
    if how == "kill":
        b0.kill()
    else:
        b0.stop()
    acked_before = dict(workers[victim].acked)
    # while it is down the lookup says COORDINATOR_NOT_AVAILABLE, and the other broker's groups carry on
    wait_until(lambda: _find_coordinator(b1.bootstrap, victim)[0] == 15, 15, "COORDINATOR_NOT_AVAILABLE")
    progress = dict(workers[survivor].acked)
    wait_until(lambda: workers[survivor].acked != progress, 10, "commits of a group on the live broker")
    wait_until(lambda: workers[victim].failures > 0, 15, "commits of the victim's group to fail")
    # claiming partitions of the victim's group now fails at the fetch deadline instead of hanging a rebalance
    late = _store(zk_connect, ZkLayout(make_zk_client()), victim, **{"metaq.offsets.fetch.timeout.ms": 1000})
    started = time.monotonic()
    with pytest.raises(MetaqError, match="COORDINATOR_NOT_AVAILABLE|connect"):
        late.take_ownership([("other", 0)])
    assert time.monotonic() - started < 5 and late.owned() == set()
    late.close()
    b0.start()
    wait_until(lambda: workers[victim].acked != acked_before and not workers[victim].store.unsynced(), 30,
               "commits to the restarted coordinator")
    time.sleep(0.3)
    for w in workers.values():
        w.stop_event.set()
        w.join(30)
        w.store.close()
    for group, w in workers.items():
        bootstrap = b0.bootstrap if group == victim else b1.bootstrap
        error, fetched = _fetch(bootstrap, group, tps)
        assert error == 0
        for tp in tps:
            offset = fetched[tp][0]
            # at least the last acknowledged commit; more only if the last attempt was appended unacknowledged
            assert offset in (w.acked[tp], w.attempted[tp]), (group, tp, offset, w.acked[tp], w.attempted[tp])
    assert workers[victim].store.channel.lookups > 1  # the channel was dropped and the coordinator found again
    # and the acknowledged commits from before the crash were replayed from the log, not lost
    assert all(_fetch(b0.bootstrap, victim, tps)[1][tp][0] >= o for tp, o in acked_before.items())


def _records_on_disk(partition_dir: Path) -> int:
    """Records in the partition's segment files, read again if the cleaner swapped one away meanwhile."""
    while True:
        try:
            return sum(len(decode_records(p.read_bytes(), 0).records) for p in sorted(partition_dir.glob("*.log")))
        except FileNotFoundError:
            continue


def test_offsets_log_is_compacted_and_replayed_after_sigkill(broker_cluster, make_topic) -> None:
    """12,000 commit records for 1,000 partitions: the log cleaner compacts __consumer_offsets (a compacted topic,
    docs/compaction.md) to about the last commit of each; after a SIGKILL the cache is rebuilt from what is left,
    with every last commit."""
    b = broker_cluster.add(0, **{"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 100_000,
                                 "log.cleaner.backoff.ms": 200})
    wait_until(lambda: _coordinator_ready(b.bootstrap, "big"), 15, "the coordinator to load")
    tps = [("t", p) for p in range(1000)]
    make_topic("t", partitions=1000)  # offsets of unknown partitions are refused
    for n in range(12):
        assert set(_commit(b.bootstrap, "big", {tp: (n * 1000 + tp[1], "") for tp in tps}).values()) == {0}
    directory = b.data_dir / "logs-0" / f"{OFFSETS_TOPIC}-0"
    # the last commit of each partition below the active segment, and the active segment (two ~50 KB commits)
    wait_until(lambda: _records_on_disk(directory) <= 3000, 30, "the cleaner compacting __consumer_offsets-0")
    assert set(_commit(b.bootstrap, "big", {("t", 0): (99_999, "after")}).values()) == {0}
    b.kill()
    b.start()
    wait_until(lambda: _coordinator_ready(b.bootstrap, "big"), 15, "the coordinator to reload")
    error, fetched = _fetch(b.bootstrap, "big", tps)
    assert error == 0
    assert fetched == {tp: (99_999 if tp == ("t", 0) else 11_000 + tp[1], 0) for tp in tps}


# ---- bad input ----------------------------------------------------------------------------------------


@pytest.fixture
def two_brokers(broker_cluster, make_topic) -> Iterator[tuple]:
    b0 = broker_cluster.add(0, **{"offsets.topic.num.partitions": 4})
    b1 = broker_cluster.add(1, **{"offsets.topic.num.partitions": 4})
    make_topic("t", partitions=2)  # offsets of unknown partitions are refused
    wait_until(lambda: _find_coordinator(b0.bootstrap, "probe")[0] == 0, 15, "the offsets topic")
    yield b0, b1


def test_bad_commits_get_the_right_error_codes(two_brokers) -> None:
    b0, b1 = two_brokers
    by_id = {0: b0, 1: b1}
    error, node = _find_coordinator(b0.bootstrap, "bad")
    assert error == 0
    coordinator, other = by_id[node], by_id[1 - node]
    wait_until(lambda: _coordinator_ready(coordinator.bootstrap, "bad"), 15, "the coordinator to load")
    tp = ("t", 0)
    # the group lives elsewhere
    assert _commit(other.bootstrap, "bad", {tp: (5, "")}) == {tp: 16}
    assert _fetch(other.bootstrap, "bad", [tp])[0] == 16
    # unknown member / generation of a group that has no members
    assert _commit(coordinator.bootstrap, "bad", {tp: (5, "")}, generation=3, member="nobody") == {tp: 25}
    # metadata above offset.metadata.max.bytes (4096): that partition only
    big = {tp: (7, "x" * 4097), ("t", 1): (8, "ok")}
    assert _commit(coordinator.bootstrap, "bad", big) == {tp: 12, ("t", 1): 0}
    error, fetched = _fetch(coordinator.bootstrap, "bad", [tp, ("t", 1)])
    assert error == 0 and fetched == {tp: (-1, 0), ("t", 1): (8, 0)}
    # an empty group id
    assert _commit(coordinator.bootstrap, "", {tp: (1, "")}) == {tp: 24}
    # still serving
    assert _commit(coordinator.bootstrap, "bad", {tp: (9, "")}) == {tp: 0}
    assert _fetch(coordinator.bootstrap, "bad", [tp], version=1)[1] == {tp: (9, 0)}
