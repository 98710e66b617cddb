"""A real Prometheus server (Debian's ``prometheus`` package) as a child process, for metrics tests.

    with PrometheusServer(tmp_path, targets=["127.0.0.1:9404"]) as prom:
        prom.wait_for_targets_up()
        value = prom.query_value('metaq_consumer_max_lag{group="g"}')

It listens on loopback only, scrapes every target each second, and keeps its data in the given directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from metaq.broker.process import free_port
from metaq.childproc import die_with_parent, stop_process
from metaq.errors import MetaqError
from metaq.testing.wait import wait_until

SCRAPE_INTERVAL_S = 1


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


class PrometheusServer:
    def __init__(self, work_dir: Path, targets: list[str]) -> None:
        self.work_dir = Path(work_dir)
        self.targets = targets
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.work_dir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> Self:
        binary = prometheus_binary()
        if binary is None:
            raise MetaqError("prometheus not found on PATH (Debian package 'prometheus'; `make install` adds it)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "prometheus.yml"
        targets = ", ".join(json.dumps(t) for t in self.targets)
        config.write_text(f"global:\n  scrape_interval: {SCRAPE_INTERVAL_S}s\n  evaluation_interval: 1s\n"
                          f"scrape_configs:\n  - job_name: metaq\n    static_configs:\n      - targets: [{targets}]\n")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={self.work_dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())
        self._wait(lambda: self._get("/-/ready") is not None, timeout, "Prometheus to be ready")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 15)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``[{"metric": {...}, "value": [ts, "v"]}, ...]``)."""
        body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if body is None:
            raise MetaqError(f"Prometheus did not answer {promql!r}")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise MetaqError(f"Prometheus query {promql!r} failed: {answer}")
        return list(answer["data"]["result"])

    def query_value(self, promql: str) -> float | None:
        """The single value of an instant query, or None when the result is empty."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) > 1:
            raise MetaqError(f"{promql!r} returned {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def wait_for_targets_up(self, timeout: float = 60) -> None:
        def all_up() -> bool:
            body = self._get("/api/v1/targets")
            targets = json.loads(body)["data"]["activeTargets"] if body else []
            return len(targets) == len(self.targets) and all(t["health"] == "up" for t in targets)
        self._wait(all_up, timeout, f"every target of {self.targets} to be up")

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return bytes(response.read())
        except OSError:
            return None

    def _wait(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise MetaqError(f"prometheus exited with {self.proc.returncode}; log {self.log_path}")
            return bool(predicate())

        try:
            wait_until(ready, timeout, what, interval=0.2)
        except AssertionError as e:
            raise MetaqError(f"{e}; log {self.log_path}") from e

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
