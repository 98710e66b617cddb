"""Live migration of a running group between ZooKeeper and broker coordination, under load, against a real
ZooKeeper and a real metaq broker (docs/broker-coordinated-consumer.md, "Live migration of a ZooKeeper group").

Three members (in this process, each with its own ZooKeeper session and broker connections) read a 12-partition
topic a steady producer writes to, while ``metaq groups migrate`` moves the group to broker coordination and
back (there all at once from the API, back member by member from the command line). An invariant checker
runs throughout:

- no partition owned by two members at any sampled instant (each sample reads every member's unrevoked
  partitions twice in a row; a partition one member holds in both reads and another in a read between them
  was held by both at that instant);
- the committed offsets, in ZooKeeper and in ``__consumer_offsets``, never go backwards;
- nothing is lost: every acknowledged record is consumed at least once.

The pause (the longest time any partition went without a delivery while the group kept being fed) is printed
with ``-s`` and recorded in the doc.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metaq.admin.broker_groups import BrokerGroups
from metaq.admin.client import Admin
from metaq.admin.migration import MigrationError, migrate_group
from metaq.client.group_offsets import KafkaGroupOffsets
from metaq.consumer.message import MessageAndMetadata
from metaq.errors import MetaqError
from metaq.testing.broker import SharedBroker, shared_broker
from metaq.testing.group import GroupHarness, SteadyProducer, StreamReader, check_delivery, ownership_problem
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import ZooKeeperEndpoint
from metaq.zkclient import session
from zk_layout import TopicCount, ZkLayout

PARTITIONS = 12
BROKER = {"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 4}
MEMBER = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 10000,
          "auto.commit.interval.ms": 300, "auto.offset.reset": "smallest", "consumer.timeout.ms": 100,
          "rebalance.backoff.ms": 500, "rebalance.max.retries": 20}


@pytest.fixture(scope="module")
def cluster(zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    with shared_broker(zk_server.connect_string, tmp_path_factory.mktemp("migrate"), "metaq-migrate",
                       properties=BROKER) as broker:
        yield broker


class Ledger:
    """Every delivery, in order: (monotonic time, member, partition, offset)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.deliveries: list[tuple[float, str, int, int]] = []

    def delivered(self, reader: StreamReader, message: MessageAndMetadata) -> None:
        with self._lock:
            self.deliveries.append((time.monotonic(), reader.consumer.consumer_id, message.partition, message.offset))

    def snapshot(self) -> list[tuple[float, str, int, int]]:
        with self._lock:
            return list(self.deliveries)

    def longest_gap(self, since: float, until: float) -> tuple[float, int]:
        """The longest time (and its partition) between deliveries of one partition within [since, until]."""
        last = dict.fromkeys(range(PARTITIONS), since)
        worst = (0.0, -1)
        for when, _, partition, _ in self.snapshot():
            if since <= when <= until:
                worst = max(worst, (when - last[partition], partition))
                last[partition] = when
        return max(worst, *((until - t, p) for p, t in last.items()))


class Checker(threading.Thread):
    """Samples every member's owned partitions (double ownership) and both offset stores (monotonic)."""

    def __init__(self, members: list[StreamReader], layout: ZkLayout, kafka: KafkaGroupOffsets, group: str) -> None:
        super().__init__(name="invariant-checker", daemon=True)
        self.members = members
        self._layout = layout
        self._kafka = kafka
        self._group = group
        self._stop_event = threading.Event()
        self.samples = 0
        self.double: list[str] = []
        self.backwards: list[str] = []
        self._last: dict[tuple[str, tuple[str, int]], int] = {}

    def run(self) -> None:
        n = 0
        while not self._stop_event.wait(0.01):
            self.sample_owners()
            n += 1
            if n % 10 == 0:
                self.sample_offsets()

    def sample_owners(self) -> None:
        reads = [(m.consumer.consumer_id, m.owned()) for m in list(self.members)]
        reads += [(m.consumer.consumer_id, m.owned()) for m in list(self.members)]
        self.samples += 1
        for i, (member, owned) in enumerate(reads):
            for j in range(i + 1, len(reads)):
                other, between = reads[j]
                if other == member:
                    break
                for k in range(j + 1, len(reads)):
                    if reads[k][0] == member:
                        both = owned & between & reads[k][1]
                        if both:
                            self.double.append(f"{sorted(both)} owned by {member} and {other} at once")
                        break

    def sample_offsets(self) -> None:
        try:
            stores = {"zookeeper": self._layout.offsets(self._group), "kafka": self._kafka.fetch(self._group)}
        except MetaqError:
            return
        for store, offsets in stores.items():
            for key, offset in offsets.items():
                previous = self._last.get((store, key))
                if previous is not None and offset < previous:
                    self.backwards.append(f"{store} {key[0]}-{key[1]}: {previous} -> {offset}")
                self._last[(store, key)] = max(offset, previous or offset)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


def _split(members: list[StreamReader]) -> bool:
    owned = [m.owned() for m in members]
    return (set().union(*owned) == set(range(PARTITIONS)) and sum(len(o) for o in owned) == PARTITIONS
            and all(m.consumer.state.state == "STABLE" for m in members))


def _modes(members: list[StreamReader]) -> set[str]:
    return {m.consumer.coordination_mode for m in members}


def _settle(members: list[StreamReader], ledger: Ledger, mode: str) -> None:
    """Every member in ``mode``, the partitions split among them, and each partition delivered since."""
    wait_until(lambda: _split(members) and _modes(members) == {mode}, 60,
               f"three {mode} members to split 12 partitions")
    settled = time.monotonic()
    wait_until(lambda: all(any(t > settled and p == q for t, _, q, _ in ledger.snapshot()) for p in range(PARTITIONS)),
               30, f"every partition delivered by the {mode} members")


def _describe(cluster: SharedBroker, group: str) -> dict[str, Any]:
    described = subprocess.run([sys.executable, "-m", "metaq", "groups", "describe", group, "--json",
                                "--zookeeper", cluster.zk_connect], capture_output=True, text=True, timeout=120)
    assert described.returncode == 0, described.stderr
    document: dict[str, Any] = json.loads(described.stdout)
    return document


def test_zookeeper_to_kafka_and_back_under_load(cluster: SharedBroker) -> None:
    topic = cluster.topic("migrate", partitions=PARTITIONS)
    group = "migrate-g"
    producer = SteadyProducer(cluster.zk_connect, topic, rate=300.0)
    producer.start()
    ledger = Ledger()
    properties = {"group.id": group, "zookeeper.connect": cluster.zk_connect, **MEMBER}
    members = [StreamReader(properties, topic, ledger.delivered) for _ in range(3)]
    with session(cluster.zk_connect) as client:
        layout = ZkLayout(client)
        kafka = KafkaGroupOffsets(layout)
        checker = Checker(members, layout, kafka, group)
        checker.start()
        try:
            wait_until(lambda: _split(members) and _modes(members) == {"zookeeper"}, 60,
                       "three ZooKeeper members to split 12 partitions")
            wait_until(lambda: {p for _, _, p, _ in ledger.snapshot()} == set(range(PARTITIONS)), 30,
                       "every partition delivered")

            # -- zookeeper -> kafka, all at once, from the API
            started = time.monotonic()
            forward = migrate_group(layout, group, "kafka", coordinators=BrokerGroups(layout), timeout_s=90)
            _settle(members, ledger, "kafka")
            forward_pause = ledger.longest_gap(started, time.monotonic())
            assert layout.consumer_ids(group) == []  # DONE: registrations and owner nodes removed ...
            assert layout.owners(group) == {}
            assert set(layout.offsets(group)) == {(topic, p) for p in range(PARTITIONS)}  # ... offset nodes kept
            with Admin(layout) as admin:  # its ZooKeeper client is ours: closing it closes its broker connections
                described = admin.describe_group(group).to_json()
            assert described["migration"]["to"] == "kafka" and described["migration"]["state"] == "DONE"
            assert set(described["migration"]["members"].values()) == {"kafka"}
            assert len(described["protocol"]["members"]) == 3

            # -- kafka -> zookeeper (the rollback), member by member, from the command line
            started = time.monotonic()
            back = subprocess.run([sys.executable, "-m", "metaq", "groups", "migrate", group, "--to", "zookeeper",
                                   "--member-by-member", "--json", "--timeout-s", "90",
                                   "--zookeeper", cluster.zk_connect],
                                  capture_output=True, text=True, timeout=180)
            assert back.returncode == 0, back.stderr
            assert json.loads(back.stdout)["state"] == "DONE"
            _settle(members, ledger, "zookeeper")
            back_pause = ledger.longest_gap(started, time.monotonic())
            assert len(layout.owners(group)) == PARTITIONS
            described = _describe(cluster, group)
            assert described["migration"]["to"] == "zookeeper" and described["migration"]["state"] == "DONE"
            assert set(described["migration"]["members"].values()) == {"zookeeper"}
            assert len(described["members"]) == 3

            acked = producer.finish()
            wait_until(lambda: {(p, o) for _, _, p, o in ledger.snapshot()} >= set(acked), 60,
                       "every acknowledged record consumed")
        finally:
            producer.finish()
            checker.stop()
            for member in members:
                member.close()
        counts = Counter((p, o) for _, _, p, o in ledger.snapshot())
        twice = sorted(key for key, n in counts.items() if n > 1)
        print(f"\nmigration to kafka: {forward.seconds:.2f}s by the command, longest partition pause "
              f"{forward_pause[0]:.2f}s (partition {forward_pause[1]}); back: longest pause {back_pause[0]:.2f}s "
              f"(partition {back_pause[1]}); {checker.samples} ownership samples; {len(acked)} records, "
              f"{len(twice)} read twice")
        assert checker.samples > 100
        assert checker.double == []
        assert checker.backwards == []
        assert set(acked) <= set(counts)
        # every hand-over commits before releasing, and a member takes max(zookeeper, kafka): nothing read twice
        assert twice == [], [(round(t - started, 3), m[-8:], p, o) for t, m, p, o in ledger.snapshot()
                              if (p, o) in set(twice[:5])]


def test_a_member_killed_mid_migration(cluster: SharedBroker, tmp_path: Path) -> None:
    """Two members in this process and one member process; a migration to kafka starts, and once the process
    reports ``bridge`` it is SIGKILLed, holding owner nodes and a coordinator membership. Its ZooKeeper session
    expires (registration, owner nodes and mode node go) and its membership after session.timeout.ms; the
    migration completes, the two survivors own all 12 partitions through the coordinator, never one partition
    at once, every acknowledged record is read (by them or by the victim before it died), the survivors read
    nothing twice, and the committed offsets never go backwards."""
    topic = cluster.topic("migrate-kill", partitions=PARTITIONS)
    group = "migrate-kill-g"
    properties = {"group.id": group, "zookeeper.connect": cluster.zk_connect, **MEMBER}
    harness = GroupHarness(cluster.zk_connect, group, topic, tmp_path,
                           properties={k: v for k, v in MEMBER.items() if k != "consumer.timeout.ms"})
    producer = SteadyProducer(cluster.zk_connect, topic, rate=300.0)
    producer.start()
    ledger = Ledger()
    outcome: dict[str, object] = {}
    victim = harness.add_member()
    victim_id = victim.wait_started(90)  # a process start takes seconds on a loaded machine
    survivors = [StreamReader(properties, topic, ledger.delivered) for _ in range(2)]
    with session(cluster.zk_connect) as client:
        layout = ZkLayout(client)
        coordinators = BrokerGroups(layout)
        checker = Checker(survivors, layout, KafkaGroupOffsets(layout), group)
        checker.start()

        def migrate() -> None:
            try:
                outcome["result"] = migrate_group(layout, group, "kafka", coordinators=coordinators, timeout_s=90)
            except Exception as e:  # reported by the assertion below
                outcome["error"] = e

        def survivors_own_all() -> bool:
            described = coordinators.list().groups.get(group)
            return (described is not None and len(described.members) == 2
                    and sorted(tp for m in described.members for tp in m.assignment)
                    == [(topic, p) for p in range(PARTITIONS)] and _modes(survivors) == {"kafka"})

        try:
            wait_until(lambda: isinstance(ownership_problem(layout, group, topic, PARTITIONS, 3), dict), 60,
                       lambda: f"3 ZooKeeper members to split 12: {ownership_problem(layout, group, topic, 12, 3)}")
            migrating = threading.Thread(target=migrate, name="migrate", daemon=True)
            migrating.start()
            wait_until(lambda: (mode := layout.member_modes(group).get(victim_id)) is not None
                       and mode.coordination == "bridge", 30, "the member process to become a bridge")
            victim.kill()
            migrating.join(120)
            assert "result" in outcome, outcome
            wait_until(survivors_own_all, 60, "the two survivors to own all 12 partitions through the coordinator")
            acked = producer.finish()
            victim_read = check_delivery(victim.events(), []).consumed
            wait_until(lambda: {(p, o) for _, _, p, o in ledger.snapshot()}
                       | {(p, o) for p, offsets in victim_read.items() for o in offsets} >= set(acked), 60,
                       "every acknowledged record read")
        finally:
            producer.finish()
            checker.stop()
            for member in survivors:
                member.close()
            harness.stop_all()
    counts = Counter((p, o) for _, _, p, o in ledger.snapshot())
    assert [key for key, n in counts.items() if n > 1] == []
    assert checker.double == []
    assert checker.backwards == []


def test_a_member_that_cannot_switch_stops_the_command(cluster: SharedBroker) -> None:
    """A registration no metaq member stands behind (a Kafka 0.8 Scala consumer, say) never reports a mode: the
    command gives up after --timeout-s naming it (the CLI exits 1), and the marker stays at MIGRATING for the
    operator to finish or reverse."""
    group = "migrate-stuck-g"
    with session(cluster.zk_connect) as client:
        layout = ZkLayout(client)
        layout.register_consumer(group, "migrate-stuck-g_scala-1", TopicCount(subscription={"t": 1}))
        with pytest.raises(MigrationError, match="longer than 1s.*migrate-stuck-g_scala-1"):
            migrate_group(layout, group, "kafka", timeout_s=1)
        marker = layout.migration_marker(group)
        assert marker is not None and (marker[0].to, marker[0].state) == ("kafka", "MIGRATING")
