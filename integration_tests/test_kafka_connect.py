"""A Kafka Connect 3.9 distributed worker (connect-runtime from Maven Central, one JVM) on a metaq broker: it creates
its config/offset/status topics compacted (and refuses to start unless they are compact-only, KAFKA-9216), runs a
FileStreamSource -> topic -> FileStreamSink pipeline, and after a restart keeps its connectors and source offsets
(docs/compaction.md)."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metaq.broker.process import BrokerProcess
from metaq.testing.java_peers import CONNECT_3_9
from metaq.testing.maven import classpath
from metaq.testing.wait import wait_until
from zk_layout import split_connect

CONNECT = "3.9.2"
TIMEOUT = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect_jars() -> Path:
    return CONNECT_3_9.directory()  # fetched by the test command beforehand


@pytest.fixture(scope="module")
def metaq_broker(zk_server, tmp_path_factory) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    hosts, base = split_connect(zk_server.connect_string)
    broker = BrokerProcess(f"{hosts}{base}/metaq-connect-{uuid.uuid4().hex}", 0, tmp_path_factory.mktemp("connect"),
                           properties={"offsets.topic.replication.factor": 1, "log.cleaner.backoff.ms": 500}).start()
    try:
        yield broker
    finally:
        broker.stop()


class Worker:
    """One ConnectDistributed JVM and its REST API."""

    def __init__(self, jars: Path, directory: Path, bootstrap: str) -> None:
        self.port = _free_port()
        self.directory = directory
        self.log_path = directory / "connect.log"
        log4j = directory / "log4j.properties"
        log4j.write_text("log4j.rootLogger=INFO, file\nlog4j.appender.file=org.apache.log4j.FileAppender\n"
                         f"log4j.appender.file.File={self.log_path}\n"
                         "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
                         "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n")
        properties = {"bootstrap.servers": bootstrap, "group.id": "connect-metaq",
                      "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                      "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                      "config.storage.topic": "connect-configs", "offset.storage.topic": "connect-offsets",
                      "status.storage.topic": "connect-status", "config.storage.replication.factor": "1",
                      "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
                      "offset.storage.partitions": "2", "status.storage.partitions": "2",
                      "offset.flush.interval.ms": "500", "listeners": f"http://127.0.0.1:{self.port}"}
        self.config = directory / "worker.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        self.command = ["java", f"-Dlog4j.configuration=file:{log4j}", "-Xmx256m", "-cp", classpath(jars),
                        "org.apache.kafka.connect.cli.ConnectDistributed", str(self.config)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until(self._serving, TIMEOUT, lambda: f"Connect worker on port {self.port}:\n{self.log_tail()}",
                   interval=0.5)
        return self

    def _serving(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"Connect worker exited with {self.proc.returncode}:\n{self.log_tail()}"
        try:
            return isinstance(self.rest("GET", "/connectors"), list)
        except OSError:
            return False

    def rest(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(30).items()}


def test_distributed_worker_pipeline_survives_a_restart(metaq_broker: BrokerProcess, connect_jars: Path,
                                                        tmp_path: Path) -> None:
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(f"line-{i}\n" for i in range(10)))
    worker = Worker(connect_jars, tmp_path, metaq_broker.bootstrap).start()
    try:
        for topic in ("connect-configs", "connect-offsets", "connect-status"):
            assert _topic_configs(metaq_broker.bootstrap, topic)["cleanup.policy"] == "compact"
        worker.rest("POST", "/connectors", {"name": "file-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(source), "topic": "lines"}})
        worker.rest("POST", "/connectors", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "file": str(sink), "topics": "lines"}})
        wait_until(lambda: sink.exists() and len(sink.read_text().splitlines()) == 10, TIMEOUT,
                   lambda: f"10 lines copied:\n{worker.log_tail()}", interval=0.5)
        worker.stop()
        with source.open("a") as f:
            f.write("after-restart\n")
        worker = Worker(connect_jars, tmp_path, metaq_broker.bootstrap).start()
        assert sorted(worker.rest("GET", "/connectors")) == ["file-sink", "file-source"]
        expected = [f"line-{i}" for i in range(10)] + ["after-restart"]
        wait_until(lambda: sink.read_text().splitlines() == expected, TIMEOUT,
                   lambda: f"the new line copied once, nothing re-sent:\n{worker.log_tail()}", interval=0.5)
    finally:
        worker.stop()
