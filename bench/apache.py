"""The metaq broker beside Apache Kafka, and metaq's Spark source beside Spark's own Kafka source (``--only apache``).

    python -m bench --only apache [--apache-messages 100000] [--apache-parts broker,rf3,spark]

Brokers: Apache Kafka 3.9.2 as the test harness starts it (:class:`metaq.testing.apache_kafka.ApacheKafkaBroker`:
one JVM per broker with the harness's ``JVM_OPTIONS`` -Xmx256m -Xms32m, SerialGC, C1 only; ``num.io.threads`` and
``num.network.threads`` 2; one log dir; ZooKeeper mode on this run's embedded ZooKeeper) and the metaq broker
(:class:`metaq.broker.process.BrokerProcess`, its defaults), each in turn under the same load, one partition per
topic:

- confluent-kafka produce of N x 100 B and N x 1 KiB, acks=1 (linger.ms 5, batch.size 1,000,000: bench/clients.py);
- each topic read back by confluent-kafka's consume(10000) and by the metaq batch listener, each in a fresh process
  (bench/consumer.py's workers: the rate from first to last delivery), in ``FETCH_ROUNDS`` rounds that alternate
  the two brokers (medians of the rate and of the broker CPU);
- the broker's CPU seconds per 1M messages from ``/proc/<pid>/stat`` (utime+stime) before and after each job (a
  fetch job's CPU includes its consumer's start-up), and its RSS (``VmRSS``) after all of them;
- produce latency (librdkafka's per-message latency, produce() to acknowledgement, linger included) at a fixed
  rate of 50% of the lower of the two brokers' 100 B acks=1 produce rates, p50 and p99;
- with ``rf3``: three brokers of each kind, a topic of replication factor 3 (min.insync.replicas 2), N x 100 B
  acks=all, the CPU of all three brokers together.

Spark: one topic of N x 100 B on 12 partitions (on the metaq broker), one SparkSession (local[2], the settings of
bench/spark.py, with spark-sql-kafka-0-10 on ``spark.jars``); ``format("metaq")`` (zookeeper.connect, its default
task packing) and ``format("kafka")`` (kafka.bootstrap.servers) alternate: one untimed full read each (the JVM's
JIT), then 5 timed reads each of ``sum(length(value))``, best and median; then a streaming query each
(``maxOffsetsPerTrigger`` 200,000 into the ``noop`` sink), rows over the sum of Spark's ``triggerExecution``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka

from bench import spark as bench_spark
from bench.clients import CONFLUENT_BATCH_SIZE, confluent_produce
from bench.consumer import WorkerArgs, run_worker
from bench.environment import Environment, environment
from bench.tables import print_table
from bench.targets import Target
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.apache_kafka import ApacheKafkaBroker, ApacheKafkaCluster
from metaq.testing.broker import topic_leaders
from metaq.testing.kafka_tools import JVM_OPTIONS
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until

PARTS = ("broker", "rf3", "spark")
SIZES = (100, 1024)
FETCHERS = (("confluent-consume", "confluent consume(10000)"), ("metaq-batch-listener", "metaq batch listener"))
FETCH_ROUNDS = 5
"""Each consumer reads each topic this many times, the two brokers alternating (``--apache-fetch-rounds``); the
table keeps the median rate and the median broker CPU, so that the fetch target compares between runs."""
LATENCY_SHARE = 0.5
"""The fixed produce rate of the latency run: this share of the lower of the two brokers' maximum."""
LATENCY_SECONDS = 10.0
SPARK_PARTITIONS = 12
SPARK_REPEAT = 5
SPARK_BATCH_ROWS = 200_000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pids: list[int]) -> float:
    """utime+stime in seconds of the processes (``/proc/<pid>/stat`` fields 14 and 15)."""
    total = 0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()  # fields from the third (state) on: the name may hold spaces
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def proc_rss(pids: list[int]) -> int:
    """Resident bytes (``VmRSS``) of the processes together."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


@dataclass
class Subject:
    """One broker or cluster under test: where clients connect, the processes whose CPU and RSS count, and how
    a topic is made on it (name, partitions, replication factor)."""

    name: str
    bootstrap: str
    zk_connect: str
    pids: list[int]
    make_topic: Callable[[str, int, int], None]


@dataclass
class Job:
    """One timed job: ``rate`` is the client's msgs/s, ``cpu`` the brokers' CPU seconds over ``messages``."""

    broker: str
    job: str
    size: int
    messages: int
    rate: float
    cpu: float

    @property
    def cpu_per_m(self) -> float:
        return self.cpu / self.messages * 1e6

    def cells(self) -> list[str]:
        return [self.broker, self.job, str(self.size), f"{self.messages:,}", f"{self.rate:,.0f}",
                f"{self.rate * self.size / 1e6:,.1f}", f"{self.cpu_per_m:.2f}"]


JOB_HEADER = ["broker", "job", "value B", "messages", "msgs/s", "MB/s", "broker CPU s/1M"]


@dataclass
class Latency:
    broker: str
    rate: float
    messages: int
    p50_ms: float
    p99_ms: float


@dataclass
class SparkFigures:
    """Rows/s of each source: warm batch reads and one streaming query."""

    batch: dict[str, list[float]] = field(default_factory=dict)
    stream: dict[str, float] = field(default_factory=dict)


@dataclass
class Results:
    jobs: list[Job] = field(default_factory=list)
    rss: dict[str, int] = field(default_factory=dict)
    latency: list[Latency] = field(default_factory=list)
    spark: SparkFigures | None = None
    load: list[str] = field(default_factory=list)


def _log(line: str) -> None:
    print(line, flush=True)


def _loadavg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


# -- brokers ----------------------------------------------------------------------------------------------------------

def metaq_subject(env: Environment, brokers: list[BrokerProcess]) -> Subject:
    def make(name: str, partitions: int, replicas: int) -> None:
        ids = [b.broker_id for b in brokers[:replicas]]
        create_topic(env.layout, name, partitions, assignment={p: ids for p in range(partitions)},
                     config={"min.insync.replicas": "2"} if replicas > 1 else {})
        for b in brokers[:replicas]:
            wait_until(lambda b=b: len(topic_leaders(b.bootstrap, name)) == partitions, 30,
                       f"{name} on {b.broker_id}")

    label = "metaq" if len(brokers) == 1 else f"metaq x{len(brokers)}"
    return Subject(label, ",".join(b.bootstrap for b in brokers), env.zk, [b.pid for b in brokers], make)


def kafka_subject(kafka: ApacheKafkaBroker | ApacheKafkaCluster) -> Subject:
    brokers = kafka.brokers if isinstance(kafka, ApacheKafkaCluster) else [kafka]

    def make(name: str, partitions: int, replicas: int) -> None:
        kafka.create_topic(name, partitions, replicas, {"min.insync.replicas": "2"} if replicas > 1 else None)

    pids = [b.pid for b in brokers if b.pid is not None]
    label = f"Kafka {kafka.version}" if len(brokers) == 1 else f"Kafka {kafka.version} x{len(brokers)}"
    return Subject(label, kafka.bootstrap, kafka.zk_connect, pids, make)


def _timed_produce(subject: Subject, job: str, topic: str, size: int, messages: int, acks: int | str) -> Job:
    cpu0 = proc_cpu(subject.pids)
    t0 = time.perf_counter()
    confluent_produce(subject.bootstrap, topic, b"x" * size, messages, acks=acks)
    seconds = time.perf_counter() - t0
    return Job(subject.name, job, size, messages, messages / seconds, proc_cpu(subject.pids) - cpu0)


def load(subject: Subject, messages: int) -> list[Job]:
    """Produce N x 100 B and N x 1 KiB (acks=1), each to a topic of its own (``apache-<size>``)."""
    subject.make_topic("apache-warm", 1, 1)
    confluent_produce(subject.bootstrap, "apache-warm", b"w" * 100, 10_000)  # connections, the JVM's JIT
    jobs = []
    for size in SIZES:
        topic = f"apache-{size}"
        subject.make_topic(topic, 1, 1)
        jobs.append(_timed_produce(subject, "produce acks=1", topic, size, messages, 1))
        _log("  " + " | ".join(jobs[-1].cells()))
    return jobs


def fetch_rounds(subjects: list[Subject], messages: int, work_dir: Path, rounds: int) -> list[Job]:
    """Each consumer reads each broker's topics ``rounds`` times, the brokers alternating (reversed order every
    other round, as the producer section alternates its clients), so that a change in the machine's load reaches
    both alike; a job's figures are the medians of its rounds (rate and broker CPU)."""
    runs: dict[tuple[str, str, int], list[Job]] = {}
    for round_ in range(rounds):
        _log(f"  -- fetch round {round_ + 1} of {rounds} (load average {_loadavg()})")
        for subject in subjects[::-1] if round_ % 2 else subjects:
            for size in SIZES:
                for kind, label in FETCHERS:
                    cpu0 = proc_cpu(subject.pids)
                    out = run_worker(kind, WorkerArgs(subject.zk_connect, subject.bootstrap, f"apache-{size}", 1,
                                                      messages, work_dir, value_size=size))
                    job = Job(subject.name, f"fetch {label}", size, messages, out["timed"] / out["seconds"],
                              proc_cpu(subject.pids) - cpu0)
                    runs.setdefault((subject.name, job.job, size), []).append(job)
                    _log("  " + " | ".join(job.cells()))
    return [Job(name, job, size, messages, statistics.median(j.rate for j in jobs),
                statistics.median(j.cpu for j in jobs)) for (name, job, size), jobs in runs.items()]


def paced_latency(subject: Subject, rate: float, messages: int) -> Latency:
    """``messages`` x 100 B at ``rate`` msgs/s (acks=1, the producer settings of the throughput jobs), produced in
    1 ms steps; the p50 and p99 of librdkafka's per-message latency."""
    topic = "apache-latency"
    subject.make_topic(topic, 1, 1)
    latencies: list[float] = []
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append(msg.latency())

    producer = confluent_kafka.Producer({"bootstrap.servers": subject.bootstrap, "linger.ms": 5,
                                         "batch.size": CONFLUENT_BATCH_SIZE, "acks": 1,
                                         "queue.buffering.max.messages": 2_000_000})
    value = b"x" * 100
    sent = 0
    t0 = time.perf_counter()
    while sent < messages:
        due = min(messages, int((time.perf_counter() - t0) * rate) + 1)
        while sent < due:
            producer.produce(topic, value, partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    if producer.flush(120) != 0 or failures:
        raise RuntimeError(f"latency run on {subject.name}: {failures[:3]} (and not every message acknowledged?)")
    cuts = statistics.quantiles(latencies, n=100)
    return Latency(subject.name, rate, messages, cuts[49] * 1e3, cuts[98] * 1e3)


def rf3(env: Environment, zk_hosts: str, messages: int) -> list[Job]:
    """Three brokers of each kind, one RF 3 topic (min.insync.replicas 2), N x 100 B acks=all."""
    jobs = []
    extra = [BrokerProcess(env.zk, i, env.work_dir, log_level="WARNING").start() for i in (1, 2)]
    try:
        subject = metaq_subject(env, [env.broker, *extra])
        jobs.append(_rf3_job(subject, messages))
    finally:
        for b in extra:
            b.stop()
    with ApacheKafkaCluster(V3_9, zk_hosts=zk_hosts, base_dir=env.work_dir / "kafka-rf3", size=3) as cluster:
        jobs.append(_rf3_job(kafka_subject(cluster), messages))
    return jobs


def _rf3_job(subject: Subject, messages: int) -> Job:
    subject.make_topic("apache-rf3-warm", 1, 3)
    confluent_produce(subject.bootstrap, "apache-rf3-warm", b"w" * 100, 10_000, acks="all")
    subject.make_topic("apache-rf3", 1, 3)
    job = _timed_produce(subject, "produce acks=all RF3", "apache-rf3", 100, messages, "all")
    _log("  " + " | ".join(job.cells()) + "  (CPU: all three brokers)")
    return job


# -- Spark ------------------------------------------------------------------------------------------------------------

def spark_compare(env: Environment, messages: int) -> SparkFigures:
    """``format("metaq")`` and ``format("kafka")`` on the same topic, in one session, alternating."""
    from metaq.testing.java_peers import spark_kafka_jars

    seconds = bench_spark.produce(env, messages, SPARK_PARTITIONS)
    _log(f"  produced {messages:,} x 100 B on {SPARK_PARTITIONS} partitions in {seconds:.1f}s")
    spark = bench_spark.spark_session(jars=spark_kafka_jars())
    sources = {"metaq": ("metaq", {"zookeeper.connect": env.zk, "subscribe": bench_spark.TOPIC}),
               "spark-sql-kafka": ("kafka", {"kafka.bootstrap.servers": env.bootstrap,
                                             "subscribe": bench_spark.TOPIC})}
    figures = SparkFigures({name: [] for name in sources})
    work = Path(tempfile.mkdtemp(prefix="metaq-bench-apache-stream-"))
    try:
        for fmt, options in sources.values():
            _read(spark, fmt, options, messages)  # untimed: the JVM compiles the read's hot paths
        for _ in range(SPARK_REPEAT):
            for name, (fmt, options) in sources.items():
                t0 = time.perf_counter()
                _read(spark, fmt, options, messages)
                figures.batch[name].append(messages / (time.perf_counter() - t0))
                _log(f"  batch read {name}: {figures.batch[name][-1]:,.0f} rows/s")
        for name, (fmt, options) in sources.items():
            figures.stream[name] = _stream(spark, fmt, {**options, "startingOffsets": "earliest"}, messages,
                                           work / name)
            _log(f"  stream {name}: {figures.stream[name]:,.0f} rows/s")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return figures


def _read(spark: Any, fmt: str, options: dict[str, str], messages: int) -> None:
    total = spark.read.format(fmt).options(**options).load().selectExpr("sum(length(value))").collect()[0][0]
    if total != messages * bench_spark.VALUE_SIZE:
        raise RuntimeError(f"bench.apache: {fmt} read {total} value bytes, "
                           f"expected {messages * bench_spark.VALUE_SIZE}")


def _stream(spark: Any, fmt: str, options: dict[str, str], messages: int, checkpoint: Path) -> float:
    """Rows per second of Spark's own progress reports (rows over the sum of ``triggerExecution``)."""
    query = (spark.readStream.format(fmt).options(**options, maxOffsetsPerTrigger=str(SPARK_BATCH_ROWS)).load()
             .selectExpr("length(value) AS n").writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    rows = sum(p["numInputRows"] for p in progress)
    if rows != messages:
        raise RuntimeError(f"bench.apache: the {fmt} stream read {rows} rows, expected {messages}")
    return rows / (sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000)


# -- the section -------------------------------------------------------------------------------------------------------

def run(messages: int = 1_000_000, parts: tuple[str, ...] = PARTS, fetch_rounds_n: int = FETCH_ROUNDS) -> Results:
    """Every part in ``parts``, in its own ZooKeeper and metaq broker (Kafka's brokers on the same ZooKeeper,
    under a chroot of their own); ``fetch_rounds_n`` alternating fetch rounds."""
    results = Results()
    with environment() as env:
        zk_hosts = env.zk.split("/", 1)[0]
        results.load.append(f"start: {_loadavg()}")
        if "broker" in parts:
            metaq = metaq_subject(env, [env.broker])
            with ApacheKafkaBroker(V3_9, zk_hosts=zk_hosts, base_dir=env.work_dir / "kafka") as kafka:
                subjects = [metaq, kafka_subject(kafka)]
                for subject in subjects:
                    _log(f"  -- {subject.name} (load average {_loadavg()})")
                    results.jobs += load(subject, messages)
                results.jobs += fetch_rounds(subjects, messages, env.work_dir, fetch_rounds_n)
                for subject in subjects:
                    results.rss[subject.name] = proc_rss(subject.pids)
                produced = [j.rate for j in results.jobs if j.job == "produce acks=1" and j.size == 100]
                rate = LATENCY_SHARE * min(produced)
                for subject in subjects:
                    n = max(1000, min(messages, int(rate * LATENCY_SECONDS)))
                    results.latency.append(paced_latency(subject, rate, n))
                    lat = results.latency[-1]
                    _log(f"  latency {lat.broker} at {rate:,.0f} msgs/s: p50 {lat.p50_ms:.1f} ms, "
                         f"p99 {lat.p99_ms:.1f} ms")
            results.load.append(f"after the single brokers: {_loadavg()}")
        if "rf3" in parts:
            results.jobs += rf3(env, zk_hosts, messages)
            results.load.append(f"after RF3: {_loadavg()}")
        if "spark" in parts:
            results.spark = spark_compare(env, messages)
            results.load.append(f"after Spark: {_loadavg()}")
    return results


def _job(results: Results, broker_prefix: str, job: str, size: int = 100) -> Job | None:
    found = [j for j in results.jobs if j.broker.startswith(broker_prefix) and j.job == job and j.size == size]
    return found[0] if found else None


def targets(results: Results) -> list[Target]:
    """The ratios of docs/performance.md's targets that this section measures."""
    out = []
    for job, what in (("produce acks=1", "produce"), ("fetch confluent consume(10000)", "fetch")):
        ours, theirs = _job(results, "metaq", job), _job(results, "Kafka", job)
        if ours and theirs:
            out.append(Target(f"broker {what} msgs/s metaq/Kafka (100 B)", ours.rate / theirs.rate, 1.0))
            out.append(Target(f"broker {what} CPU-s/1M Kafka/metaq (100 B)", theirs.cpu_per_m / ours.cpu_per_m, 1.0))
    rss = [v for k, v in results.rss.items() if k == "metaq"], [v for k, v in results.rss.items() if "Kafka" in k]
    if rss[0] and rss[1]:
        out.append(Target("broker RSS Kafka/metaq", rss[1][0] / rss[0][0], 2.0))
    ours, theirs = _job(results, "metaq", "produce acks=all RF3"), _job(results, "Kafka", "produce acks=all RF3")
    if ours and theirs:
        out.append(Target("broker RF3 acks=all produce msgs/s metaq/Kafka", ours.rate / theirs.rate, 0.8))
    if results.spark is not None:
        batch, stream = results.spark.batch, results.spark.stream
        out.append(Target(f"Spark batch read rows/s metaq/spark-sql-kafka (best of {SPARK_REPEAT})",
                          max(batch["metaq"]) / max(batch["spark-sql-kafka"]), 1.0))
        out.append(Target("Spark streaming rows/s metaq/spark-sql-kafka", stream["metaq"] / stream["spark-sql-kafka"],
                          1.0))
    return out


def print_tables(results: Results) -> None:
    print(f"\nA. metaq broker vs Apache Kafka {V3_9} (JVM {' '.join(JVM_OPTIONS[:4])}; one partition; "
          f"load average {'; '.join(results.load)})")
    if results.jobs:
        print_table(JOB_HEADER, [j.cells() for j in results.jobs])
    if results.rss:
        print_table(["broker", "RSS MiB (after the loads)"],
                    [[name, f"{rss / 2**20:,.0f}"] for name, rss in results.rss.items()])
    if results.latency:
        print_table(["broker", "fixed rate msgs/s", "messages", "latency p50 ms", "latency p99 ms"],
                    [[lat.broker, f"{lat.rate:,.0f}", f"{lat.messages:,}", f"{lat.p50_ms:.1f}", f"{lat.p99_ms:.1f}"]
                     for lat in results.latency])
    if results.spark is not None:
        batch, stream = results.spark.batch, results.spark.stream
        print_table(["Spark source (local[2], 12 partitions, 100 B)", "batch rows/s best", "batch rows/s median",
                     "stream rows/s"],
                    [[name, f"{max(rates):,.0f}", f"{statistics.median(rates):,.0f}", f"{stream[name]:,.0f}"]
                     for name, rates in batch.items()],
                    f"A2. Spark: metaq's source vs spark-sql-kafka-0-10 (warm; {SPARK_REPEAT} reads each, alternating)")
