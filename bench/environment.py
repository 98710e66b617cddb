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

from kazoo.client import KazooClient

from metaq.broker.process import BrokerProcess
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout


class BenchZooKeeper(ZooKeeperServer):
    """The embedded ZooKeeper with a short tick (sessions expire within 200 ms of their timeout instead of
    within 2 s) and a session timeout range that still admits Kafka's default of 6 s."""

    def _config_lines(self) -> list[str]:
        return [*super()._config_lines(), "maxSessionTimeout=60000"]


def bench_zookeeper(data_dir: Path) -> ZooKeeperServer:
    return BenchZooKeeper(data_dir=data_dir, force_sync=False, tick_time_ms=200)


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
