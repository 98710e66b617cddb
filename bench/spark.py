"""Spark source throughput: a batch read and streaming micro-batches of a pre-produced topic, Spark local[2].

    python -m bench.spark [--messages 1000000] [--partitions 12] [--repeat 3] [--batch-rows 200000]

The topic (100-byte values, null keys, spread evenly over the partitions) is produced once with
confluent-kafka. Start-up is left out of every figure: the SparkSession, and one small read first so
that the Python workers exist and have imported pyarrow. A batch read is timed around one action that
touches every value (``sum(length(value))``). The first full read gets a row of its own: it costs about
twice the CPU of the later ones while the JVM compiles the read's hot paths (Arrow to rows, the
aggregate), so the repeated reads, which the variants take in turns, measure a warm JVM as a long-lived
Spark application has. The streaming rows come from Spark's own progress reports
(``numInputRows`` over ``durationMs.triggerExecution``) of a query with ``maxOffsetsPerTrigger`` into the
``noop`` sink. Every figure comes twice: the default
since ``metaq.spark.register`` (as many tasks as cores, each reading several partitions) and one task per
partition (``maxPartitions`` = partitions, as Spark's Kafka source does): each Python task costs Spark a
fixed 0.05-0.3 s. ``run()`` returns the rows for
``python -m bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.clients import produce as produce_values
from bench.environment import Environment, environment

VALUE_SIZE = 100
TOPIC = "bench-spark"


@dataclass
class Row:
    job: str
    rows: int
    seconds: float
    note: str = ""
    cpu: float | None = None
    """CPU seconds of the whole process tree (Spark's JVM and Python workers, broker, ZooKeeper)."""

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def cells(self) -> list[str]:
        cpu = "" if self.cpu is None else f"{self.cpu / self.rows * 1e6:.2f}"
        return [self.job, f"{self.rows:,}", f"{self.seconds:.2f}", f"{self.rate:,.0f}", cpu, self.note]


HEADER = ["job", "rows", "seconds", "rows/s", "CPU s/1M rows", "note"]


def tree_cpu() -> float:
    """User+system CPU seconds of this process and all its descendants so far: on a shared machine the
    wall-clock rate depends on the neighbours, the CPU cost much less."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # gone meanwhile
            continue
        total += times.user + times.system
    return total


def produce(env: Environment, messages: int, partitions: int) -> float:
    """Create and fill the topic; returns the seconds the produce took."""
    from metaq.broker.topics import create_topic
    from metaq.testing.broker import topic_leaders
    from metaq.testing.wait import wait_until

    create_topic(env.layout, TOPIC, partitions)
    wait_until(lambda: len(topic_leaders(env.bootstrap, TOPIC)) == partitions, 20, f"topic {TOPIC}")
    t0 = time.perf_counter()
    produce_values({"bootstrap.servers": env.bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                    "queue.buffering.max.messages": 2_000_000}, TOPIC, b"v" * VALUE_SIZE, messages, partitions)
    return time.perf_counter() - t0


def spark_session(jars: list[Path] | None = None) -> Any:
    """local[2], no UI, 2 shuffle partitions, metaq's source registered; ``jars`` (``spark.jars``: e.g. Spark's
    own Kafka source) reach the driver only if this process has no Spark JVM yet."""
    from pyspark.sql import SparkSession

    import metaq.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName("metaq-bench-spark")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    metaq.spark.register(session)
    return session


def batch_reads(spark: Any, zk: str, messages: int, partitions: int, repeat: int) -> list[Row]:
    """Timed reads of the whole topic, one task per partition and packed into as many tasks as cores;
    the variants take turns, so that a busy machine slows them alike."""
    options = {"zookeeper.connect": zk, "subscribe": TOPIC}
    first = json.dumps({TOPIC: {str(p): 100 for p in range(partitions)}})
    warm = spark.read.format("metaq").options(**options, endingOffsets=first)
    warm.load().selectExpr("sum(length(value))").collect()  # Python workers up, pyarrow imported
    cores = spark.sparkContext.defaultParallelism
    seconds, cpu = _timed_read(spark, options, messages)  # the JVM compiles the read's hot paths meanwhile
    rows = [Row(f"batch read, {cores} tasks, first", messages, seconds, "cold JVM: JIT compilation", cpu=cpu)]
    variants = {f"batch read, {cores} tasks (default)": {},
                f"batch read, {partitions} tasks": {"maxPartitions": str(partitions)}}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, extra in variants.items():
            times[name].append(_timed_read(spark, {**options, **extra}, messages))
    for name, runs in times.items():
        median = statistics.median(t for t, _ in runs)
        rows.append(Row(name, messages, min(t for t, _ in runs), f"best of {repeat}; median {median:.2f} s",
                        cpu=min(c for _, c in runs)))
    return rows


def _timed_read(spark: Any, options: dict[str, str], messages: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one read of the whole topic."""
    cpu0, t0 = tree_cpu(), time.perf_counter()
    total = spark.read.format("metaq").options(**options).load().selectExpr("sum(length(value))").collect()[0][0]
    seconds, cpu = time.perf_counter() - t0, tree_cpu() - cpu0
    if total != messages * VALUE_SIZE:
        raise RuntimeError(f"bench.spark: read {total} value bytes, expected {messages * VALUE_SIZE}")
    return seconds, cpu


def stream_batches(spark: Any, zk: str, messages: int, batch_rows: int, work: Path,
                   extra: dict[str, str], label: str) -> list[Row]:
    """One query over the whole topic; a row per micro-batch from Spark's progress reports."""
    slug = "".join(c if c.isalnum() else "-" for c in label)
    options = {"zookeeper.connect": zk, "subscribe": TOPIC, "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": str(batch_rows), "group.id": f"bench-spark-{slug}", **extra}
    cpu0 = tree_cpu()
    query = (spark.readStream.format("metaq").options(**options).load().selectExpr("length(value) AS n")
             .writeStream.format("noop").option("checkpointLocation", str(work / slug)).start())
    try:
        query.processAllAvailable()
        cpu = tree_cpu() - cpu0
        progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    if sum(p["numInputRows"] for p in progress) != messages:
        raise RuntimeError("bench.spark: the stream did not read every message")
    rows = []
    for i, p in enumerate(progress):
        note = "cold: includes worker start-up" if i == 0 else f"addBatch {p['durationMs'].get('addBatch', 0)} ms"
        rows.append(Row(f"{label} micro-batch {p['batchId']}", p["numInputRows"],
                        p["durationMs"]["triggerExecution"] / 1000, note))
    wall = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    rows.append(Row(f"{label} stream, all batches", messages, wall, "wall: batches only; CPU: with start-up",
                    cpu=cpu))
    return rows


def run(messages: int = 1_000_000, partitions: int = 12, repeat: int = 3, batch_rows: int = 200_000) -> list[Row]:
    """Every figure of this benchmark, in its own ZooKeeper, broker and SparkSession."""
    with environment() as env:  # its own ZooKeeper and broker
        seconds = produce(env, messages, partitions)
        print(f"  produced {messages:,} x {VALUE_SIZE} B on {partitions} partitions in {seconds:.1f}s", flush=True)
        t0 = time.perf_counter()
        spark = spark_session()
        print(f"  SparkSession up in {time.perf_counter() - t0:.1f}s", flush=True)
        work = Path(tempfile.mkdtemp(prefix="metaq-bench-spark-stream-"))
        try:
            rows = batch_reads(spark, env.zk, messages, partitions, repeat)
            cores = spark.sparkContext.defaultParallelism
            rows += stream_batches(spark, env.zk, messages, batch_rows, work, {}, f"{cores} tasks")
            rows += stream_batches(spark, env.zk, messages, batch_rows, work, {"maxPartitions": str(partitions)},
                                   f"{partitions} tasks")
        finally:
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)
    return rows


def print_table(rows: list[Row]) -> None:
    table = [HEADER] + [r.cells() for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    for i, cells in enumerate(table):
        print("  ".join(c.ljust(w) if j in (0, 5) else c.rjust(w)
                        for j, (c, w) in enumerate(zip(cells, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3, help="timed batch reads (the best is reported)")
    parser.add_argument("--batch-rows", type=int, default=200_000, help="maxOffsetsPerTrigger of the stream")
    args = parser.parse_args()
    rows = run(args.messages, args.partitions, args.repeat, args.batch_rows)
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
