"""Broker throughput: produce and fetch with confluent-kafka, kcat and metaq's Producer on one broker.

    python -m bench [--messages 300000] [--sizes 100,1024]

Each row: one client doing one job against the same broker process in the same run. Columns: msgs/s,
MB/s (values only) and the broker's CPU seconds per million messages (user+system of the broker
process during that job, scaled).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import psutil

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import topic_leaders, wait_until
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout

KCAT = shutil.which("kcat")


@dataclass
class Row:
    client: str
    job: str
    size: int
    messages: int
    seconds: float
    broker_cpu: float

    def cells(self) -> list[str]:
        rate = self.messages / self.seconds
        mb = rate * self.size / 1e6
        cpu_per_m = self.broker_cpu / self.messages * 1e6
        return [self.client, self.job, str(self.size), f"{self.messages:,}", f"{rate:,.0f}", f"{mb:,.1f}",
                f"{cpu_per_m:.2f}"]


class Bench:
    def __init__(self, broker: BrokerProcess, layout: ZkLayout) -> None:
        self.broker = broker
        self.layout = layout
        self.proc = psutil.Process(broker.pid)
        self.rows: list[Row] = []
        self._topics = 0

    def topic(self) -> str:
        self._topics += 1
        name = f"bench-{self._topics}"
        create_topic(self.layout, name, 1)
        wait_until(lambda: len(topic_leaders(self.broker.bootstrap, name)) == 1, 10, f"topic {name}")
        return name

    def measure(self, client: str, job: str, size: int, n: int, fn: Callable[..., None], *args: object) -> None:
        cpu0 = sum(self.proc.cpu_times()[:2])
        t0 = time.perf_counter()
        fn(*args)
        seconds = time.perf_counter() - t0
        cpu = sum(self.proc.cpu_times()[:2]) - cpu0
        self.rows.append(Row(client, job, size, n, seconds, cpu))
        print("  " + " | ".join(self.rows[-1].cells()), flush=True)


def confluent_produce(bootstrap: str, topic: str, value: bytes, n: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1000000,
                                  "queue.buffering.max.messages": 2000000, "acks": 1})
    for _ in range(n):
        try:
            p.produce(topic, value, partition=0)
        except BufferError:
            p.poll(0.01)
            p.produce(topic, value, partition=0)
    assert p.flush(60) == 0


def confluent_consume(bootstrap: str, topic: str, n: int) -> None:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                  "fetch.queue.backoff.ms": 10})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    while got < n:
        got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    c.close()


def kcat_produce(bootstrap: str, topic: str, value: bytes, n: int, path: Path) -> None:
    subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-X", "linger.ms=5", "-l", str(path)],
                   check=True, timeout=300)


def kcat_consume(bootstrap: str, topic: str, n: int) -> None:
    subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(n), "-q",
                    "-f", "%s\n"],
                   check=True, timeout=300, stdout=subprocess.DEVNULL)


def metaq_produce(zk: str, topic: str, value: bytes, n: int) -> None:
    from metaq import Producer

    with Producer({"zookeeper.connect": zk, "linger.ms": 5}) as producer:
        for _ in range(n):
            producer.send(topic, value, partition=0)
        producer.flush()


def run(messages: int, sizes: list[int]) -> list[Row]:
    work = Path(tempfile.mkdtemp(prefix="metaq-bench-"))
    external = os.environ.get("ZOOKEEPER_CONNECT")
    zk_server = None if external else ZooKeeperServer(data_dir=work / "zk", force_sync=False).start()
    zk = f"{external or zk_server.connect_string}/metaq-bench-{os.getpid()}"  # type: ignore[union-attr]
    client = connect(zk)
    broker = BrokerProcess(zk, 0, work, log_level="WARNING").start()
    try:
        bench = Bench(broker, ZkLayout(client))
        print("  client | job | value bytes | messages | msgs/s | MB/s | broker CPU s / 1M msgs", flush=True)
        for size in sizes:
            n = messages if size <= 100 else max(messages // 4, 1000)
            value = b"x" * size
            lines = work / f"values-{size}.txt"
            lines.write_bytes((b"y" * size + b"\n") * n)
            t = bench.topic()
            bench.measure("confluent-kafka", "produce", size, n, confluent_produce, broker.bootstrap, t, value, n)
            bench.measure("confluent-kafka", "fetch", size, n, confluent_consume, broker.bootstrap, t, n)
            if KCAT:
                t = bench.topic()
                bench.measure("kcat", "produce", size, n, kcat_produce, broker.bootstrap, t, value, n, lines)
                bench.measure("kcat", "fetch", size, n, kcat_consume, broker.bootstrap, t, n)
            t = bench.topic()
            bench.measure("metaq.Producer", "produce", size, n, metaq_produce, zk, t, value, n)
        return bench.rows
    finally:
        broker.stop()
        client.stop()
        client.close()
        if zk_server:
            zk_server.stop()
        shutil.rmtree(work, ignore_errors=True)


def print_table(rows: list[Row]) -> None:
    header = ["client", "job", "value B", "messages", "msgs/s", "MB/s", "broker CPU s/1M"]
    table = [header] + [r.cells() for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print("  ".join(c.rjust(w) if j > 1 else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300000, help="messages per 100-byte run (1 KiB: a quarter)")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma separated")
    args = parser.parse_args()
    rows = run(args.messages, [int(s) for s in args.sizes.split(",")])
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
