"""Real Apache Kafka brokers (ZooKeeper mode) as test peers: a version catalogue, a launcher, pytest fixtures.

metaq's consumer, Spark source and ops tools are checked against the brokers its users run; Kafka's own tools are
run as Java classes from the same jars. Each version's broker and its dependencies are resolved from Maven Central
(:mod:`metaq.testing.maven`, a cache outside the repository; ``make test`` fetches them first with
``python -m metaq.testing.apache_kafka fetch``) and started as ONE child JVM per broker (``java -cp "<dir>/*"
kafka.Kafka server.properties``, never Kafka's shell scripts, whose JVM flags break on Java 17) on the test session's
embedded ZooKeeper, under a chroot of its own (deleted afterwards). docs/testing-apache-kafka.md lists the versions,
their quirks and costs; docs/compatibility.md is the table the tests fill (metaq/testing/compat.py).

A row test, with one broker per version shared by the tests of the module::

    from metaq.testing.apache_kafka import REQUIRED_VERSIONS, V1_1, kafka_matrix

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
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, untyped

from metaq.broker.process import free_port
from metaq.childproc import die_with_parent, stop_process
from metaq.testing.maven import MavenArtifact, PeerUnavailableError, cache_root, classpath, resolve
from metaq.testing.zookeeper import ENV_CONNECT, ExternalZooKeeper, ZooKeeperEndpoint, delete_chroot, embedded_server
from metaq.zkclient import close as close_zk
from metaq.zkclient import connect as connect_zk
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

JVM_OPTIONS = (
    "-Xmx256m", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
    # pre-1.0 brokers unmap index files through sun.nio.ch.DirectBuffer; harmless for the others
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)
"""Small heap, quick start (C1 only): test brokers hold little data and start often."""
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
TOOL_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class KafkaVersion:
    """One Apache Kafka release: its Maven artifacts (broker, tools, a log4j binding) and what its config needs."""

    version: str
    artifacts: tuple[MavenArtifact, ...]
    required: bool

    @property
    def release(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("."))

    @property
    def peer(self) -> str:
        """The column of docs/compatibility.md."""
        return f"Kafka {self.version}"

    @property
    def cache_name(self) -> str:
        return f"apache-kafka-{self.version}"

    @property
    def has_listeners(self) -> bool:
        """``listeners``/``log.dirs`` from 0.9; 0.8 takes ``port``, ``host.name`` and ``log.dir``."""
        return self.release >= (0, 9)

    @property
    def has_create_topics_api(self) -> bool:
        """CreateTopics (and ApiVersions) from 0.10.1; older brokers get topics from TopicCommand --zookeeper."""
        return self.release >= (0, 10, 1)

    def resolve(self) -> Path:
        """The directory of this version's jars (resolved from Maven Central on first use)."""
        return resolve(self.cache_name, self.artifacts)


def _artifacts(*coordinates: str) -> tuple[MavenArtifact, ...]:
    return tuple(MavenArtifact.parse(c) for c in coordinates)


V3_9 = "3.9.2"
V2_8 = "2.8.2"
V1_1 = "1.1.1"
V0_10 = "0.10.2.2"
V0_8 = "0.8.2.2"

CATALOGUE: dict[str, KafkaVersion] = {
    v.version: v for v in (
        # kafka-tools holds most command-line tools from 3.5 on (org.apache.kafka.tools.*)
        KafkaVersion(V3_9, _artifacts(f"org.apache.kafka:kafka_2.13:{V3_9}", f"org.apache.kafka:kafka-tools:{V3_9}",
                                      "org.slf4j:slf4j-reload4j:1.7.36"), required=True),
        KafkaVersion(V2_8, _artifacts(f"org.apache.kafka:kafka_2.13:{V2_8}", "org.slf4j:slf4j-log4j12:1.7.30"),
                     required=True),
        # the last release with the old Scala consumer (kafka.consumer.ZookeeperConsumerConnector)
        KafkaVersion(V1_1, _artifacts(f"org.apache.kafka:kafka_2.11:{V1_1}", "org.slf4j:slf4j-log4j12:1.7.25"),
                     required=True),
        # javax.xml.bind left the JDK in 11; 2.3.x of the Jakarta API still ships the javax.xml.bind package
        KafkaVersion(V0_10, _artifacts(f"org.apache.kafka:kafka_2.11:{V0_10}", "org.slf4j:slf4j-log4j12:1.7.21",
                                       "jakarta.xml.bind:jakarta.xml.bind-api:2.3.3"), required=False),
        KafkaVersion(V0_8, _artifacts(f"org.apache.kafka:kafka_2.11:{V0_8}", "org.slf4j:slf4j-log4j12:1.7.6"),
                     required=False),
    )
}
REQUIRED_VERSIONS: tuple[str, ...] = tuple(v for v, k in CATALOGUE.items() if k.required)
ALL_VERSIONS: tuple[str, ...] = tuple(CATALOGUE)


def catalogue_entry(version: str) -> KafkaVersion:
    """The catalogue entry for ``version``, or for the newest patch of a release line (``"3.9"``)."""
    if version in CATALOGUE:
        return CATALOGUE[version]
    matches = [v for v in CATALOGUE if v.startswith(version + ".")]
    if not matches:
        raise PeerUnavailableError(f"Apache Kafka {version} is not in the catalogue ({', '.join(CATALOGUE)})")
    return CATALOGUE[matches[0]]


# -- running Kafka classes ------------------------------------------------------------------------------------------

_LOG4J_BROKER = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={path}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
"""
_LOG4J_TOOLS = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def _tools_log4j() -> Path:
    """A shared log4j config for tool runs: warnings to stderr, so stdout is the tool's own output."""
    path = cache_root() / "log4j-tools.properties"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(_LOG4J_TOOLS)
        scratch.replace(path)
    return path


def java_command(version: str, main_class: str, args: Sequence[str], *, log4j: Path,
                 jvm_options: Sequence[str] = ()) -> list[str]:
    """``java <options> -cp "<jars>/*" <main_class> <args>`` for a catalogued version."""
    jars = catalogue_entry(version).resolve()
    return ["java", *JVM_OPTIONS, *jvm_options, f"-Dlog4j.configuration=file:{log4j}",
            "-cp", classpath(jars), main_class, *args]


def run_kafka_class(version: str, main_class: str, args: Sequence[str], *, input: str | None = None,
                    timeout: float = TOOL_TIMEOUT_S, jvm_options: Sequence[str] = ()
                    ) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tool classes (e.g. ``kafka.admin.ConsumerGroupCommand``) from ``version``'s jars and
    return its result (check ``returncode`` yourself: a tool's refusal is often what a test asserts). Its log4j
    output goes to stderr at WARN."""
    command = java_command(version, main_class, args, log4j=_tools_log4j(), jvm_options=jvm_options)
    return subprocess.run(command, input=input, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=die_with_parent())


_KT = "org.apache.kafka.tools."
TOOL_CLASSES: dict[str, tuple[tuple[tuple[int, ...], str | None], ...]] = {
    # tool script name -> (first release, main class or None once removed), newest first; checked against the
    # jars of the catalogued releases only (the boundaries between them are where the classes moved upstream)
    "kafka-topics": (((3, 6), _KT + "TopicCommand"), ((0,), "kafka.admin.TopicCommand")),
    "kafka-consumer-groups": (((3, 7), _KT + "consumer.group.ConsumerGroupCommand"),
                              ((0, 9), "kafka.admin.ConsumerGroupCommand")),
    "kafka-console-consumer": (((3, 7), _KT + "consumer.ConsoleConsumer"), ((0,), "kafka.tools.ConsoleConsumer")),
    "kafka-console-producer": (((0,), "kafka.tools.ConsoleProducer"),),
    "kafka-configs": (((0, 9), "kafka.admin.ConfigCommand"),),
    "kafka-acls": (((0, 9), "kafka.admin.AclCommand"),),
    "kafka-get-offsets": (((3, 5), _KT + "GetOffsetShell"), ((0,), "kafka.tools.GetOffsetShell")),
    "kafka-delete-records": (((3, 5), _KT + "DeleteRecordsCommand"), ((0, 11), "kafka.admin.DeleteRecordsCommand")),
    "kafka-log-dirs": (((3, 5), _KT + "LogDirsCommand"), ((1, 0), "kafka.admin.LogDirsCommand")),
    "kafka-leader-election": (((3, 5), _KT + "LeaderElectionCommand"), ((2, 4), "kafka.admin.LeaderElectionCommand")),
    "kafka-reassign-partitions": (((3, 5), _KT + "reassign.ReassignPartitionsCommand"),
                                  ((0,), "kafka.admin.ReassignPartitionsCommand")),
    "kafka-broker-api-versions": (((0, 10, 2), "kafka.admin.BrokerApiVersionsCommand"),),
    "kafka-transactions": (((3, 0), _KT + "TransactionsCommand"),),  # KIP-664
    # the old consumer's tools: ConsumerOffsetChecker is gone by 1.1, the ZooKeeper offset tools from 2.0
    "kafka-consumer-offset-checker": (((1, 1), None), ((0,), "kafka.tools.ConsumerOffsetChecker")),
    "kafka-export-zk-offsets": (((2, 0), None), ((0,), "kafka.tools.ExportZkOffsets")),
    "kafka-import-zk-offsets": (((2, 0), None), ((0,), "kafka.tools.ImportZkOffsets")),
}


def tool_class(version: str, tool: str) -> str:
    """The main class of Kafka's ``bin/<tool>.sh`` in ``version`` (many moved to ``org.apache.kafka.tools`` in 3.5
    to 3.7); :class:`PeerUnavailableError` if that release has no such tool."""
    release = catalogue_entry(version).release
    for since, main_class in TOOL_CLASSES[tool]:
        if release >= since:
            if main_class is None:
                break
            return main_class
    raise PeerUnavailableError(f"Kafka {version} has no {tool} tool")


def run_kafka_tool(version: str, tool: str, args: Sequence[str], **options: Any
                   ) -> subprocess.CompletedProcess[str]:
    """:func:`run_kafka_class` by tool name: ``run_kafka_tool(V3_9, "kafka-consumer-groups", [...])``."""
    return run_kafka_class(version, tool_class(version, tool), args, **options)


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


# -- pytest fixtures ------------------------------------------------------------------------------------------------

def kafka_params(capability: str, versions: Sequence[str] = REQUIRED_VERSIONS) -> list[Any]:
    """``pytest.param`` per version, each marked ``apache_kafka(version)`` and ``compat(capability, "Kafka
    <version>")`` (a cell of docs/compatibility.md); for a parametrization of your own."""
    return [pytest.param(v, id=f"kafka-{v}", marks=[pytest.mark.apache_kafka(v),
                                                      pytest.mark.compat(capability, catalogue_entry(v).peer)])
            for v in versions]


def kafka_matrix(capability: str, versions: Sequence[str] = REQUIRED_VERSIONS) -> pytest.MarkDecorator:
    """Run the test once per version with ``kafka_broker`` (or ``kafka_cluster``) of that version, each run a cell
    ``(capability, "Kafka <version>")`` of docs/compatibility.md::

        @kafka_matrix("consume from a ZooKeeper group")
        def test_group(kafka_broker): ...
    """
    return pytest.mark.parametrize("kafka_version", kafka_params(capability, versions))


KAFKA_ZK_TICK_MS = 500


@pytest.fixture(scope="session")
def kafka_zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEndpoint]:
    """The ZooKeeper of the real Kafka brokers (started on first use): like ``zk_server`` but with tickTime
    500 ms, so that it grants sessions of up to 10 s (``zk_server``: 4 s): a broker JVM starved of CPU for a few
    seconds on the loaded test machine keeps its session and registration, and a SIGKILLed broker's registration
    still goes within 10 s. ``$ZOOKEEPER_CONNECT`` names an external server instead, as for ``zk_server``."""
    external = os.environ.get(ENV_CONNECT)
    if external:
        yield ExternalZooKeeper(external)
        return
    with embedded_server(tmp_path_factory, tick_time_ms=KAFKA_ZK_TICK_MS) as server:
        yield server


def _zk_hosts(zk_server: ZooKeeperEndpoint) -> str:
    return str(zk_server.connect_string)


@pytest.fixture(scope="module")
def apache_kafka(kafka_zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Callable[..., ApacheKafkaBroker]]:
    """Module-scoped factory: ``apache_kafka(version, properties=None)`` returns a started broker, the same one
    for the same arguments within the module; all are stopped when the module ends."""
    brokers: dict[tuple[str, tuple[tuple[str, str], ...]], ApacheKafkaBroker] = {}

    def get(version: str, properties: Mapping[str, object] | None = None) -> ApacheKafkaBroker:
        key = (catalogue_entry(version).version, tuple(sorted((k, str(v)) for k, v in (properties or {}).items())))
        if key not in brokers:
            base = tmp_path_factory.mktemp(f"kafka-{key[0]}")
            broker = ApacheKafkaBroker(key[0], zk_hosts=_zk_hosts(kafka_zk_server), base_dir=base,
                                       properties=properties)
            brokers[key] = broker.start()
        return brokers[key]

    yield get
    for broker in brokers.values():
        broker.stop()
        delete_chroot(kafka_zk_server, broker.chroot)


@pytest.fixture(scope="module")
def apache_kafka_cluster(kafka_zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[Callable[..., ApacheKafkaCluster]]:
    """Module-scoped factory: ``apache_kafka_cluster(version, size=3, properties=None)``, one per arguments."""
    clusters: dict[tuple[str, int, tuple[tuple[str, str], ...]], ApacheKafkaCluster] = {}

    def get(version: str, size: int = 3, properties: Mapping[str, object] | None = None) -> ApacheKafkaCluster:
        key = (catalogue_entry(version).version, size,
               tuple(sorted((k, str(v)) for k, v in (properties or {}).items())))
        if key not in clusters:
            base = tmp_path_factory.mktemp(f"kafka-cluster-{key[0]}")
            cluster = ApacheKafkaCluster(key[0], zk_hosts=_zk_hosts(kafka_zk_server), base_dir=base, size=size,
                                         properties=properties)
            clusters[key] = cluster.start()
        return clusters[key]

    yield get
    for cluster in clusters.values():
        cluster.stop()
        delete_chroot(kafka_zk_server, cluster.brokers[0].chroot)


@pytest.fixture
def kafka_version(request: pytest.FixtureRequest) -> str:
    """The version of the test's ``apache_kafka(version)`` marker (set directly or by :func:`kafka_matrix`)."""
    marker = request.node.get_closest_marker("apache_kafka")
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{request.node.nodeid}: needs @pytest.mark.apache_kafka(version) or kafka_matrix")
    return catalogue_entry(str(marker.args[0])).version


_used_brokers = pytest.StashKey[list[ApacheKafkaBroker]]()


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest, kafka_version: str,
                 apache_kafka: Callable[..., ApacheKafkaBroker]) -> ApacheKafkaBroker:
    """The module's shared single broker of the test's version (see :func:`kafka_version`)."""
    broker = apache_kafka(kafka_version)
    request.node.stash.setdefault(_used_brokers, []).append(broker)
    return broker


@pytest.fixture
def kafka_zk_layout(kafka_broker: ApacheKafkaBroker) -> Iterator[ZkLayout]:
    """A :class:`ZkLayout` on the ZooKeeper chroot of the test's ``kafka_broker`` (its own session)."""
    zk = connect_zk(kafka_broker.zk_connect, session_timeout_ms=10000, connection_timeout_ms=15000)
    try:
        yield ZkLayout(zk)
    finally:
        close_zk(zk)


@pytest.fixture
def kafka_cluster(request: pytest.FixtureRequest, kafka_version: str,
                  apache_kafka_cluster: Callable[..., ApacheKafkaCluster]) -> ApacheKafkaCluster:
    """The module's shared 3-broker cluster of the test's version."""
    cluster = apache_kafka_cluster(kafka_version)
    request.node.stash.setdefault(_used_brokers, []).extend(cluster.brokers)
    return cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test's report carries the state and log tails of the Kafka brokers it used (pytest's tmp
    directories of a shared machine are soon deleted by other runs)."""
    report: pytest.TestReport = yield
    if report.failed:
        for broker in item.stash.get(_used_brokers, []):
            code = broker.proc.poll() if broker.proc else None
            state = "running" if broker.proc and code is None else f"exited with {code}"
            report.sections.append((f"Kafka {broker.version} broker {broker.broker_id} ({state}) server.log tail",
                                    broker.log_tail(60)))
            report.sections.append((f"Kafka {broker.version} broker {broker.broker_id} JVM output tail",
                                    _tail(broker.stdout_path, 30)))
    return report


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
