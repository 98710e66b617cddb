"""Kafka's own Java classes and command-line tools run from a catalogued version's jars (``java -cp "<jars>/*"
<class>``, never Kafka's shell scripts, whose JVM flags break on Java 17), with the tool classes that moved between
releases looked up by their script's name.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metaq.childproc import die_with_parent
from metaq.testing.kafka_versions import (
    catalogue_entry,
)
from metaq.testing.maven import PeerUnavailableError, cache_root, classpath

JVM_OPTIONS = (
    "-Xmx256m", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
    # pre-1.0 brokers unmap index files through sun.nio.ch.DirectBuffer; harmless for the others
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)
"""Small heap, quick start (C1 only): test brokers hold little data and start often."""
TOOL_TIMEOUT_S = 180.0


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
