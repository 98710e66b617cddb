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
   metrics.enabled=false), alternated (bench/throughput.py);
1c. producer: confluent-kafka and metaq.Producer 100-byte produce (1M messages each, both with batch.size
   1,000,000, librdkafka's default) in alternating order, five rounds, with each round's metaq / confluent
   ratios of msgs/s and CPU and their medians (--only producer); then 1d: both clients with acks=all,
   enable.idempotence false and true, interleaved: the broker's CPU for idempotence (bench/producer_ratio.py);
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
   rounds (medians; bench/transactional.py; --only transactions).
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
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import apache as bench_apache
from bench import consumer as bench_consumer
from bench import rebalance as bench_rebalance
from bench import rebalance_kafka as bench_rebalance_kafka
from bench import scale as bench_scale
from bench.environment import environment
from bench.producer_ratio import (
    PRODUCER_MESSAGES,
    idempotence_table,
    producer_ratio_table,
    producer_targets,
    run_idempotence,
    run_producer_ratio,
)
from bench.tables import print_table
from bench.targets import Target, print_targets
from bench.throughput import METRICS_MESSAGES, broker_metrics_table, broker_table, run_broker, run_broker_metrics
from bench.transactional import run_transactions, transactions_table


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
