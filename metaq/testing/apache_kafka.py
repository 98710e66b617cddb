"""Real Apache Kafka brokers (ZooKeeper mode) as test peers: the launcher of one broker or a cluster.

The version catalogue is :mod:`metaq.testing.kafka_versions`, Kafka's tools run from :mod:`metaq.testing.kafka_tools`,
the pytest fixtures and the version matrix are :mod:`metaq.testing.kafka_fixtures`.

metaq's consumer, Spark source and ops tools are checked against the brokers its users run; Kafka's own tools are
run as Java classes from the same jars. Each version's broker and its dependencies are resolved from Maven Central
(:mod:`metaq.testing.maven`, a cache outside the repository; ``make test`` fetches them first with
``python -m metaq.testing.apache_kafka fetch``) and started as ONE child JVM per broker (``java -cp "<dir>/*"
kafka.Kafka server.properties``, never Kafka's shell scripts, whose JVM flags break on Java 17) on the test session's
embedded ZooKeeper, under a chroot of its own (deleted afterwards). docs/testing-apache-kafka.md lists the versions,
their quirks and costs; docs/compatibility.md is the table the tests fill (metaq/testing/compat.py).

A row test, with one broker per version shared by the tests of the module::

    from metaq.testing.kafka_fixtures import kafka_matrix
    from metaq.testing.kafka_versions import REQUIRED_VERSIONS, V1_1

    @kafka_matrix("consume a topic")                  # once per REQUIRED_VERSIONS (3.9.2, 2.8.2, 1.1.1)
    def test_consume(kafka_broker):                   # an ApacheKafkaBroker of that version, started once per module
        kafka_broker.create_topic("t", partitions=2)  # Kafka's own CreateTopics (TopicCommand on 0.8)
        producer = confluent_kafka.Producer(kafka_broker.librdkafka_config())
        ...metaq consumer on kafka_broker.zk_connect (hosts/chroot, what zookeeper.connect takes)...
        kafka_broker.run_class("kafka.admin.ConsumerGroupCommand", ["--zookeeper", kafka_broker.zk_connect, ...])

    @pytest.mark.apache_kafka(V1_1)                   # one version, no parametrization
    @pytest.mark.compat("mixed group with the Scala consumer", "Kafka 1.1.1")
    def test_mixed(kafka_broker): ...

``kafka_matrix`` parametrizes the ``kafka_version`` fixture, marking each run ``apache_kafka(version)`` and
``compat(capability, "Kafka <version>")`` (a cell of docs/compatibility.md); ``kafka_cluster`` is the module's
3-broker cluster of that version. For special brokers (SASL listeners, old message formats) or other sizes use the
module-scoped factories: ``apache_kafka(V2_8, properties={...})``, ``apache_kafka_cluster(V3_9, size=3)``; each
distinct (version, properties) starts one broker (or cluster) per module, stopped when the module ends. Kafka's
tools run as classes of the same jars: ``run_kafka_class(version, "kafka.admin.ConsumerGroupCommand", args)``.

Outside pytest::

    with ApacheKafkaBroker(V3_9, zk_hosts="127.0.0.1:2181", base_dir=Path("/tmp/k")) as kafka:
        print(kafka.bootstrap, kafka.zk_connect)
"""

from __future__ import annotations

import argparse
import logging
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, untyped

from metaq.broker.process import free_port
from metaq.childproc import die_with_parent, stop_process
from metaq.testing.kafka_tools import (
    java_command,
    run_kafka_class,
    run_kafka_tool,
)
from metaq.testing.kafka_versions import (
    ALL_VERSIONS,
    catalogue_entry,
)
from metaq.testing.maven import PeerUnavailableError
from metaq.zkclient import close as close_zk
from metaq.zkclient import connect as connect_zk
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


# -- running Kafka classes ------------------------------------------------------------------------------------------

_LOG4J_BROKER = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={path}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
"""


# -- broker configuration -------------------------------------------------------------------------------------------

def broker_properties(version: str, *, broker_id: int, port: int, zk_connect: str, data_dir: Path,
                      overrides: Mapping[str, object] | None = None) -> dict[str, str]:
    """The ``server.properties`` of a test broker of ``version``: Kafka's own property names, small internal
    topics (RF 1, 4 partitions) so that a one-broker cluster serves groups and transactions at once, and the
    caller's ``overrides`` last (e.g. ``log.message.format.version``, ``inter.broker.protocol.version``, SASL or
    TLS listeners: an override of ``listeners`` must keep ``PLAINTEXT://127.0.0.1:<port>`` or set
    ``advertised.listeners`` to what clients use)."""
    release = catalogue_entry(version).release
    props: dict[str, object] = {"broker.id": broker_id, "zookeeper.connect": zk_connect,
                                "zookeeper.connection.timeout.ms": 30000,
                                # within the 1-10 s the Kafka tests' ZooKeeper grants (kafka_zk_server)
                                "zookeeper.session.timeout.ms": 10000,
                                "num.partitions": 1, "num.network.threads": 2, "num.io.threads": 2,
                                "background.threads": 2, "log.cleaner.threads": 1,
                                # the default 128 MiB dedupe buffer does not fit the small test heap
                                "log.cleaner.dedupe.buffer.size": 8 << 20,
                                "delete.topic.enable": "true",  # default only from 1.0
                                "controlled.shutdown.retry.backoff.ms": 500}
    if release >= (0, 9):
        props.update({"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(data_dir / "data")})
    else:
        props.update({"port": port, "host.name": "127.0.0.1", "log.dir": str(data_dir / "data")})
    if release >= (0, 8, 2):
        props.update({"offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 4})
    if release >= (0, 11):
        props.update({"group.initial.rebalance.delay.ms": 0, "transaction.state.log.replication.factor": 1,
                      "transaction.state.log.min.isr": 1, "transaction.state.log.num.partitions": 4})
    props.update(overrides or {})
    return {key: str(value) for key, value in props.items()}


def librdkafka_config(version: str, bootstrap: str) -> dict[str, Any]:
    """A confluent-kafka (librdkafka) config for a broker of ``version``: brokers before 0.10 have no ApiVersions,
    so librdkafka must be told their version."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if catalogue_entry(version).release < (0, 10):
        config.update({"api.version.request": False, "broker.version.fallback": version})
    return config


# -- the launcher ---------------------------------------------------------------------------------------------------

_JVM_ERROR = re.compile(r"(Exception|Error)\b.*|^Caused by:.*", re.MULTILINE)


class KafkaPeer:
    """What tests do with Apache Kafka of one version, one broker or a cluster alike: clients' config, its Java
    classes and tools, topics. A subclass has ``version``, ``bootstrap`` and ``zk_connect``."""

    version: str

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def zk_connect(self) -> str:
        raise NotImplementedError

    def librdkafka_config(self) -> dict[str, Any]:
        return librdkafka_config(self.version, self.bootstrap)

    def run_class(self, main_class: str, args: Sequence[str], **options: Any) -> subprocess.CompletedProcess[str]:
        """:func:`run_kafka_class` with this peer's version."""
        return run_kafka_class(self.version, main_class, args, **options)

    def run_tool(self, tool: str, args: Sequence[str], **options: Any) -> subprocess.CompletedProcess[str]:
        """:func:`run_kafka_tool` with this peer's version (``"kafka-topics"``, ``"kafka-consumer-groups"``...)."""
        return run_kafka_tool(self.version, tool, args, **options)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     configs: Mapping[str, str] | None = None, *, via: str = "auto") -> None:
        """:func:`create_topic` on this peer."""
        create_topic(self.version, self.bootstrap, self.zk_connect, name, partitions, replication_factor,
                     configs, via=via)


class ApacheKafkaBroker(KafkaPeer):
    """One real Kafka broker: a child JVM this object starts, watches and stops (and nothing else).

    ``zk_hosts`` is the ZooKeeper ensemble (``host:port[,...]``, optionally with a base chroot), ``chroot`` the
    cluster's own chroot under it (default: a fresh ``/kafka-<version>-<uuid>``; Kafka creates it). The port is
    chosen once, so a restart comes back where clients expect it. The JVM is SIGKILLed by the kernel if the test
    process dies (:func:`metaq.childproc.die_with_parent`).
    """

    def __init__(self, version: str, *, zk_hosts: str, base_dir: Path, broker_id: int = 0,
                 chroot: str | None = None, port: int | None = None,
                 properties: Mapping[str, object] | None = None) -> None:
        self.kafka = catalogue_entry(version)
        self.version = self.kafka.version
        self.broker_id = broker_id
        self.zk_hosts = zk_hosts
        self.chroot = chroot or f"/kafka-{self.version.replace('.', '_')}-{uuid.uuid4().hex[:12]}"
        self.port = port or free_port()
        self.dir = Path(base_dir) / f"broker-{broker_id}"
        self.properties = dict(properties or {})
        self.log_path = self.dir / "server.log"
        self.stdout_path = self.dir / "stdout.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_in_s: float | None = None
        self._launched_at = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def zk_connect(self) -> str:
        """``hosts/chroot``: what Kafka's ``zookeeper.connect`` and metaq's consumer and tools take."""
        return f"{self.zk_hosts}{self.chroot}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Write the config and log4j files, start the JVM and wait for ``/brokers/ids/<id>`` and the port; on
        failure the JVM is killed and :class:`PeerUnavailableError` carries its own error and log tail."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the JVM without waiting (a cluster launches all its brokers, then waits for each)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"Kafka {self.version} broker {self.broker_id} is already running")
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "server.properties"
        props = broker_properties(self.version, broker_id=self.broker_id, port=self.port,
                                  zk_connect=self.zk_connect, data_dir=self.dir, overrides=self.properties)
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.dir / "log4j.properties"
        log4j.write_text(_LOG4J_BROKER.format(path=self.log_path))
        command = java_command(self.version, "kafka.Kafka", [str(config)], log4j=log4j)
        self._launched_at = time.monotonic()
        with open(self.stdout_path, "ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                                         preexec_fn=die_with_parent())
        log.info("started Kafka %s broker %d (pid %d) on %s, zookeeper.connect=%s", self.version,
                 self.broker_id, self.proc.pid, self.bootstrap, self.zk_connect)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Wait for the launched JVM's registration and port; kill it and raise if it does not come up."""
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        self.started_in_s = time.monotonic() - self._launched_at
        return self

    def _wait_ready(self, timeout: float) -> None:
        zk = connect_zk(self.zk_hosts, session_timeout_ms=10000, connection_timeout_ms=15000)
        try:
            registration = f"{self.chroot}/brokers/ids/{self.broker_id}"
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise PeerUnavailableError(self._failure(f"exited with {self.proc.returncode}"))
                if zk.exists(registration) and self._port_answers() and self._metadata_names_a_controller():
                    return
                time.sleep(0.2)
        finally:
            close_zk(zk)
        raise PeerUnavailableError(self._failure(f"not registered at {registration}, serving and naming a "
                                                 f"controller within {timeout:.0f} s"))

    def _metadata_names_a_controller(self) -> bool:
        """Whether the broker's Metadata answer names a controller (0.10+; 0.8 has no such field). A broker
        registers before the controller has sent it the cluster's metadata; an AdminClient that asks in between
        waits for a controller until its request times out."""
        if not self.kafka.has_create_topics_api:
            return True
        try:
            metadata = AdminClient(self.librdkafka_config()).list_topics(timeout=5)
        except KafkaException:
            return False
        return bool(metadata.controller_id >= 0 and metadata.brokers)

    def _port_answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def _failure(self, what: str) -> str:
        output = _tail(self.stdout_path, 60)
        first_error = _JVM_ERROR.search(output) or _JVM_ERROR.search(_tail(self.log_path, 200))
        error = f"\nJVM error: {first_error.group(0)}" if first_error else ""
        return (f"Kafka {self.version} broker {self.broker_id} {what}{error}\n--- JVM output ({self.stdout_path}):\n"
                f"{output}\n--- server.log tail ({self.log_path}):\n{self.log_tail(40)}")

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def rss_bytes(self) -> int | None:
        """The JVM's resident memory (Linux ``/proc``), for the harness's cost figures."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``timeout`` seconds. Returns the exit code."""
        return stop_process(self.proc, timeout) if self.proc else None

    def kill(self) -> None:
        """Crash (SIGKILL): no controlled shutdown, the controller sees the registration expire."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(none)"


class ApacheKafkaCluster(KafkaPeer):
    """``size`` brokers of one version (ids 0..size-1) sharing one chroot, for replication tests."""

    def __init__(self, version: str, *, zk_hosts: str, base_dir: Path, size: int = 3,
                 properties: Mapping[str, object] | None = None) -> None:
        first = ApacheKafkaBroker(version, zk_hosts=zk_hosts, base_dir=base_dir, properties=properties)
        self.brokers = [first] + [
            ApacheKafkaBroker(version, zk_hosts=zk_hosts, base_dir=base_dir, broker_id=i, chroot=first.chroot,
                              properties=properties) for i in range(1, size)]
        self.version = first.version

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def zk_connect(self) -> str:
        return self.brokers[0].zk_connect

    def broker(self, broker_id: int) -> ApacheKafkaBroker:
        return self.brokers[broker_id]

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Start the brokers' JVMs together, then wait for each; all or none keep running."""
        try:
            for broker in self.brokers:
                broker.launch()
            for broker in self.brokers:
                broker.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every running broker at once (their controlled shutdowns overlap), then wait for each."""
        for broker in self.brokers:
            if broker.proc is not None and broker.proc.poll() is None:
                broker.proc.terminate()
        for broker in self.brokers:
            broker.stop(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- topics ---------------------------------------------------------------------------------------------------------

TOPIC_VIA = ("auto", "admin", "tool")


def create_topic(version: str, bootstrap: str, zk_connect: str, name: str, partitions: int = 1,
                 replication_factor: int = 1, configs: Mapping[str, str] | None = None, *, via: str = "auto",
                 timeout: float = 60.0) -> None:
    """Create a topic the way a Kafka user of ``version`` would, and wait until every partition has a leader.

    ``via="admin"``: the CreateTopics API (0.10.1+) through confluent-kafka's AdminClient: the real controller
    assigns and elects, and no JVM starts. ``via="tool"``: Kafka's ``kafka-topics`` class (``--zookeeper`` before
    3.0, ``--bootstrap-server`` from 3.0). ``"auto"``: admin where the broker has CreateTopics, else the tool.
    (metaq's own ``metaq topics create --zookeeper`` against a real broker is a compatibility row of its own.)
    """
    if via not in TOPIC_VIA:
        raise ValueError(f"via={via!r}: one of {TOPIC_VIA}")
    kafka = catalogue_entry(version)
    if via == "admin" or (via == "auto" and kafka.has_create_topics_api):
        _create_topic_admin(version, bootstrap, name, partitions, replication_factor, configs, timeout)
    else:
        _create_topic_tool(version, bootstrap, zk_connect, name, partitions, replication_factor, configs)
    _wait_for_leaders(version, bootstrap, zk_connect, name, partitions, timeout)


def _create_topic_admin(version: str, bootstrap: str, name: str, partitions: int, replication_factor: int,
                        configs: Mapping[str, str] | None, timeout: float) -> None:
    admin = AdminClient(librdkafka_config(version, bootstrap))
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(configs or {}))],
                                  request_timeout=timeout)
    try:
        futures[name].result(timeout)
    except Exception as e:  # confluent_kafka raises KafkaException carrying the broker's error
        raise PeerUnavailableError(f"Kafka {version}: CreateTopics {name!r} failed: {e}") from e


def _create_topic_tool(version: str, bootstrap: str, zk_connect: str, name: str, partitions: int,
                       replication_factor: int, configs: Mapping[str, str] | None) -> None:
    target = ["--bootstrap-server", bootstrap] if catalogue_entry(version).release >= (3, 0) \
        else ["--zookeeper", zk_connect]
    args = [*target, "--create", "--topic", name, "--partitions", str(partitions),
            "--replication-factor", str(replication_factor)]
    for key, value in (configs or {}).items():
        args += ["--config", f"{key}={value}"]
    done = run_kafka_tool(version, "kafka-topics", args)
    if done.returncode != 0 or "Error" in done.stdout:
        raise PeerUnavailableError(f"Kafka {version}: TopicCommand {' '.join(args)} failed "
                                   f"({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _wait_for_leaders(version: str, bootstrap: str, zk_connect: str, name: str, partitions: int,
                      timeout: float) -> None:
    """Until the controller has written a leader for every partition in ZooKeeper and the brokers' metadata
    shows them (a 0.8 broker answers Metadata with no brokers until its cache is updated)."""
    deadline = time.monotonic() + timeout
    zk = connect_zk(zk_connect, session_timeout_ms=10000, connection_timeout_ms=15000)
    seen = "no partition state in ZooKeeper"
    try:
        layout = ZkLayout(zk)
        while time.monotonic() < deadline:
            states = layout.partition_states([(name, p) for p in range(partitions)])
            if all(state is not None and state.leader >= 0 for state in states.values()):
                break
            time.sleep(0.2)
    finally:
        close_zk(zk)
    admin = AdminClient(librdkafka_config(version, bootstrap))
    while time.monotonic() < deadline:
        try:
            topic = admin.list_topics(name, timeout=10).topics.get(name)
        except KafkaException as e:  # librdkafka gives up on a 0.8 broker's broker-less Metadata: ask again
            seen = f"metadata error {e}"
            time.sleep(0.5)
            continue
        if topic is not None and topic.error is None:
            leaders = {p: m.leader for p, m in topic.partitions.items()}
            seen = f"leaders {leaders}"
            if len(leaders) == partitions and all(leader >= 0 for leader in leaders.values()):
                return
        elif topic is not None:
            seen = f"error {topic.error}"
        time.sleep(0.2)
    raise PeerUnavailableError(f"Kafka {version}: topic {name!r} has no leader for every partition after "
                               f"{timeout:.0f} s ({seen})")



# -- command line: make test fetches the peers before the tests ------------------------------------------------------

def fetch(versions: Sequence[str]) -> dict[str, float]:
    """Resolve each version's jars (a no-op once cached); seconds taken per version."""
    taken: dict[str, float] = {}
    for version in versions:
        began = time.monotonic()
        catalogue_entry(version).resolve()
        taken[version] = time.monotonic() - began
    return taken


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m metaq.testing.apache_kafka",
                                     description="Resolve the Apache Kafka test peers from Maven Central.")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_parser = sub.add_parser("fetch", help="resolve versions into the peer cache (default: the test matrix)")
    fetch_parser.add_argument("versions", nargs="*", default=list(ALL_VERSIONS))
    args = parser.parse_args(argv)
    try:
        for version, seconds in fetch(args.versions).items():
            sys.stdout.write(f"Kafka {version}: {catalogue_entry(version).resolve()} ({seconds:.1f} s)\n")
    except PeerUnavailableError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
