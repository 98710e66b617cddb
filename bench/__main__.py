"""metaq benchmarks, one entry point: broker throughput, consumer throughput, rebalance and commit latency.

    python -m bench            # the full run (about 3 minutes on 2 CPUs)
    python -m bench --quick    # a sanity run (under a minute): fewer messages and repetitions
    python -m bench --only consumer,commit

Everything runs against one embedded ZooKeeper (tickTime 200 ms) and one broker process, in one run, and
ends with one set of tables:

1. broker: produce and fetch throughput of confluent-kafka, kcat and metaq.Producer (100-byte and 1 KiB
   values; confluent-kafka also gzip-compressed): msgs/s, MB/s and the broker's CPU seconds per million
   messages (user+system of the broker process during that job, scaled) and the client's (the bench process
   for confluent-kafka and metaq, kcat's own process for kcat). Produce rows include the broker's
   validation of every record (metaq/broker/log/validator.py); then the broker's CPU for confluent-kafka's
   100-byte produce and fetch with metrics on (the shared broker) and off (a second broker started with
   metrics.enabled=false), alternated;
1c. producer: confluent-kafka and metaq.Producer 100-byte produce (1M messages each, both with batch.size
   1,000,000, librdkafka's default) in alternating order, five rounds, with each round's metaq / confluent
   ratios of msgs/s and CPU and their medians (--only producer); then 1d: both clients with acks=all,
   enable.idempotence false and true, interleaved: the broker's CPU for idempotence;
2. consumer: one consumer process per client on the same pre-produced data (bench/consumer.py), with the
   ratios the targets are stated in, and the metaq stream iterator and batch listener with metrics on and off;
   then lz4 and zstd topics of the same messages, metaq's stream iterator and batch listener against
   confluent-kafka's poll() and consume(10000);
3. rebalance: 4 consumer processes x 64 partitions, clean leave/join and SIGKILL (bench/rebalance.py);
   3b. the same leave/join on ZooKeeper coordination, Kafka coordination with range and with cooperative-sticky:
   time to fetch again, partitions paused vs moved (bench/rebalance_kafka.py; --only rebalance-kafka);
4. commit: ZooKeeperOffsetStore.commit of 1,000 partitions (bench/rebalance.py);
5. offsets: commit latency through the offsets channel vs ZooKeeper, 3-member group stabilisation (bench/offsets.py);
6. spark: batch read of 1M 100-byte messages from 12 partitions and micro-batches, local[2] (bench/spark.py);
7. security: the metaq consumer's throughput over PLAINTEXT, SSL and SASL_SSL (with confluent-kafka's) and the
   time to open a TLS/SASL connection with metaq's client (bench/consumer_security.py); confluent-kafka's produce
   and fetch per listener and the raw SCRAM login time (bench/security.py).
8. scale: N members x P partitions (10 x 1,000, 50 x 5,000, 100 x 10,000), settle time after a join burst
   and a leave, attempts, ZooKeeper requests and claim conflicts; fence and commit of 10,000 offsets
   (bench/scale.py; --only scale).
10. apache: the metaq broker beside Apache Kafka 3.9.2 (one broker, and RF 3 on three of each), confluent-kafka
   produce and confluent-kafka / metaq consume, CPU, RSS, latency at a fixed rate; metaq's Spark source beside
   spark-sql-kafka-0-10 (bench/apache.py; --only apache, --apache-messages, --apache-parts, --apache-fetch-rounds).
11. transactions: confluent-kafka acks=all idempotent produce against transactional produce in transactions of
   100 and 10,000 records, and fetch of the transactional topic read_uncommitted vs read_committed, interleaved
   rounds (medians; --only transactions).
9. replication: confluent-kafka produce to RF1 acks=1, RF3 acks=1, RF3 acks=all on three brokers (leader's and
   a follower's CPU), and the failover time after SIGKILL / SIGTERM of a leader, to the first acks=all produce
   and to the first record fetched that was produced after it (bench/replication.py; --only replication).
12. cleaner: the log cleaner's MB/s, records/s and CPU seconds per GB beside Apache Kafka 3.9.2's on the same
   records (1M keys x 10 versions, 100 B values), and produce throughput while it cleans (bench/cleaner.py;
   --only cleaner, --cleaner-keys, --cleaner-io-rate, --cleaner-produce-only).
13. reassign: 1 GiB (--reassign-mb) of 4 partitions moved from broker 0 to 1 unthrottled and back throttled
   (--reassign-throttle-mb, default 20 MB/s): time, MB/s, and the p50/p99 produce latency of a steady acks=all
   producer on a topic of both brokers, without a move and during each (bench/reassign.py; --only reassign).

The run ends with one line per target (bench/targets.py) of the sections that ran: ``--only
apache,producer,consumer,cleaner`` covers every target of docs/performance.md.

``ZOOKEEPER_CONNECT=host:port`` uses an existing ZooKeeper instead of the embedded one.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from bench import apache as bench_apache
from bench import consumer as bench_consumer
from bench import rebalance as bench_rebalance
from bench import rebalance_kafka as bench_rebalance_kafka
from bench import scale as bench_scale
from bench.clients import (
    KCAT,
    confluent_consume,
    confluent_produce,
    kcat_consume,
    kcat_produce,
    metaq_produce,
    transactional_produce,
)
from bench.environment import Environment, environment
from bench.tables import print_table
from bench.targets import Target, print_targets
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


PRODUCER_MESSAGES = 1_000_000
PRODUCER_TARGET = 0.8  # metaq.Producer's msgs/s >= 0.8x confluent-kafka's (median), same broker, same run


def run_producer_ratio(env: Environment, messages: int, repeat: int) -> list[Row]:
    """confluent-kafka and metaq.Producer (acks=1, linger.ms=5, batch.size 1,000,000, 100-byte values, one
    partition) in alternating order, ``repeat`` rounds on the shared broker: on a loaded machine only interleaved
    runs compare."""
    bench = Bench(env.broker, env.layout, "producer-ratio")
    value = b"x" * 100
    jobs = [("confluent-kafka", confluent_produce, env.bootstrap), ("metaq.Producer", metaq_produce, env.zk)]
    for rep in range(repeat):
        for client, fn, address in jobs[::-1] if rep % 2 else jobs:
            bench.measure(client, "produce", 100, messages, fn, address, bench.topic(), value, messages)
    return bench.rows


IDEMPOTENCE_TARGET = 1.10  # idempotence may cost the broker at most 10% more CPU (docs/delivery-guarantees.md §7)


def run_idempotence(env: Environment, messages: int, repeat: int) -> list[Row]:
    """confluent-kafka and metaq.Producer with acks=all, enable.idempotence false and true, interleaved (the order
    reversed in odd rounds): what the broker's per-batch producer state checks cost it."""
    bench = Bench(env.broker, env.layout, "idempotence")
    value = b"x" * 100
    jobs = [(client, idem, fn, address)
            for client, fn, address in (("confluent-kafka", confluent_produce, env.bootstrap),
                                        ("metaq.Producer", metaq_produce, env.zk))
            for idem in (False, True)]
    for rep in range(repeat):
        for client, idem, fn, address in jobs[::-1] if rep % 2 else jobs:
            label = f"{client} {'idempotent' if idem else 'plain'}"
            if fn is confluent_produce:
                bench.measure(label, "produce", 100, messages, fn, address, bench.topic(), value, messages, "none",
                              "all", idem)
            else:
                bench.measure(label, "produce", 100, messages, fn, address, bench.topic(), value, messages, "all",
                              idem)
    return bench.rows


def idempotence_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per client: median msgs/s and broker CPU s/1M, plain and idempotent, and the broker CPU ratio."""
    header = ["client", "plain msgs/s", "idempotent msgs/s", "broker CPU s/1M plain | idempotent", "CPU ratio",
              "target", "met"]
    table = []
    for client in ("confluent-kafka", "metaq.Producer"):
        plain = [r for r in rows if r.client == f"{client} plain"]
        idem = [r for r in rows if r.client == f"{client} idempotent"]
        if not plain or not idem:
            continue
        cpu_plain = statistics.median(r.broker_cpu / r.messages * 1e6 for r in plain)
        cpu_idem = statistics.median(r.broker_cpu / r.messages * 1e6 for r in idem)
        ratio = cpu_idem / cpu_plain if cpu_plain else float("nan")
        table.append([client, f"{statistics.median(r.messages / r.seconds for r in plain):,.0f}",
                      f"{statistics.median(r.messages / r.seconds for r in idem):,.0f}",
                      f"{cpu_plain:.2f} | {cpu_idem:.2f}", f"{ratio:.2f}x", f"<= {IDEMPOTENCE_TARGET:.2f}x",
                      "yes" if ratio <= IDEMPOTENCE_TARGET else "NO"])
    return header, table


TRANSACTION_SIZES = (100, 10_000)


def run_transactions(env: Environment, messages: int, repeat: int) -> list[Row]:
    """confluent-kafka with acks=all: idempotent produce (what a transactional producer is without transactions),
    then produce in transactions of each of :data:`TRANSACTION_SIZES`, then the last transactional topic fetched
    read_uncommitted and read_committed (the broker's LSO and aborted-index work); ``repeat`` rounds, the order
    reversed in odd rounds."""
    bench = Bench(env.broker, env.layout, "transactions")
    value = b"x" * 100
    for rep in range(repeat):
        jobs: list[tuple[str, str, Callable[..., None], tuple[object, ...]]] = [
            ("idempotent", "produce", confluent_produce, (value, messages, "none", "all", True))]
        jobs += [(f"transactions of {size:,}", "produce", transactional_produce, (value, messages, size))
                 for size in TRANSACTION_SIZES]
        for label, job, fn, args in jobs[::-1] if rep % 2 else jobs:
            topic = bench.topic()
            bench.measure(label, job, 100, messages, fn, env.bootstrap, topic, *args)
        fetches = ["read_uncommitted", "read_committed"]
        for isolation in fetches[::-1] if rep % 2 else fetches:
            bench.measure(isolation, "fetch", 100, messages, confluent_consume, env.bootstrap, topic, messages,
                          isolation)
    return bench.rows


def transactions_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Per job: median msgs/s and broker CPU s/1M, and the broker CPU relative to the job's baseline (idempotent
    produce; read_uncommitted fetch)."""
    header = ["client (confluent-kafka, acks=all, 100 B)", "job", "msgs/s", "broker CPU s/1M", "CPU vs baseline"]
    table = []
    baselines = {"produce": "idempotent", "fetch": "read_uncommitted"}
    for label in dict.fromkeys(r.client for r in rows):
        mine = [r for r in rows if r.client == label]
        base = [r for r in rows if r.client == baselines[mine[0].job]]
        cpu = statistics.median(r.broker_cpu / r.messages * 1e6 for r in mine)
        base_cpu = statistics.median(r.broker_cpu / r.messages * 1e6 for r in base)
        table.append([label, mine[0].job, f"{statistics.median(r.messages / r.seconds for r in mine):,.0f}",
                      f"{cpu:.2f}", f"{cpu / base_cpu:.2f}x" if base_cpu else "-"])
    return header, table


def producer_ratio_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Each round's metaq / confluent ratios (msgs/s, client and broker CPU per message), then the medians."""
    ours = [r for r in rows if r.client == "metaq.Producer"]
    theirs = [r for r in rows if r.client == "confluent-kafka"]
    header = ["round", "confluent msgs/s", "metaq msgs/s", "msgs/s ratio", "target", "met",
              "client CPU s/1M c | m", "broker CPU s/1M c | m"]
    table = []
    ratios = []
    for n, (m, c) in enumerate(zip(ours, theirs, strict=True), 1):
        ratio = (m.messages / m.seconds) / (c.messages / c.seconds)
        ratios.append(ratio)
        table.append([str(n), f"{c.messages / c.seconds:,.0f}", f"{m.messages / m.seconds:,.0f}", f"{ratio:.2f}x",
                      f">= {PRODUCER_TARGET}x", "yes" if ratio >= PRODUCER_TARGET else "NO",
                      f"{_per_m(c.client_cpu, c)} | {_per_m(m.client_cpu, m)}",
                      f"{_per_m(c.broker_cpu, c)} | {_per_m(m.broker_cpu, m)}"])
    if ratios:
        med = statistics.median(ratios)
        table.append(["median", f"{statistics.median(c.messages / c.seconds for c in theirs):,.0f}",
                      f"{statistics.median(m.messages / m.seconds for m in ours):,.0f}", f"{med:.2f}x",
                      f">= {PRODUCER_TARGET}x", "yes" if med >= PRODUCER_TARGET else "NO",
                      f"{statistics.median(c.client_cpu / c.messages * 1e6 for c in theirs):.2f} | "
                      f"{statistics.median(m.client_cpu / m.messages * 1e6 for m in ours):.2f}",
                      f"{statistics.median(c.broker_cpu / c.messages * 1e6 for c in theirs):.2f} | "
                      f"{statistics.median(m.broker_cpu / m.messages * 1e6 for m in ours):.2f}"])
    return header, table


def producer_targets(rows: list[Row]) -> list[Target]:
    """The median of the rounds' metaq / confluent msgs/s ratios."""
    pairs = zip([r for r in rows if r.client == "metaq.Producer"], [r for r in rows if r.client == "confluent-kafka"],
                strict=True)
    ratios = [(m.messages / m.seconds) / (c.messages / c.seconds) for m, c in pairs]
    if not ratios:
        return []
    return [Target(f"metaq.Producer/confluent-kafka produce msgs/s (median of {len(ratios)} alternating rounds)",
                   statistics.median(ratios), PRODUCER_TARGET)]


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


def broker_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    header = ["client", "job", "value B", "messages", "msgs/s", "MB/s", "broker CPU s/1M", "client CPU s/1M"]
    return header, [r.cells() for r in rows]


@dataclass(frozen=True)
class Plan:
    """How much one run does: the full run's amounts, or --quick's."""

    broker_messages: int
    sizes: list[int]
    consumer_messages: int
    consumer_partitions: int
    consumer_repeat: int
    rebalance_reps: int
    kill_reps: int
    session_timeout_ms: int
    commit_reps: int
    scale_sizes: tuple[tuple[int, int], ...]
    scale_reps: int
    producer_repeat: int
    apache_messages: int


FULL = Plan(300_000, [100, 1024], 1_000_000, 4, 3, 6, 3, 6000, 20, bench_scale.SIZES, 2, 5, 1_000_000)
QUICK = Plan(50_000, [100], 200_000, 4, 1, 3, 1, 3000, 5, ((10, 1_000),), 1, 1, 100_000)
SECTIONS = ("broker", "producer", "consumer", "rebalance", "rebalance-kafka", "commit", "offsets", "spark", "security",
            "scale", "replication", "apache", "transactions", "cleaner", "reassign")
Table = tuple[list[str], list[list[str]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a sanity run: fewer messages and repetitions")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--messages", type=int, default=None, help="broker section: messages per 100-byte run")
    parser.add_argument("--sizes", default=None, help="broker section: value sizes in bytes, comma separated")
    parser.add_argument("--consumer-messages", type=int, default=None, help="consumer section: messages")
    parser.add_argument("--repeat", type=int, default=None,
                        help="consumer section: runs per client (best); producer section: rounds")
    parser.add_argument("--reassign-mb", type=int, default=None,
                        help="reassign section: MiB moved between brokers (default 1024; --quick: 64)")
    parser.add_argument("--reassign-throttle-mb", type=float, default=20.0,
                        help="reassign section: the throttled move's rate in MB/s (default 20)")
    parser.add_argument("--apache-messages", type=int, default=None,
                        help="apache section: messages per job and in the Spark topic (default 1,000,000)")
    parser.add_argument("--apache-fetch-rounds", type=int, default=bench_apache.FETCH_ROUNDS,
                        help="apache section: alternating fetch rounds per consumer and broker (medians)")
    parser.add_argument("--apache-parts", default=",".join(bench_apache.PARTS),
                        help=f"apache section: comma-separated subset of {bench_apache.PARTS}")
    parser.add_argument("--cleaner-keys", type=int, default=None,
                        help="cleaner section: keys, each written 10 times (default 1,000,000; --quick 50,000)")
    parser.add_argument("--cleaner-io-rate", type=float, default=None,
                        help="cleaner section: the metaq broker's log.cleaner.io.max.bytes.per.second "
                             "(default unthrottled)")
    parser.add_argument("--cleaner-produce-only", action="store_true",
                        help="cleaner section: only produce while cleaning (no Kafka broker, no cleaning cost)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if only - set(SECTIONS):
        parser.error(f"--only: unknown sections {sorted(only - set(SECTIONS))}; choose from {SECTIONS}")
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else plan.sizes
    apache_parts = tuple(p.strip() for p in args.apache_parts.split(",") if p.strip())
    if set(apache_parts) - set(bench_apache.PARTS):
        parser.error(f"--apache-parts: choose from {bench_apache.PARTS}")
    tables: list[tuple[str, Table]] = []
    targets: list[Target] = []
    started = time.monotonic()
    with environment() as env:
        if "broker" in only:
            print("== 1. broker: produce and fetch throughput", flush=True)
            rows = run_broker(env, args.messages or plan.broker_messages, sizes)
            tables.append(("1. Broker throughput (one client at a time, same broker)", broker_table(rows)))
            print("== 1b. broker CPU with metrics on and off", flush=True)
            rows = run_broker_metrics(env, max(args.messages or plan.broker_messages, METRICS_MESSAGES),
                                      max(2, plan.consumer_repeat))
            tables.append(("   Broker CPU with metrics on and off (best of the runs)", broker_metrics_table(rows)))
        if "producer" in only:
            print("== 1c. producer: metaq.Producer vs confluent-kafka, interleaved", flush=True)
            rows = run_producer_ratio(env, args.messages or (plan.broker_messages if args.quick else PRODUCER_MESSAGES),
                                      args.repeat or plan.producer_repeat)
            targets += producer_targets(rows)
            tables.append(("1c. metaq.Producer / confluent-kafka produce (acks=1, linger.ms=5, batch.size 1,000,000, "
                           "100 B, one partition; c | m: confluent | metaq)", producer_ratio_table(rows)))
            print("== 1d. producer: idempotent vs plain produce, acks=all, interleaved", flush=True)
            rows = run_idempotence(env, args.messages or (plan.broker_messages if args.quick else PRODUCER_MESSAGES),
                                   max(2, (args.repeat or plan.producer_repeat) // 2))
            tables.append(("1d. Idempotent vs plain produce (acks=all, enable.idempotence, 100 B, one partition; "
                           "medians)", idempotence_table(rows)))
        if "transactions" in only:
            print("== 10. transactions: transactional produce and read_committed fetch, interleaved", flush=True)
            rows = run_transactions(env, args.messages or plan.broker_messages,
                                    max(2, (args.repeat or plan.producer_repeat) // 2))
            tables.append(("10. Transactions (confluent-kafka, acks=all, 100 B, one partition; medians; baselines: "
                           "idempotent produce, read_uncommitted fetch)", transactions_table(rows)))
        if "consumer" in only:
            print("== 2. consumer throughput", flush=True)
            results = bench_consumer.run(env, args.consumer_messages or plan.consumer_messages,
                                         plan.consumer_partitions, args.repeat or plan.consumer_repeat)
            tables.append((f"2. Consumer throughput (one process each, 100-byte values, {plan.consumer_partitions} "
                           "partitions, best of the runs)", bench_consumer.table(results)))
            tables.append(("   Ratios (CPU/msg ratio: CPU seconds per message)",
                           bench_consumer.ratio_table(results)))
            tables.append(("   metaq consumer with metrics on and off (metrics.enabled)",
                           bench_consumer.metrics_table(results)))
            targets += bench_consumer.targets(results)
            tables.append(("   Compressed topics (the same messages, compression.type lz4 and zstd; ratio: to the "
                           "confluent-kafka counterpart on the same topic)", bench_consumer.codec_table(results)))
        if "rebalance" in only:
            print("== 3. rebalance latency", flush=True)
            changes = bench_rebalance.measure_rebalance(
                env.zk, env.client, env.bootstrap, env.layout, env.work_dir, reps=plan.rebalance_reps,
                kill_reps=plan.kill_reps, session_timeout_ms=plan.session_timeout_ms,
                report=lambda line: print(line, flush=True))
            tables.append((f"3. Rebalance latency (zookeeper.session.timeout.ms={plan.session_timeout_ms}; "
                           "otherwise Kafka 0.8 defaults)",
                           bench_rebalance.rebalance_table(changes, plan.session_timeout_ms)))
        if "rebalance-kafka" in only:
            print("== 3b. rebalance: Kafka vs ZooKeeper coordination, eager vs cooperative-sticky", flush=True)
            kafka_results = bench_rebalance_kafka.measure(
                env.zk, env.bootstrap, env.layout, env.work_dir, reps=plan.rebalance_reps,
                session_timeout_ms=10000, heartbeat_ms=3000, report=lambda line: print(line, flush=True))
            tables.append(("3b. Rebalance, Kafka vs ZooKeeper coordination (session 10 s, heartbeat.interval.ms "
                           "3000)", bench_rebalance_kafka.table(kafka_results)))
            targets += bench_rebalance_kafka.targets(kafka_results)
        if "commit" in only:
            print("== 4. offset commit latency", flush=True)
            fence, times = bench_rebalance.measure_commit(env.client, reps=plan.commit_reps,
                                                          report=lambda line: print(line, flush=True))
            tables.append(("4. Offset commit over ZooKeeper", bench_rebalance.commit_table(1000, fence, times)))
        if "scale" in only:
            print(f"== 7. group scale (members are threads of {bench_scale.PROCESSES} worker processes, one ZooKeeper "
                  "session each)", flush=True)
            phases, offset_rows = bench_scale.run(env.zk, env.layout, env.broker.broker_id, list(plan.scale_sizes),
                                                  plan.scale_reps, report=lambda line: print(line, flush=True))
            tables.extend(bench_scale.tables(phases, offset_rows))
        if "replication" in only:
            print("== 9. replication: produce throughput by replication factor and acks; leader failover", flush=True)
            from bench import replication as bench_replication

            repl_rows, failovers = bench_replication.run(env, args.messages or plan.broker_messages)
            tables.extend(bench_replication.tables(repl_rows, failovers))
        if "reassign" in only:
            print("== 12. reassign: moving a topic between brokers, unthrottled and throttled; produce latency",
                  flush=True)
            from bench import reassign as bench_reassign

            phases = bench_reassign.run(env, args.reassign_mb or (64 if args.quick else 1024),
                                        args.reassign_throttle_mb)
            tables.extend(bench_reassign.tables(phases))
    # The last two sections bring their own ZooKeeper, broker (and SparkSession) and print their own tables.
    late: list[Callable[[], None]] = []
    if "apache" in only:  # first of the late ones: its SparkSession needs a JVM started with spark.jars
        print("== 10. apache: the metaq broker beside Apache Kafka; metaq's Spark source beside Spark's", flush=True)
        apache_results = bench_apache.run(args.apache_messages or plan.apache_messages, apache_parts,
                                           args.apache_fetch_rounds)
        targets += bench_apache.targets(apache_results)
        late.append(lambda: bench_apache.print_tables(apache_results))
    if "cleaner" in only:
        print("== 12. cleaner: metaq's log cleaner beside Apache Kafka's; produce while cleaning", flush=True)
        from bench import cleaner as bench_cleaner

        cleaner_results = bench_cleaner.run(args.cleaner_keys or (50_000 if args.quick else 1_000_000),
                                            100_000 if args.quick else 300_000, args.cleaner_io_rate,
                                            args.cleaner_produce_only)
        targets += bench_cleaner.targets(cleaner_results)
        late.append(lambda: bench_cleaner.print_tables(cleaner_results))
    if "offsets" in only:
        print("== 5. offsets channel vs ZooKeeper storage; standard-client group stabilisation", flush=True)
        from bench import offsets as bench_offsets

        offset_rows = bench_offsets.run(*((60, 10, 3) if args.quick else ()))
        late.append(lambda: bench_offsets.print_table(offset_rows))
    if "spark" in only:
        print("== 6. Spark batch read and micro-batches (local[2])", flush=True)
        from bench import spark as bench_spark

        spark_rows = bench_spark.run(*((200_000, 12, 1) if args.quick else ()))
        late.append(lambda: bench_spark.print_table(spark_rows))
    if "security" in only:
        print("== 7. consumer throughput over PLAINTEXT, SSL and SASL_SSL; connection set-up", flush=True)
        from bench import consumer_security as bench_consumer_security
        from bench import security as bench_security

        security_results = bench_consumer_security.run(*((100_000, 1, 10) if args.quick else ()))
        late.append(lambda: bench_consumer_security.print_tables(*security_results))
        late.append(lambda: bench_security.run(*((20_000, 10) if args.quick else (100_000, 50))))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{'=' * 100}\nmetaq bench{' --quick' if args.quick else ''}: {time.monotonic() - started:.0f} s on "
          f"{os.cpu_count()} CPUs (load average at the end: {load})")
    for title, (header, rows) in tables:
        print_table(header, rows, title)
    for printer in late:
        printer()
    print_targets(targets)


if __name__ == "__main__":
    main()
