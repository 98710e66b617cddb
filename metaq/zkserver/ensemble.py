"""A ZooKeeper ensemble of child JVMs on loopback, for failover tests.

Usage::

    with ZooKeeperEnsemble(size=3) as ensemble:
        client = KazooClient(ensemble.connect_string)  # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        ensemble.kill_node(ensemble.leader_index())     # writes work again once the others elect a leader
        ensemble.start_node(0)

Nodes are indexed from 0; node ``i`` has ``myid`` ``i + 1``. Each node is a :class:`ZooKeeperServer` (so
``ensemble.nodes[i].pause()`` works) running ``QuorumPeerMain`` with its own data directory.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from metaq.errors import ZooKeeperServerError
from metaq.zkserver.distribution import ZooKeeperDistribution, find_distribution
from metaq.zkserver.probe import free_ports
from metaq.zkserver.server import DEFAULT_JVM_OPTIONS, ZooKeeperServer, stop_all

log = logging.getLogger(__name__)


class _QuorumPeer(ZooKeeperServer):
    """One ensemble member: ``QuorumPeerMain`` with ``myid`` and the ``server.N`` lines of all members."""

    MAIN_CLASS: ClassVar[str] = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

    def __init__(self, myid: int, peers: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.myid = myid
        self.peers = peers  # shared with the ensemble: "server.N=host:quorum:election" lines

    def _config_lines(self) -> list[str]:
        return [*super()._config_lines(), "initLimit=10", "syncLimit=5", *self.peers]

    def _prepare_data_dir(self) -> None:
        super()._prepare_data_dir()
        (self.data_dir / "myid").write_text(f"{self.myid}\n", encoding="ascii")


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers forming one ensemble on 127.0.0.1 with free ports.

    Keyword arguments match :class:`ZooKeeperServer`. ``base_dir=None`` uses a temporary directory (removed by
    :meth:`stop`) holding ``zk<myid>/`` per node.
    """

    def __init__(
        self,
        size: int = 3,
        tick_time_ms: int = 500,
        *,
        force_sync: bool = False,
        host: str = "127.0.0.1",
        heap_mb: int = 256,
        base_dir: Path | None = None,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        distribution: ZooKeeperDistribution | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"ensemble size must be >= 1, got {size}")
        self._lock = threading.RLock()
        self._own_base = base_dir is None
        self._base = Path(base_dir).absolute() if base_dir else Path(tempfile.mkdtemp(prefix="metaq-zk-ens-"))
        self._host = host
        self._distribution = distribution
        ports = free_ports(3 * size, host)
        peers = [f"server.{i + 1}={host}:{ports[size + i]}:{ports[2 * size + i]}" for i in range(size)]
        self.nodes: list[ZooKeeperServer] = [
            _QuorumPeer(
                i + 1,
                peers,
                port=ports[i],
                data_dir=self._base / f"zk{i + 1}",
                log_path=self._base / f"zk{i + 1}.log",
                tick_time_ms=tick_time_ms,
                force_sync=force_sync,
                host=host,
                heap_mb=heap_mb,
                jvm_options=jvm_options,
                distribution=distribution,
            )
            for i in range(size)
        ]

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def connect_string(self) -> str:
        return ",".join(node.connect_string for node in self.nodes)

    @property
    def base_dir(self) -> Path:
        return self._base

    def start(self, timeout: float = 90) -> Self:
        """Start every node that is not running, then wait until all of them serve (a quorum has formed)."""
        with self._lock:
            self._resolve_distribution()
            deadline = time.monotonic() + timeout
            try:
                for node in self.nodes:
                    node.spawn()
                for node in self.nodes:
                    node.wait_ready(max(0.1, deadline - time.monotonic()))
            except ZooKeeperServerError:
                self.stop()  # no half-started ensemble, no leftover directories
                raise
            log.info("ZooKeeper ensemble serving on %s", self.connect_string)
            return self

    def stop(self, timeout: float = 10) -> None:
        """Stop every node; remove the temporary base directory."""
        with self._lock:
            try:
                stop_all(self.nodes, timeout)
            finally:
                if self._own_base:
                    shutil.rmtree(self._base, ignore_errors=True)

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index`` (0-based); its data stays for :meth:`start_node`."""
        self.nodes[index].kill()

    def start_node(self, index: int, timeout: float = 60) -> None:
        """Start node ``index`` again and wait until it serves (it rejoins as a follower, or leads)."""
        self.nodes[index].start(timeout)

    def leader_index(self) -> int | None:
        """Index of the node whose ``srvr`` says ``Mode: leader``, or None."""
        for index, node in enumerate(self.nodes):
            if node.running and node.mode() == "leader":
                return index
        return None

    def modes(self) -> list[str | None]:
        return [node.mode() if node.running else None for node in self.nodes]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.connect_string} modes={self.modes()}>"

    def _resolve_distribution(self) -> None:
        """Search once for all nodes (and fail once, with one message)."""
        if self._distribution is None:
            self._distribution = find_distribution()
            for node in self.nodes:
                node._distribution = self._distribution
