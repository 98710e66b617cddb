"""A broker running as a child process, for the demo, tests and benchmarks.

    with BrokerProcess(zk_connect="127.0.0.1:2181", broker_id=0, data_dir=tmp) as broker:
        print(broker.bootstrap)       # "127.0.0.1:PORT"
        broker.kill(); broker.start() # crash and restart on the same port and data

The port is chosen once, so a restarted broker comes back where clients expect it.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from metaq.childproc import die_with_parent, stop_process
from metaq.config import Properties
from metaq.errors import MetaqError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """A metaq broker run as a child process (tests, bench, demo): owns the process, its properties file in
    ``data_dir``, its log file and its port; started again after stop (SIGTERM), kill (SIGKILL) or pause
    (SIGSTOP), it runs on the same data."""

    def __init__(
        self,
        zk_connect: str,
        broker_id: int,
        data_dir: Path,
        *,
        port: int | None = None,
        properties: Properties | None = None,
        log_level: str = "INFO",
        nofile_limit: int | None = None,
    ) -> None:
        """``nofile_limit``: the broker's soft RLIMIT_NOFILE (``ulimit -n``), to test it under a low one."""
        self.zk_connect = zk_connect
        self.broker_id = broker_id
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.properties = dict(properties or {})
        self.log_level = log_level
        self.nofile_limit = nofile_limit
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_path = self.data_dir / f"broker-{broker_id}.properties"
        self.log_path = self.data_dir / f"broker-{broker_id}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _write_config(self) -> None:
        props: dict[str, object] = {  # written with str()
            "broker.id": self.broker_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir / f"logs-{self.broker_id}"),
            "zookeeper.connect": self.zk_connect,
            "zookeeper.session.timeout.ms": 6000,
        }
        props.update(self.properties)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self, timeout: float = 30.0) -> Self:
        """Start and wait until the broker accepts connections (it registers in ZooKeeper first)."""
        self._write_config()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "metaq", "--log-level", self.log_level, "broker", "start",
                 "--config", str(self.config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=self._preexec(),
            )
        try:
            self._wait_ready(timeout)
        except MetaqError:
            self.kill()  # not left running behind a failed start
            raise
        return self

    def _preexec(self) -> Callable[[], None] | None:
        base = die_with_parent()
        limit = self.nofile_limit
        if limit is None:
            return base
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # resolved here: the child only sets it

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            if base is not None:
                base()

        return preexec

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise MetaqError(f"broker {self.broker_id} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise MetaqError(f"broker {self.broker_id} not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 15.0) -> int | None:
        """Clean shutdown (SIGTERM)."""
        return stop_process(self.proc, timeout) if self.proc else None

    def kill(self) -> None:
        """Crash (SIGKILL): no flush, no clean-shutdown marker."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def pause(self) -> None:
        if self.proc:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc:
            os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
