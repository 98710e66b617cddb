"""Kafka's own Java clients and command-line tools as test peers of the metaq broker.

Each :class:`JavaPeer` is a named set of Maven artifacts resolved by :mod:`metaq.testing.maven` into a cache of
jars outside the repository. A peer runs either a tool's main class (``kafka.admin.TopicCommand``) or a
single-file Java program from ``integration_tests/java/`` through Java's source launcher (JEP 330:
``java -cp "DIR/*" Prog.java ARGS``, no build step), always with a bounded timeout, and the run comes back as a
:class:`JavaRun` (stdout, stderr, return code) for the test to check::

    run = run_program(CLIENTS_3_9, JAVA_PROGRAMS / "JavaProducer.java", [bootstrap, "t", "10"])
    acked = run.check().json_lines()

``make test`` fetches every peer first (``python -m metaq.testing.java_peers fetch``) so that a Maven failure
is reported once, loudly, before any test runs.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaq.errors import MetaqError
from metaq.testing.maven import MavenArtifact, PeerUnavailableError, classpath, resolve

log = logging.getLogger(__name__)

__all__ = [
    "ALL_PEERS", "CLIENTS_3_9", "CLIENTS_4", "CONNECT_3_9", "JAVA_PROGRAMS", "SPARK_KAFKA", "STREAMS_3_9", "TOOLS_2_8",
    "TOOLS_3_9",
    "JavaPeer", "JavaRun", "JavaRunError", "run_class", "run_program", "spark_kafka_jars",
]

JAVA = os.environ.get("METAQ_JAVA", "java")
# The single-file programs the integration tests run (source only: the launcher compiles them in memory).
JAVA_PROGRAMS = Path(__file__).resolve().parents[2] / "integration_tests" / "java"
DEFAULT_TIMEOUT_S = 120.0
# Quiet JVM start-up for a small heap on a shared 2-core machine; tools log WARN and above to stderr.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err")


@dataclass(frozen=True)
class JavaPeer:
    """A set of jars run as one peer; ``label`` is its column in docs/compatibility.md."""

    name: str  # the cache key: the same name always means the same artifacts
    label: str
    artifacts: tuple[MavenArtifact, ...]

    def directory(self) -> Path:
        """The resolved jars (resolved on first use; :class:`PeerUnavailableError` with Maven's output)."""
        return resolve(self.name, self.artifacts)


def _kafka(artifact: str, version: str) -> MavenArtifact:
    return MavenArtifact("org.apache.kafka", artifact, version)


# slf4j-simple binds the slf4j-api 1.7.36 every peer below depends on, so their warnings reach stderr
SLF4J_SIMPLE = MavenArtifact("org.slf4j", "slf4j-simple", "1.7.36")
CLIENTS_3_9 = JavaPeer("java-clients-3.9.1", "Java kafka-clients 3.9.1",
                       (_kafka("kafka-clients", "3.9.1"), SLF4J_SIMPLE))
# the newest 4.x on Maven Central here (maven-partial list: 4.0.0 .. 4.4.0)
CLIENTS_4 = JavaPeer("java-clients-4.4.0", "Java kafka-clients 4.4.0",
                     (_kafka("kafka-clients", "4.4.0"), SLF4J_SIMPLE))
# The 3.9 tools: kafka.admin.{TopicCommand,ConfigCommand,AclCommand} live in the core jar, the tools moved out of
# core since 3.5 (ConsoleConsumer, ConsumerGroupCommand, GetOffsetShell, ...) in kafka-tools.
# (slf4j-reload4j left out: one slf4j binding, slf4j-simple, as for the other peers).
TOOLS_3_9 = JavaPeer("java-tools-3.9.1", "Kafka tools 3.9.1", (
    MavenArtifact("org.apache.kafka", "kafka_2.13", "3.9.1", exclusions=("org.slf4j:slf4j-reload4j",)),
    MavenArtifact("org.apache.kafka", "kafka-tools", "3.9.1", exclusions=("org.slf4j:slf4j-reload4j",)),
    SLF4J_SIMPLE))
# 2.8 is the last line whose TopicCommand and ConfigCommand still write to ZooKeeper (--zookeeper).
TOOLS_2_8 = JavaPeer("java-tools-2.8.2", "Kafka tools 2.8.2", (_kafka("kafka_2.13", "2.8.2"), SLF4J_SIMPLE))
# Spark's own Kafka source for the installed PySpark 4.3.0: spark-sql-kafka-0-10_2.13:4.3.0 is not on Maven Central
# (mvn: "Could not find artifact org.apache.spark:spark-sql-kafka-0-10_2.13:jar:4.3.0 in central"), so the newest
# published line, 4.2.0, is what Spark users can put on a 4.3 session; it runs there (test_spark_kafka_source.py).
SPARK_KAFKA = JavaPeer("spark-sql-kafka-4.2.0", "Spark spark-sql-kafka-0-10 4.2.0 (PySpark 4.3.0)", (
    MavenArtifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0"),))
# the jars of SPARK_KAFKA that PySpark does not ship itself (Scala, Hadoop, compression come from PySpark)
SPARK_KAFKA_JAR_PREFIXES = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-",
                            "commons-pool2-")
# A Kafka Connect distributed worker with the file connectors (its own log4j binding, as Kafka ships it).
CONNECT_3_9 = JavaPeer("kafka-connect-3.9.2", "Kafka Connect 3.9.2", (
    _kafka("connect-runtime", "3.9.2"), _kafka("connect-file", "3.9.2"),
    MavenArtifact("org.slf4j", "slf4j-reload4j", "1.7.36")))
# Kafka Streams (RocksDB state stores, exactly_once_v2) for the single-file programs in integration_tests/java/.
STREAMS_3_9 = JavaPeer("kafka-streams-3.9.1", "Kafka Streams 3.9.1", (_kafka("kafka-streams", "3.9.1"), SLF4J_SIMPLE))
ALL_PEERS = (CLIENTS_3_9, CLIENTS_4, TOOLS_3_9, TOOLS_2_8, SPARK_KAFKA, CONNECT_3_9, STREAMS_3_9)


class JavaRunError(MetaqError):
    """A Java peer exited non-zero or ran out of time; the message carries its output."""


@dataclass(frozen=True)
class JavaRun:
    """What one JVM run printed and how it ended (``returncode`` None: killed at the timeout)."""

    command: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    environment: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> JavaRun:
        """This run, if it exited 0; else :class:`JavaRunError` with the tail of what it printed."""
        if self.returncode != 0:
            raise JavaRunError(f"{self.describe()} exited {self.returncode}:\n{self.tail()}")
        return self

    def json_lines(self) -> list[dict[str, Any]]:
        """Every stdout line that is a JSON object (the programs' output format; other lines are ignored)."""
        rows = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
        return rows

    def describe(self) -> str:
        main = next((arg for arg in self.command if arg.endswith(".java") or arg[:1].islower() and "." in arg
                     and not arg.startswith("-")), self.command[-1])
        return f"java {main}"

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])


def run_class(peer: JavaPeer, main_class: str, args: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S,
              stdin: str | None = None, jvm_options: Sequence[str] = ()) -> JavaRun:
    """Run ``main_class`` of ``peer`` (e.g. ``kafka.admin.TopicCommand``) with ``args``."""
    return _run(peer, [main_class, *args], timeout, stdin, jvm_options)


def run_program(peer: JavaPeer, source: Path, args: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S,
                stdin: str | None = None, jvm_options: Sequence[str] = ()) -> JavaRun:
    """Run the single-file program ``source`` against ``peer``'s jars with Java's source launcher."""
    return _run(peer, [str(source), *args], timeout, stdin, jvm_options)


def _run(peer: JavaPeer, main: Sequence[str], timeout: float, stdin: str | None,
         jvm_options: Sequence[str]) -> JavaRun:
    command = (JAVA, *JVM_OPTIONS, *jvm_options, "-cp", classpath(peer.directory()), *main)
    log.info("running %s", " ".join(command))
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return JavaRun(command, None, _text(e.stdout), _text(e.stderr) + f"\n(killed after {timeout:.0f} s)")
    return JavaRun(command, done.returncode, done.stdout, done.stderr)


def _text(output: bytes | str | None) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def spark_kafka_jars() -> list[Path]:
    """The jars to pass as ``spark.jars`` for Spark's ``kafka`` source (resolved on first use)."""
    directory = SPARK_KAFKA.directory()
    jars = sorted(j for j in directory.glob("*.jar") if j.name.startswith(SPARK_KAFKA_JAR_PREFIXES))
    if len(jars) != len(SPARK_KAFKA_JAR_PREFIXES):
        raise PeerUnavailableError(f"{SPARK_KAFKA.label}: expected one jar per {SPARK_KAFKA_JAR_PREFIXES} in "
                                   f"{directory}, found {[j.name for j in jars]}")
    return jars


def fetch(peers: Sequence[JavaPeer] = ALL_PEERS) -> dict[str, Path]:
    """Resolve every peer (the test command runs this first); :class:`PeerUnavailableError` on the first failure."""
    return {peer.name: peer.directory() for peer in peers}


def main(argv: Sequence[str]) -> int:
    """``fetch``: resolve every peer, printing where each is; exit 1 with Maven's own error if one cannot be."""
    if list(argv) != ["fetch"]:
        print("usage: python -m metaq.testing.java_peers fetch", file=sys.stderr)
        return 2
    failed = []
    for peer in ALL_PEERS:
        try:
            print(f"{peer.label}: {peer.directory()}", flush=True)
        except PeerUnavailableError as e:
            print(f"{peer.label}: {e}", file=sys.stderr)
            failed.append(peer.label)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
