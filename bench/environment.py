"""The environment every benchmark section shares: one embedded ZooKeeper (or ``$ZOOKEEPER_CONNECT``),
one broker process and a ZooKeeper client, in a temporary work directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from metaq.broker.process import BrokerProcess
from metaq.zkclient import connect
from zk_layout import ZkLayout


@dataclass
class Environment:
    """One embedded ZooKeeper, one broker process and a ZooKeeper client, shared by every section."""

    zk: str
    client: KazooClient
    layout: ZkLayout
    broker: BrokerProcess
    work_dir: Path

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@contextlib.contextmanager
def environment(configure: Callable[[str, BrokerProcess, Path], None] | None = None) -> Iterator[Environment]:
    """``configure(zk_connect, broker, work_dir)`` runs before the broker starts (listeners, users...)."""
    work = Path(tempfile.mkdtemp(prefix="metaq-bench-"))
    external = os.environ.get("ZOOKEEPER_CONNECT")
    from bench.rebalance import bench_zookeeper  # here: bench.rebalance itself uses this module

    zk_server = None if external else bench_zookeeper(work / "zk").start()
    zk = f"{external or zk_server.connect_string}/metaq-bench-{os.getpid()}"  # type: ignore[union-attr]
    client = connect(zk)
    broker = BrokerProcess(zk, 0, work, log_level="WARNING")
    if configure is not None:
        configure(zk, broker, work)
    broker.start()
    try:
        yield Environment(zk, client, ZkLayout(client), broker, work)
    finally:
        broker.stop()
        client.stop()
        client.close()
        if zk_server:
            zk_server.stop()
        shutil.rmtree(work, ignore_errors=True)


def produce_round_robin(config: dict[str, Any], topic: str, partitions: int, messages: int, value: bytes) -> None:
    """``messages`` copies of ``value``, round-robin over the partitions, with a confluent-kafka producer of
    ``config`` (waiting out a full local queue); raises if not every message was acknowledged."""
    import confluent_kafka

    producer = confluent_kafka.Producer(config)
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError(f"producing to {topic}: not every message was acknowledged")
