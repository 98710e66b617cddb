"""Section 1 of ``python -m bench``: produce and fetch throughput of confluent-kafka, kcat and metaq.Producer on
the shared broker, and the broker's CPU with metrics on and off. :class:`Bench` (one-partition topics, a job
measured in wall time and CPU) and :class:`Row` are what the producer and transactions sections measure with too.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from bench.clients import KCAT, confluent_consume, confluent_produce, kcat_consume, kcat_produce, metaq_produce
from bench.environment import Environment
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout


@dataclass
class Row:
    client: str
    job: str
    size: int
    messages: int
    seconds: float
    broker_cpu: float
    client_cpu: float = 0.0  # this process (confluent-kafka, metaq) and the clients it ran and waited for (kcat)

    def cells(self) -> list[str]:
        rate = self.messages / self.seconds
        mb = rate * self.size / 1e6
        cpu_per_m = self.broker_cpu / self.messages * 1e6
        return [self.client, self.job, str(self.size), f"{self.messages:,}", f"{rate:,.0f}", f"{mb:,.1f}",
                f"{cpu_per_m:.2f}", f"{self.client_cpu / self.messages * 1e6:.2f}"]


class Bench:
    def __init__(self, broker: BrokerProcess, layout: ZkLayout, prefix: str = "bench") -> None:
        self.broker = broker
        self.layout = layout
        self.proc = psutil.Process(broker.pid)
        self.rows: list[Row] = []
        self._prefix = prefix
        self._topics = 0

    def topic(self) -> str:
        """A new one-partition topic led by this bench's broker."""
        self._topics += 1
        name = f"{self._prefix}-{self._topics}"
        create_topic(self.layout, name, 1, assignment={0: [self.broker.broker_id]})
        wait_until(lambda: len(topic_leaders(self.broker.bootstrap, name)) == 1, 10, f"topic {name}")
        return name

    def measure(self, client: str, job: str, size: int, n: int, fn: Callable[..., None], *args: object) -> None:
        cpu0 = sum(self.proc.cpu_times()[:2])
        client0 = _client_cpu()
        t0 = time.perf_counter()
        fn(*args)
        seconds = time.perf_counter() - t0
        cpu = sum(self.proc.cpu_times()[:2]) - cpu0
        self.rows.append(Row(client, job, size, n, seconds, cpu, _client_cpu() - client0))
        print("  " + " | ".join(self.rows[-1].cells()), flush=True)


def _client_cpu() -> float:
    """CPU seconds of this process and of its finished children (kcat): steadier than wall time on a busy
    machine. This process also runs the ZooKeeper client's threads, idle during a job."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def run_broker(env: Environment, messages: int, sizes: list[int]) -> list[Row]:
    """Section 1: produce and fetch throughput on the shared broker."""
    bench = Bench(env.broker, env.layout)
    print("  client | job | value bytes | messages | msgs/s | MB/s | broker CPU s / 1M msgs | client CPU s / 1M msgs",
          flush=True)
    for size in sizes:
        n = messages if size <= 100 else max(messages // 4, 1000)
        value = b"x" * size
        lines = env.work_dir / f"values-{size}.txt"
        lines.write_bytes((b"y" * size + b"\n") * n)
        t = bench.topic()
        bench.measure("confluent-kafka", "produce", size, n, confluent_produce, env.bootstrap, t, value, n)
        bench.measure("confluent-kafka", "fetch", size, n, confluent_consume, env.bootstrap, t, n)
        t = bench.topic()  # the broker decompresses every compressed batch to validate it
        bench.measure("confluent-kafka", "produce gzip", size, n, confluent_produce, env.bootstrap, t, value, n, "gzip")
        if KCAT:
            t = bench.topic()
            bench.measure("kcat", "produce", size, n, kcat_produce, env.bootstrap, t, value, n, lines)
            bench.measure("kcat", "fetch", size, n, kcat_consume, env.bootstrap, t, n)
        t = bench.topic()
        bench.measure("metaq.Producer", "produce", size, n, metaq_produce, env.zk, t, value, n)
        lines.unlink()
    return bench.rows


def broker_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    header = ["client", "job", "value B", "messages", "msgs/s", "MB/s", "broker CPU s/1M", "client CPU s/1M"]
    return header, [r.cells() for r in rows]


def _per_m(cpu: float, row: Row) -> str:
    return f"{cpu / row.messages * 1e6:.2f}"


METRICS_MESSAGES = 500_000
"""At least this many per run: the broker's CPU clock ticks in 10 ms, a small run would measure only that."""


def run_broker_metrics(env: Environment, messages: int, repeat: int) -> list[Row]:
    """The shared broker (metrics on) and a second one with metrics.enabled=false, alternated ``repeat`` times:
    confluent-kafka 100-byte produce and fetch, the broker's CPU per 1M messages (metrics off first in odd rounds)."""
    quiet = BrokerProcess(env.zk, 1, env.work_dir, log_level="WARNING",
                          properties={"metrics.enabled": "false"}).start()
    try:
        benches = [(Bench(env.broker, env.layout, "metrics-on"), "metrics on"),
                   (Bench(quiet, env.layout, "metrics-off"), "metrics off")]
        value = b"x" * 100
        for rep in range(repeat):
            for bench, label in benches[::-1] if rep % 2 else benches:
                t = bench.topic()
                bench.measure(label, "produce", 100, messages, confluent_produce, bench.broker.bootstrap, t, value,
                              messages)
                bench.measure(label, "fetch", 100, messages, confluent_consume, bench.broker.bootstrap, t, messages)
        return [row for bench, _ in benches for row in bench.rows]
    finally:
        quiet.stop()


def broker_metrics_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Best (lowest) broker CPU per job, metrics on and off side by side."""
    def cpu(client: str, job: str) -> float:
        return min(r.broker_cpu / r.messages * 1e6 for r in rows if r.client == client and r.job == job)

    header = ["job (confluent-kafka, 100 B)", "broker CPU s/1M on", "broker CPU s/1M off", "CPU cost"]
    return header, [[job, f"{cpu('metrics on', job):.2f}", f"{cpu('metrics off', job):.2f}",
                     f"{cpu('metrics on', job) / cpu('metrics off', job) - 1:+.1%}"] for job in ("produce", "fetch")]
