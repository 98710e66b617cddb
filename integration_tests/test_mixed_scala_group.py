"""The mixed group: Kafka 1.1.1's own old Scala consumer (``kafka.consumer.ZookeeperConsumerConnector``, the last
release that has it) and metaq members in ONE ZooKeeper consumer group on a real Kafka 1.1.1 broker.

The Scala members are ``integration_tests/java/OldConsumer.java`` (compiled once per module with ``javac`` against
the 1.1.1 jars, then one JVM per member); each prints the group assignment it computed (its
``beforeStartingFetchers`` hook) and every record it consumes. The metaq members are ``metaq verifiable-consumer``
processes (:mod:`metaq.testing.group`). Both sides must compute the same split (range and roundrobin), hand
partitions over through ZooKeeper offsets without loss or duplicates, survive a SIGKILL of either side, and Kafka's
``ConsumerGroupCommand --zookeeper`` must describe the group as ``metaq groups describe`` does.

One broker for the module; a topic and a group per test. docs/mixed-scala-group.md has the findings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from metaq.childproc import die_with_parent, stop_process
from metaq.consumer.assignors import RANGE, ROUNDROBIN, Assignment, AssignmentContext
from metaq.errors import MetaqError
from metaq.hashing import java_string_hash
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.group import ConsumerProcess, GroupHarness
from metaq.testing.kafka_versions import V1_1, catalogue_entry
from metaq.testing.maven import classpath
from metaq.testing.wait import wait_until
from metaq.zkclient import close as close_zk
from metaq.zkclient import connect as connect_zk
from zk_layout import ZkLayout

pytestmark = [pytest.mark.timeout(600), pytest.mark.apache_kafka(V1_1)]

PARTITIONS = 8
ROUNDROBIN_PARTITIONS = 12
"""Round robin deals partitions in the order of Java's ``String.hashCode`` of ``"[<topic>,<p>]"``; for p < 10 that
is numeric order (the strings differ in their last character only), so the round-robin group gets partitions 10
and 11 too, under a topic name for which the hash order is not numeric: otherwise a wrong order would pass."""
PEER = "Kafka 1.1.1 Scala consumer"
JAVA_SOURCE = Path(__file__).parent / "java" / "OldConsumer.java"
SCALA_LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.logger.kafka.consumer=INFO
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


# -- peers -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OldConsumerBuild:
    """OldConsumer.java compiled against Kafka 1.1.1's jars, and the log4j config its JVMs use."""

    classpath: str
    log4j: Path


@pytest.fixture(scope="module")
def old_consumer(tmp_path_factory: pytest.TempPathFactory) -> OldConsumerBuild:
    """Compile once per module (javac), so that each member's JVM starts without compiling the source again."""
    jars = catalogue_entry(V1_1).resolve()
    out = tmp_path_factory.mktemp("old-consumer")
    compiled = subprocess.run(["javac", "-nowarn", "-cp", classpath(jars), "-d", str(out), str(JAVA_SOURCE)],
                              capture_output=True, text=True, timeout=180)
    assert compiled.returncode == 0, f"javac OldConsumer.java failed:\n{compiled.stderr}"
    log4j = out / "log4j.properties"
    log4j.write_text(SCALA_LOG4J)
    return OldConsumerBuild(f"{out}{os.pathsep}{classpath(jars)}", log4j)


class ScalaMember:
    """One OldConsumer JVM: a member of the group whose consumer id is ``<group>_<name>``."""

    def __init__(self, build: OldConsumerBuild, work_dir: Path, zk_connect: str, group: str, topic: str,
                 name: str, strategy: str, max_messages: int = -1) -> None:
        self.name = name
        self.consumer_id = f"{group}_{name}"
        self.out_path = work_dir / f"{name}.jsonl"
        self.log_path = work_dir / f"{name}.log"
        command = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
                   f"-Dlog4j.configuration=file:{build.log4j}", "-cp", build.classpath, "OldConsumer",
                   zk_connect, group, topic, name, strategy, str(max_messages)]
        with open(self.out_path, "ab") as out, open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(command, stdout=out, stderr=err, preexec_fn=die_with_parent())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.out_path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by SIGKILL
        return events

    def records(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == "record"]

    def last_assignment(self) -> dict[int, str] | None:
        """The whole group's assignment as this member computed it in its last rebalance."""
        assigned = [e for e in self.events() if e["event"] == "assigned"]
        return {int(p): t for p, t in assigned[-1]["assignment"].items()} if assigned else None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM: the connector's shutdown hook commits and deletes its nodes."""
        code = stop_process(self.proc, 30)
        assert code is not None and self.proc.returncode in (0, 143), \
            f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"

    def kill(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


class ValueProducer:
    """Produces ``<partition>:<n>`` values to explicit partitions and records each acknowledged (partition,
    offset) -> value, so that every consumed offset can be checked against what was written there."""

    def __init__(self, kafka: ApacheKafkaBroker, topic: str, partitions: int) -> None:
        self.partitions = partitions
        self._producer: Producer | None = Producer({**kafka.librdkafka_config(), "linger.ms": 5, "acks": 1})
        self.topic = topic
        self.acked: dict[tuple[int, int], str] = {}
        self.errors: list[str] = []
        self._sent = 0

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[(msg.partition(), msg.offset())] = msg.value().decode()

    def send(self, per_partition: int) -> None:
        assert self._producer is not None, "producer closed"
        for _ in range(per_partition):
            for partition in range(self.partitions):
                self._producer.produce(self.topic, value=f"{partition}:{self._sent}".encode(), partition=partition,
                                       on_delivery=self._done)
                self._sent += 1
        assert self._producer.flush(60) == 0, "records still undelivered after 60 s"
        assert self.errors == []

    def close(self) -> None:
        """Drop the librdkafka handle now, so it does not keep reconnecting to the broker once the module stops it."""
        self._producer = None

    def log_end(self) -> dict[int, int]:
        ends = dict.fromkeys(range(self.partitions), 0)
        for partition, offset in self.acked:
            ends[partition] = max(ends[partition], offset + 1)
        return ends


class SteadySender(threading.Thread):
    """Sends a few records per partition at a time until stopped: traffic across a SIGKILL."""

    def __init__(self, producer: ValueProducer) -> None:
        super().__init__(name="mixed-group-sender", daemon=True)
        self.producer = producer
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(0.05):
            self.producer.send(1)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)


def kafka_roundrobin_order(topic: str, partitions: int) -> list[int]:
    """The order Kafka 1.1.1's ``RoundRobinAssignor`` deals one topic's partitions in: by Java ``String.hashCode``
    of ``TopicAndPartition.toString`` (``"<topic>-<p>"`` in 1.1.1; ``"[<topic>,<p>]"`` in 0.8-0.10), computed here
    apart from metaq's assignor."""
    return sorted(range(partitions), key=lambda p: java_string_hash(f"{topic}-{p}"))


# -- the group as a whole ------------------------------------------------------------------------------------------


class MixedGroup:
    """The metaq members (a GroupHarness) and the Scala members of one group on one topic."""

    def __init__(self, kafka: ApacheKafkaBroker, build: OldConsumerBuild, work_dir: Path, strategy: str) -> None:
        self.partitions = PARTITIONS if strategy == RANGE else ROUNDROBIN_PARTITIONS
        self.topic = f"mixed-{strategy}-{uuid.uuid4().hex[:6]}"
        for _ in range(1000):  # about half the names have a non-numeric hash order (12 partitions)
            if strategy != ROUNDROBIN or kafka_roundrobin_order(self.topic, self.partitions) != list(
                    range(self.partitions)):
                break
            self.topic = f"mixed-{strategy}-{uuid.uuid4().hex[:6]}"
        self.group = self.topic
        self.strategy = strategy
        self.kafka = kafka
        self.build = build
        self.work_dir = work_dir
        kafka.create_topic(self.topic, partitions=self.partitions)
        self.metaq = GroupHarness(kafka.zk_connect, self.group, self.topic, work_dir,
                                  {"partition.assignment.strategy": strategy,
                                   # the Scala members are Kafka 1.1.1's: their roundrobin order
                                   "partition.assignment.roundrobin.hash": "1.1"})
        self.scala: list[ScalaMember] = []
        self.producer = ValueProducer(kafka, self.topic, self.partitions)
        self._zk = connect_zk(kafka.zk_connect)
        self.layout = ZkLayout(self._zk)

    def add_metaq(self) -> ConsumerProcess:
        member = self.metaq.add_member()
        member.wait_started(60)
        return member

    def add_scala(self, max_messages: int = -1) -> ScalaMember:
        member = ScalaMember(self.build, self.work_dir, self.kafka.zk_connect, self.group, self.topic,
                             f"scala-{len(self.scala)}", self.strategy, max_messages)
        self.scala.append(member)
        return member

    def expected(self) -> Assignment:
        """The split metaq's assignor computes from the registrations now in ZooKeeper."""
        registrations = self.layout.consumer_registrations(self.group)
        ctx = AssignmentContext.from_topic_counts(registrations, {self.topic: list(range(self.partitions))})
        return ctx.assign(self.strategy, "1.1")

    def owners(self) -> dict[int, str]:
        return {p: owner for (t, p), owner in self.layout.owners(self.group).items() if t == self.topic}

    def wait_settled(self, members: int, timeout: float = 150) -> dict[int, str]:
        """Wait until ``members`` are registered, every partition is owned as metaq's assignor says, and every live
        Scala member's own last computed assignment is that same split. Returns partition -> thread id."""
        state: list[str] = ["not checked yet"]

        def settled() -> bool:
            try:
                ids = self.layout.consumer_ids(self.group)
                expected = {p: t for (_, p), t in self.expected().items()}
                owners = self.owners()
            except MetaqError as e:
                state[0] = f"cannot read the group: {e}"
                return False
            if len(ids) != members:
                state[0] = f"registered {ids}"
            elif owners != expected:
                state[0] = f"owners {owners} != expected {expected}"
            else:
                stale = {m.name: m.last_assignment() for m in self.scala
                         if m.alive and m.last_assignment() != expected}
                state[0] = f"Scala members computed otherwise: {stale}; expected {expected}" if stale else ""
            return not state[0]

        wait_until(settled, timeout, lambda: f"group {self.group} to settle on {members} members: {state[0]}\n"
                   + "\n".join(f"{m.name}:\n{m.log_tail(10)}" for m in self.scala), interval=0.2)
        return self.owners()

    def consumed(self) -> Counter[tuple[int, int]]:
        """(partition, offset) -> times consumed, over both sides; each Scala record's value is checked against
        what the producer wrote at that offset."""
        seen: Counter[tuple[int, int]] = Counter()
        for member in self.scala:
            for record in member.records():
                key = (record["partition"], record["offset"])
                written = self.producer.acked.get(key)
                assert written == record["value"], f"{member.name} read {record['value']!r} at {key}, not {written!r}"
                seen[key] += 1
        for event in self.metaq.events():
            if event["name"] == "records_consumed":
                for run in event["partitions"]:
                    for offset in range(run["minOffset"], run["maxOffset"] + 1):
                        seen[(run["partition"], offset)] += 1
        return seen

    def wait_all_consumed(self, timeout: float = 90) -> Counter[tuple[int, int]]:
        def missing() -> list[tuple[int, int]]:
            seen = self.consumed()
            return sorted(k for k in self.producer.acked if k not in seen)

        wait_until(lambda: not missing(), timeout,
                   lambda: f"every produced record consumed; missing {missing()[:20]} of {len(self.producer.acked)}")
        return self.consumed()

    def wait_committed(self, timeout: float = 60) -> None:
        """Wait until the group's ZooKeeper offsets reach the log end of every partition."""
        wait_until(lambda: self.committed() == self.producer.log_end(), timeout,
                   lambda: f"offsets {self.committed()} to reach {self.producer.log_end()}")

    def read_on_exactly(self, members: int, when: str) -> None:
        """After a side left: the group settles on ``members``, reads new records from the offsets the leavers
        committed, and no record (old or new) has been read twice."""
        self.wait_settled(members)
        self.producer.send(5)
        seen = self.wait_all_consumed()
        self.wait_committed()
        assert [k for k, n in seen.items() if n > 1] == [], f"records read twice {when}"

    def committed(self) -> dict[int, int]:
        return {p: o for (t, p), o in self.layout.offsets(self.group).items() if t == self.topic}

    def close(self) -> None:
        for scala in self.scala:
            scala.kill()
        for member in self.metaq.members:
            member.kill()
        self.producer.close()
        close_zk(self._zk)


@pytest.fixture
def mixed(kafka_broker: ApacheKafkaBroker, old_consumer: OldConsumerBuild, tmp_path: Path,
          request: pytest.FixtureRequest) -> Iterator[MixedGroup]:
    group = MixedGroup(kafka_broker, old_consumer, tmp_path, request.param)
    try:
        yield group
    finally:
        group.close()


class OwnerSampler(threading.Thread):
    """Samples ``/consumers/<g>/owners`` while rebalances run: every owner node must name a thread
    (``<consumer id>-<n>``) of a consumer id the group has registered, whichever side wrote it. (ZooKeeper itself
    holds one node per partition; that no two members hold a partition at once shows in the records: none is read
    twice across the graceful rebalances.)"""

    def __init__(self, group: MixedGroup) -> None:
        super().__init__(name="owner-sampler", daemon=True)
        self.group = group
        self.stop_event = threading.Event()
        self.samples = 0
        self.problems: list[str] = []
        self.seen_ids: set[str] = set()

    def run(self) -> None:
        while not self.stop_event.wait(0.05):
            try:
                self.seen_ids.update(self.group.layout.consumer_ids(self.group.group))
                owners = self.group.owners()
            except MetaqError:
                continue
            self.samples += 1
            for partition, thread in owners.items():
                consumer_id, _, n = thread.rpartition("-")
                if consumer_id not in self.seen_ids or not n.isdigit():
                    self.problems.append(f"partition {partition} owned by {thread!r}, no registered member's thread")

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


# -- tests -------------------------------------------------------------------------------------------------------

STRATEGIES = [pytest.param("range", marks=pytest.mark.compat("mixed group: range split, handover, SIGKILL", PEER)),
              pytest.param("roundrobin",
                           marks=pytest.mark.compat("mixed group: roundrobin split, handover, SIGKILL", PEER))]


@pytest.mark.parametrize("mixed", STRATEGIES, indirect=True)
def test_mixed_group_splits_hands_over_and_survives_sigkill(mixed: MixedGroup) -> None:
    """Two metaq and two Scala members split 8 partitions (12 for roundrobin) as metaq's assignor says (checked
    in ZooKeeper and in the Scala members' own computed assignment); a side that stops hands its committed offsets
    to the other (nothing lost, nothing read twice); a SIGKILLed member of either side hands its partitions over
    without loss."""
    sampler = OwnerSampler(mixed)
    sampler.start()
    mixed.producer.send(5)

    metaq_a = mixed.add_metaq()
    scala_a = mixed.add_scala()
    mixed.wait_settled(2)
    metaq_b = mixed.add_metaq()
    scala_b = mixed.add_scala()
    owners = mixed.wait_settled(4)
    assert {t.rpartition("-")[0] for t in owners.values()} == {*(m.consumer_id() for m in mixed.metaq.members),
                                                               scala_a.consumer_id, scala_b.consumer_id}
    seen = mixed.wait_all_consumed()
    mixed.wait_committed()
    assert [k for k, n in seen.items() if n > 1] == [], "records read twice across graceful joins"

    # the Scala side stops (committing); the metaq side resumes from the Scala commits
    scala_a.stop()
    scala_b.stop()
    mixed.read_on_exactly(2, "when metaq took over from Scala")

    # and back: new Scala members join, the metaq side stops; Scala resumes from the metaq commits
    scala_c = mixed.add_scala()
    scala_d = mixed.add_scala()
    mixed.wait_settled(4)
    metaq_a.stop()
    metaq_b.stop()
    mixed.read_on_exactly(2, "when Scala took over from metaq")

    # SIGKILL on either side while records keep coming: the survivors take over, nothing is lost
    metaq_c = mixed.add_metaq()
    mixed.wait_settled(3)
    sender = SteadySender(mixed.producer)
    sender.start()
    try:
        wait_until(lambda: len(mixed.producer.acked) > mixed.partitions * 20, 30, "traffic")
        scala_c.kill()
        mixed.wait_settled(2)
        metaq_c.kill()
        mixed.wait_settled(1)
        mixed.add_metaq()
        mixed.wait_settled(2)
    finally:
        sender.stop()
    mixed.wait_all_consumed()
    sampler.stop()
    assert sampler.samples > 0
    assert sampler.problems == []
    assert scala_d.alive


def parse_consumer_group_command(stdout: str) -> dict[int, dict[str, str]]:
    """The partition rows of ``ConsumerGroupCommand --describe`` (1.1.1): header ``TOPIC PARTITION
    CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID ...``, one whitespace-separated row per partition."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    header = next(i for i, cols in enumerate(lines) if cols[:2] == ["TOPIC", "PARTITION"])
    names = lines[header]
    rows = {}
    for cols in lines[header + 1:]:
        if len(cols) >= 5 and cols[1].isdigit():
            rows[int(cols[1])] = dict(zip(names, cols, strict=False))
    return rows


@pytest.mark.parametrize("mixed", [pytest.param("range", marks=pytest.mark.compat(
    "groups describe matches ConsumerGroupCommand --zookeeper (mixed group)", PEER))], indirect=True)
def test_consumer_group_command_and_metaq_describe_agree(mixed: MixedGroup) -> None:
    """With a metaq member at the log end and a Scala member holding its partitions part-read (lag > 0), Kafka
    1.1.1's ``ConsumerGroupCommand --zookeeper --describe`` and ``metaq groups describe --json`` report the same
    offset, log end, lag and owner for every partition."""
    mixed.producer.send(10)
    scala = mixed.add_scala(max_messages=12)  # first, or the metaq member would read everything before it joins
    wait_until(lambda: any(e["event"] == "idle" for e in scala.events()), 60,
               lambda: f"the Scala member to read 12 records:\n{scala.log_tail()}")
    metaq_member = mixed.add_metaq()
    owners = mixed.wait_settled(2)
    scala_parts = sorted(p for p, t in owners.items() if t.startswith(scala.consumer_id + "-"))
    metaq_parts = sorted(set(owners) - set(scala_parts))
    assert scala_parts and metaq_parts
    log_end = mixed.producer.log_end()

    def scala_position() -> dict[int, int]:
        position: dict[int, int] = {}
        for record in scala.records():
            position[record["partition"]] = max(position.get(record["partition"], 0), record["offset"] + 1)
        return position

    def settled() -> bool:
        committed = mixed.committed()
        position = scala_position()
        return (all(committed.get(p) == log_end[p] for p in metaq_parts)
                and all(committed.get(p) == position[p] for p in scala_parts if p in position))

    wait_until(settled, 60, lambda: f"offsets {mixed.committed()} to settle (Scala read up to {scala_position()})")
    before = mixed.committed()
    assert any(before.get(p, 0) < log_end[p] for p in scala_parts), "the Scala member read everything: no lag"

    kafka_tool = mixed.kafka.run_class("kafka.admin.ConsumerGroupCommand",
                                       ["--zookeeper", mixed.kafka.zk_connect, "--describe", "--group", mixed.group])
    assert kafka_tool.returncode == 0, kafka_tool.stderr
    metaq_tool = subprocess.run([sys.executable, "-m", "metaq", "groups", "describe", mixed.group, "--zookeeper",
                                 mixed.kafka.zk_connect, "--json"], capture_output=True, text=True, timeout=120)
    assert metaq_tool.returncode == 0, metaq_tool.stderr
    assert mixed.committed() == before and mixed.owners() == owners, "the group moved while the tools ran"

    kafka_rows = parse_consumer_group_command(kafka_tool.stdout)
    metaq_rows = {row["partition"]: row for row in json.loads(metaq_tool.stdout)["partitions"]
                  if row["topic"] == mixed.topic}
    assert sorted(kafka_rows) == sorted(metaq_rows) == list(range(PARTITIONS)), kafka_tool.stdout

    def dash(value: object) -> str:
        return "-" if value is None else str(value)

    for partition in range(PARTITIONS):
        kafka_row, metaq_row = kafka_rows[partition], metaq_rows[partition]
        assert kafka_row["TOPIC"] == mixed.topic
        assert (kafka_row["CURRENT-OFFSET"], kafka_row["LOG-END-OFFSET"], kafka_row["LAG"]) == (
            dash(metaq_row["offset"]), dash(metaq_row["log_end_offset"]), dash(metaq_row["lag"])), \
            f"partition {partition}:\n{kafka_tool.stdout}\n{metaq_row}"
        # 1.1.1 prints the owner node's consumer id without its -<n> thread suffix, as metaq's consumer_id
        assert kafka_row["CONSUMER-ID"] == metaq_row["consumer_id"] == metaq_row["owner"].rpartition("-")[0], \
            f"partition {partition}:\n{kafka_tool.stdout}\n{metaq_row}"
        assert metaq_row["offset"] == before.get(partition) and metaq_row["log_end_offset"] == log_end[partition]
    assert metaq_member.alive and scala.alive
