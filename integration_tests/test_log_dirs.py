"""Several log directories per broker (docs/log-dirs.md), with real broker processes and real peers: Kafka
3.9.2's ``kafka-log-dirs --describe``, moving a replicated partition's leader between directories while it is
written
(AlterReplicaLogDirs from kafka-python's admin client and from ``metaq brokers move-replica-dir``), and a log
directory whose file system fails taking only its partitions offline while the controller moves their
leadership to the other replica.

The failing directory is a real ext4 file system on a loop device, shut down with ``EXT4_IOC_SHUTDOWN`` (the
ioctl behind ``xfs_io -c shutdown``/fstests' ``godown``): every later read, write and fsync of it fails with
EIO, as on a disk that died. It needs root (the test machines run as root); without it the test fails with the
mount's error.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.admin import KafkaAdminClient

from integration_tests.peers import confluent_consume
from metaq.broker.log.loader import parse_log_dir_name
from metaq.broker.topics import create_topic
from metaq.cli.main import main as cli_main
from metaq.errors import MetaqError
from metaq.testing.broker import BrokerCluster, topic_leaders
from metaq.testing.kafka_tools import run_kafka_tool
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import own_chroot
from metaq.zkclient import connect
from zk_layout import ZkLayout

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr.strip() or done.returncode}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 64 MB ext4 file system on a loop device, mounted for this module (its ``logs`` directory)."""
    base = tmp_path_factory.mktemp("ext4")
    image, mount_point = base / "disk.img", base / "mnt"
    mount_point.mkdir()
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    _run("mkfs.ext4", "-q", "-F", str(image))
    device = _run("losetup", "--find", "--show", str(image))
    try:
        _run("mount", "-t", "ext4", "-o", "errors=continue", device, str(mount_point))
        try:
            yield mount_point
        finally:
            subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True)


def shut_down(mount_point: Path) -> None:
    """Every later I/O on the file system fails with EIO."""
    fd = os.open(mount_point, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


class Dirs:
    """Each broker's two log directories; broker 0's second is on :func:`disk`."""

    def __init__(self, base: Path, disk: Path) -> None:
        self.by_broker = {0: [base / "b0-a", disk / "logs"], 1: [base / "b1-a", base / "b1-b"]}
        self.only_disk = disk / "solo"
        """Broker 2's only log directory: it stops when the disk fails."""

    def holding(self, broker: int, topic: str, partition: int) -> Path | None:
        found = [d for d in self.by_broker[broker] if (d / f"{topic}-{partition}").is_dir()]
        assert len(found) <= 1, found
        return found[0] if found else None


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory, disk: Path) -> Dirs:
    return Dirs(tmp_path_factory.mktemp("log-dirs"), disk)


@pytest.fixture(scope="module")
def cluster(zk_server: Any, tmp_path_factory: pytest.TempPathFactory, dirs: Dirs) -> Iterator[BrokerCluster]:
    with own_chroot(zk_server, "metaq-log-dirs") as connect_string:
        brokers = BrokerCluster(connect_string, tmp_path_factory.mktemp("brokers"))
        try:
            for broker_id, paths in dirs.by_broker.items():
                brokers.add(broker_id, **{"log.dirs": ",".join(map(str, paths)),
                                          "offsets.topic.num.partitions": 1})
            # checkpoints twice a second: it notices the failed disk without a partition of its own
            brokers.add(2, **{"log.dirs": dirs.only_disk, "offsets.topic.num.partitions": 1,
                              "log.flush.offset.checkpoint.interval.ms": 500})
            yield brokers
        finally:
            brokers.stop()


@pytest.fixture(scope="module")
def layout(cluster: BrokerCluster) -> Iterator[ZkLayout]:
    client = connect(cluster.zk_connect, session_timeout_ms=10000)
    try:
        yield ZkLayout(client)
    finally:
        client.stop()
        client.close()


def _topic(cluster: BrokerCluster, layout: ZkLayout, name: str, assignment: dict[int, list[int]]) -> str:
    create_topic(layout, name, len(assignment), assignment=assignment)
    bootstrap = cluster.brokers[0].bootstrap
    wait_until(lambda: len(topic_leaders(bootstrap, name)) == len(assignment), 30, f"topic {name} served")
    return name


def _metaq(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"metaq {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def _metaq_here(*args: str) -> str:
    """``metaq <args>`` in this process (no interpreter start): its standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(args))
    assert code == 0, f"metaq {' '.join(args)} exited {code}: {out.getvalue()}"
    return out.getvalue()


def _described(bootstrap: str, topic: str) -> dict[tuple[int, str], dict[str, Any]]:
    """``metaq brokers log-dirs --json``: (broker, log dir) -> that directory's entry."""
    document = json.loads(_metaq("brokers", "log-dirs", "--bootstrap-server", bootstrap, "--topic-list", topic,
                                 "--json"))
    return {(b["broker"], d["logDir"]): d for b in document["brokers"] for d in b["logDirs"]}


def _segment_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


class Writer:
    """confluent-kafka, acks=all, producing numbered values to one partition until stopped; every delivery
    report is kept (acknowledged offset -> value, or the error)."""

    def __init__(self, bootstrap: str, topic: str, partition: int, size: int = 200) -> None:
        self.acked: dict[int, bytes] = {}
        self.errors: list[confluent_kafka.KafkaError] = []
        self._topic, self._partition, self._size = topic, partition, size
        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                                   "linger.ms": 5, "message.timeout.ms": 60000})
        self._stop = threading.Event()
        self._sent = 0
        self._thread = threading.Thread(target=self._run, name="log-dirs-writer", daemon=True)

    def _on_delivery(self, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        if err is None:
            self.acked[msg.offset()] = msg.value()
        else:
            self.errors.append(err)

    def send(self, count: int) -> None:
        for _ in range(count):
            value = f"v{self._sent:08d}-".encode().ljust(self._size, b"x")
            self._sent += 1
            while True:
                try:
                    self._producer.produce(self._topic, value, partition=self._partition,
                                           on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self._producer.poll(0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send(20)
            self._producer.poll(0.01)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        assert self._producer.flush(60) == 0


def _all_acked_readable(bootstrap: str, topic: str, partition: int, writer: Writer) -> None:
    total = max(writer.acked) + 1
    stored = {m.offset: m.value for m in confluent_consume(bootstrap, topic, partition,
                                                           confluent_kafka.OFFSET_BEGINNING, total, timeout=60)}
    lost = sorted(o for o, v in writer.acked.items() if stored.get(o) != v)
    assert not lost, f"{len(lost)} of {len(writer.acked)} acknowledged records lost, e.g. offsets {lost[:5]}"


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("log-dirs --describe: several log dirs per broker", f"Kafka {V3_9}")
def test_kafka_log_dirs_describe_names_each_partitions_directory(cluster: BrokerCluster, layout: ZkLayout,
                                                                 dirs: Dirs) -> None:
    topic = _topic(cluster, layout, "described", {0: [0], 1: [0], 2: [1], 3: [1]})
    for partition in range(4):
        writer = Writer(cluster.brokers[0].bootstrap, topic, partition)
        writer.send(5 + partition)
        writer.stop()
    bootstrap = cluster.brokers[0].bootstrap
    run = run_kafka_tool(V3_9, "kafka-log-dirs", ["--bootstrap-server", bootstrap, "--describe",
                                                  "--topic-list", topic, "--broker-list", "0,1"])
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout.strip().splitlines()[-1])
    seen = {}
    for broker in document["brokers"]:
        assert sorted(d["logDir"] for d in broker["logDirs"]) == sorted(map(str, dirs.by_broker[broker["broker"]]))
        for log_dir in broker["logDirs"]:
            assert log_dir["error"] is None
            for p in log_dir["partitions"]:
                seen[p["partition"]] = (broker["broker"], log_dir["logDir"], p["size"], p["isFuture"])
    expected = {}
    for partition, broker in ((0, 0), (1, 0), (2, 1), (3, 1)):
        held = dirs.holding(broker, topic, partition)
        assert held is not None
        expected[f"{topic}-{partition}"] = (broker, str(held), _segment_bytes(held / f"{topic}-{partition}"), False)
    assert seen == expected
    # new partitions are spread: each broker put its two partitions in different directories
    assert dirs.holding(0, topic, 0) != dirs.holding(0, topic, 1)
    assert dirs.holding(1, topic, 2) != dirs.holding(1, topic, 3)
    ours = _described(bootstrap, topic)
    assert {(b, d) for b, d in ours} == {(b, str(d)) for b, ds in dirs.by_broker.items() for d in ds} | {
        (2, str(dirs.only_disk))}
    assert {p["partition"]: (b, d, p["size"], p["isFuture"]) for (b, d), e in ours.items()
            for p in e["partitions"]} == expected


def test_partition_moves_between_log_dirs_while_written(cluster: BrokerCluster, layout: ZkLayout,
                                                        dirs: Dirs) -> None:
    topic = _topic(cluster, layout, "moved", {0: [1, 0]})  # broker 1 leads, broker 0 follows (acks=all)
    bootstrap = cluster.brokers[1].bootstrap
    writer = Writer(bootstrap, topic, 0, size=1000)
    writer.send(3000)  # ~3 MB to copy before the tail
    wait_until(lambda: dirs.holding(1, topic, 0) is not None, 30, "the log to be created by the first produce")
    source = dirs.holding(1, topic, 0)
    assert source is not None
    target = next(d for d in dirs.by_broker[1] if d != source)
    writer.start()
    wait_until(lambda: len(writer.acked) > 3000, 60, "the writer to be acknowledged")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = admin.alter_replica_log_dirs({(topic, 0, 1): str(target)})
    finally:
        admin.close()
    assert [error.__name__ for error in answer.values()] == ["NoError"]
    wait_until(lambda: dirs.holding(1, topic, 0) == target, 60, f"{topic}-0 to move to {target}")
    acked_at_swap = len(writer.acked)
    wait_until(lambda: len(writer.acked) > acked_at_swap + 200, 60, "writes to go on after the swap")

    # and back, with metaq's command, still while written
    _metaq("brokers", "move-replica-dir", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0",
           "--broker", "1", "--dir", str(source))
    wait_until(lambda: dirs.holding(1, topic, 0) == source, 60, f"{topic}-0 to move back to {source}")
    writer.stop()
    assert writer.errors == []
    _all_acked_readable(bootstrap, topic, 0, writer)
    assert layout.partition_state(topic, 0).isr == (1, 0)  # type: ignore[union-attr]  # the follower kept up
    entries = _described(bootstrap, topic)
    assert [p["isFuture"] for p in entries[(1, str(source))]["partitions"]] == [False]
    assert entries[(1, str(target))]["partitions"] == []
    lines = _metaq("brokers", "log-dirs", "--bootstrap-server", bootstrap, "--topic-list", topic).splitlines()
    assert lines[0].split() == ["BROKER", "LOG-DIR", "STATUS", "PARTITION", "SIZE", "OFFSET-LAG", "FUTURE"]
    assert [line.split()[:4] for line in lines if f"{topic}-0" in line] == [
        ["0", str(dirs.holding(0, topic, 0)), "online", f"{topic}-0"], ["1", str(source), "online", f"{topic}-0"]]
    assert not any(p.name.startswith(f"{topic}-0") for p in target.iterdir())  # no future or -delete left

    refused = subprocess.run([sys.executable, "-m", "metaq", "brokers", "move-replica-dir", "--bootstrap-server",
                              bootstrap, "--topic", topic, "--partition", "0", "--broker", "1", "--dir", "/nowhere"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "LOG_DIR_NOT_FOUND" in refused.stderr


def _not_chosen(dirs: Dirs, broker: int) -> Path:
    """A directory of ``broker`` its placement rule would not pick for a new partition now (the one holding more
    partitions; the second on a tie: docs/log-dirs.md, "Placement")."""
    first, second = dirs.by_broker[broker]
    count = {d: sum(1 for p in d.iterdir() if parse_log_dir_name(p.name) is not None) for d in (first, second)}
    return first if count[first] > count[second] else second


def _plan(topic: str, broker: int, log_dir: Path) -> str:
    return json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [broker],
                                                     "log_dirs": [str(log_dir)]}]})


@pytest.mark.apache_kafka(V3_9)
@pytest.mark.compat("kafka-reassign-partitions plan with log_dirs", f"Kafka {V3_9}")
def test_reassignment_places_the_new_replica_in_the_plans_log_dir(cluster: BrokerCluster, layout: ZkLayout,
                                                                  dirs: Dirs, tmp_path: Path) -> None:
    """A plan's ``log_dirs`` (Kafka 3.9.2's ``kafka-reassign-partitions --bootstrap-server``, then ``metaq topics
    reassign --bootstrap-server``): the partition moves from broker 0 to broker 1 into the named directory, one
    the placement rule would not have chosen, and ``metaq topics reassign --verify`` reports the replica's move
    completed and clears the throttle its ``--execute`` set."""
    bootstrap = cluster.brokers[1].bootstrap
    for name, tool in (("placed-kafka", "kafka"), ("placed-metaq", "metaq")):
        topic = _topic(cluster, layout, name, {0: [0]})
        writer = Writer(bootstrap, topic, 0)
        writer.send(50)
        writer.stop()
        target = _not_chosen(dirs, 1)
        (tmp_path / f"{name}.json").write_text(_plan(topic, 1, target))
        args = ["--bootstrap-server", bootstrap, "--reassignment-json-file", str(tmp_path / f"{name}.json")]
        if tool == "kafka":
            run = run_kafka_tool(V3_9, "kafka-reassign-partitions", [*args, "--execute"])
            out = run.stdout
            assert run.returncode == 0, f"{out}\n{run.stderr}"
        else:
            # --throttle: IncrementalAlterConfigs on the topic and each broker
            out = _metaq_here("topics", "reassign", "--execute", *args, "--throttle", "52428800")
            assert layout.topic_config(topic).config["follower.replication.throttled.replicas"] == "0:1"  # type: ignore[union-attr]
            assert layout.broker_config("1")["follower.replication.throttled.rate"] == "52428800"
        assert f"Successfully started moving log directory to {target} for replica {topic}-0 with broker 1" in out, out
        wait_until(lambda t=topic: layout.topic_assignment(t).partitions == {0: (1,)}, 60,  # type: ignore[union-attr]
                   f"{topic} moved to broker 1")
        if tool == "metaq":  # asked before the move started: created there, never elsewhere
            assert dirs.holding(1, topic, 0) == target
            assert [p.name for p in target.iterdir() if p.name.startswith(f"{topic}-0")] == [f"{topic}-0"]
        else:  # Kafka's tool asks once the move started: the replica may be created elsewhere, then moved
            wait_until(lambda t=topic, d=target: dirs.holding(1, t, 0) == d, 60, f"{topic}-0 in {target}")
        if tool == "metaq":
            verified = json.loads(_metaq_here("topics", "reassign", "--verify", *args, "--json"))
            assert verified["log_dirs"] == [{"topic": topic, "partition": 0, "broker": 1, "status": "completed"}]
            assert verified["partitions"] == [{"topic": topic, "partition": 0, "status": "completed"}]
            assert verified["throttles_cleared"]
            assert "follower.replication.throttled.rate" not in layout.broker_config("1")
        _all_acked_readable(bootstrap, topic, 0, writer)


def test_failed_log_dir_takes_only_its_partitions_offline(cluster: BrokerCluster, layout: ZkLayout, dirs: Dirs,
                                                          disk: Path) -> None:
    """Runs last: broker 0's second directory stays failed."""
    topic = _topic(cluster, layout, "failing", {0: [0, 1], 1: [0, 1]})
    bootstrap = cluster.brokers[0].bootstrap
    failing_dir, healthy_dir = dirs.by_broker[0][1], dirs.by_broker[0][0]
    for partition, wanted in ((0, failing_dir), (1, healthy_dir)):
        if dirs.holding(0, topic, partition) != wanted:
            _metaq("brokers", "move-replica-dir", "--bootstrap-server", bootstrap, "--topic", topic, "--partition",
                   str(partition), "--broker", "0", "--dir", str(wanted))
            wait_until(lambda p=partition, w=wanted: dirs.holding(0, topic, p) == w, 60, "the placement")
    writers = [Writer(bootstrap, topic, p) for p in (0, 1)]
    for writer in writers:
        writer.send(50)
        writer.stop()
    assert topic_leaders(bootstrap, topic) == {0: 0, 1: 0}

    held = {parsed for p in failing_dir.iterdir() if (parsed := parse_log_dir_name(p.name)) is not None}
    assert (topic, 0) in held and (topic, 1) not in held
    shut_down(disk)
    writers = [Writer(bootstrap, topic, p) for p in (0, 1)]
    for writer in writers:
        writer.send(50)  # the append to partition 0 fails with EIO: its directory goes offline
    wait_until(lambda: topic_leaders(cluster.brokers[1].bootstrap, topic) == {0: 1, 1: 0}, 60,
               "leadership of the failed directory's partition to move to broker 1 (and only that one)")
    for writer in writers:
        writer.stop()
        assert writer.errors == []  # the producer retried partition 0 on its new leader
    assert layout.partition_state(topic, 0).isr == (1,)  # type: ignore[union-attr]
    assert layout.partition_state(topic, 1).isr == (0, 1)  # type: ignore[union-attr]
    assert layout.offline_replicas([0, 1]) == {0: held}  # every partition of the directory, no other
    assert layout.log_dir_events() == {}  # consumed by the controller
    for partition in (0, 1):
        stored = confluent_consume(cluster.brokers[1].bootstrap, topic, partition, confluent_kafka.OFFSET_BEGINNING,
                                   100, timeout=60)
        assert len(stored) == 100, (partition, len(stored))

    entries = _described(cluster.brokers[1].bootstrap, topic)
    assert entries[(0, str(failing_dir))]["error"] == "KAFKA_STORAGE_ERROR"
    assert entries[(0, str(failing_dir))]["partitions"] == []
    assert entries[(0, str(healthy_dir))]["error"] is None
    assert [p["partition"] for p in entries[(0, str(healthy_dir))]["partitions"]] == [f"{topic}-1"]
    assert cluster.brokers[0].proc is not None and cluster.brokers[0].proc.poll() is None  # serves on

    # a broker whose only log directory failed stops, with exit status 1 (Kafka's halts)
    solo = cluster.brokers[2]
    assert solo.proc is not None
    wait_until(lambda: solo.proc is not None and solo.proc.poll() is not None, 60,
               "broker 2, whose only log directory was on the failed disk, to stop")
    assert solo.proc.returncode == 1, solo.log_tail()
    assert f"every log directory failed: {dirs.only_disk}" in solo.log_path.read_text()


def test_a_log_dir_failed_at_start_up(cluster: BrokerCluster, layout: ZkLayout, dirs: Dirs) -> None:
    """Runs after the failure above, the disk still shut down. Broker 0 restarts without its failed directory
    (Kafka's createAndValidateLogDirs): the partitions assigned to it without a log in the healthy directory are
    offline there, reported to the controller, and not re-created empty; failing-1, in the healthy directory,
    is back in sync. Broker 2, whose only directory is on the disk, does not start (Kafka halts)."""
    topic = "failing"
    failing_dir, healthy_dir = dirs.by_broker[0][1], dirs.by_broker[0][0]
    broker = cluster.brokers[0]
    broker.stop()
    broker.start()
    bootstrap = cluster.brokers[1].bootstrap
    wait_until(lambda: 0 in layout.partition_state(topic, 1).isr, 60,  # type: ignore[union-attr]
               "broker 0 back in sync for failing-1, in its healthy directory")
    offline = layout.offline_replicas([0]).get(0, set())
    assert (topic, 0) in offline and (topic, 1) not in offline, offline
    assert all(not (healthy_dir / f"{t}-{p}").exists() for t, p in offline)
    assert layout.partition_state(topic, 0).isr == (1,)  # type: ignore[union-attr]
    assert not (healthy_dir / f"{topic}-0").exists()  # not created empty in place of the unreadable one
    entries = _described(bootstrap, topic)
    assert entries[(0, str(failing_dir))]["error"] == "KAFKA_STORAGE_ERROR"
    assert [p["partition"] for p in entries[(0, str(healthy_dir))]["partitions"]] == [f"{topic}-1"]

    solo = cluster.brokers[2]
    with pytest.raises(MetaqError, match="exited with 1"):
        solo.start()
    assert "none of the log directories" in solo.log_path.read_text()
