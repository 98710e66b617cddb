"""Consumer throughput: metaq's stream iterator and listeners against kafka-python and confluent-kafka.

    python -m bench.consumer [--messages 1000000] [--partitions 4]     # standalone (own ZooKeeper and broker)

Every client reads the same pre-produced topic (100-byte values, null keys, spread evenly over a few
partitions) from the same broker, each in a fresh process of its own (``python -m bench.consumer worker
KIND ...``), which prints one JSON line with what it measured. The rate counts the messages delivered
after the first delivery, over the time from the first delivery to the last: connection set-up, group
registration and the first fetch are left out for every client alike. Each loop reads every value (its
length is summed and checked). ``cpu`` is the consumer process's CPU time (all threads) in that interval.

The metaq stream iterator and batch listener also run with ``metrics.enabled=false``, each right after its
metrics-on run, so that the metrics' cost shows side by side (``metrics_table``).

Compressed topics: the same messages produced with ``compression.type`` lz4 and zstd (one topic each), read
by the metaq stream iterator and batch listener and by confluent-kafka's poll() and consume(10000)
(``codec_table``, with each metaq path's ratio to its confluent-kafka counterpart on the same topic).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.clients import produce as produce_values
from bench.environment import Environment, environment
from bench.tables import Table, print_table
from bench.targets import Target
from metaq.childproc import die_with_parent

VALUE_SIZE = 100
WORKER_TIMEOUT_S = 300.0


# -- what a worker measures ----------------------------------------------------------------------------------


class Meter:
    """Counts deliveries; the clock starts at the first one and stops when ``target`` messages are in."""

    def __init__(self, target: int, value_size: int = VALUE_SIZE) -> None:
        self.target = target
        self.value_size = value_size
        self.count = 0
        self.nbytes = 0
        self.first_count = 0
        self.t_first = 0.0
        self.t_last = 0.0
        self.cpu_first = 0.0
        self.cpu_last = 0.0
        self.done = threading.Event()

    def add(self, n: int, nbytes: int) -> bool:
        """Record ``n`` messages delivered now; True once the target is reached."""
        if self.count == 0:
            self.t_first = time.perf_counter()
            self.cpu_first = time.process_time()
            self.first_count = n
        self.count += n
        self.nbytes += nbytes
        if self.count >= self.target and not self.done.is_set():
            self.t_last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.done.set()
        return self.count >= self.target

    def result(self) -> dict[str, Any]:
        if self.nbytes != self.count * self.value_size:
            raise AssertionError(f"read {self.nbytes} value bytes in {self.count} messages, "
                                 f"expected {self.value_size} each")
        return {"messages": self.count, "timed": self.count - self.first_count,
                "seconds": self.t_last - self.t_first, "cpu": self.cpu_last - self.cpu_first}


@dataclass
class WorkerArgs:
    zk: str
    bootstrap: str
    topic: str
    partitions: int
    messages: int
    work_dir: Path
    metrics: bool = True
    value_size: int = VALUE_SIZE


def metaq_properties(args: WorkerArgs, group: str) -> dict[str, Any]:
    return {"group.id": group, "zookeeper.connect": args.zk, "auto.offset.reset": "smallest",
            "metaq.recover.dir": str(args.work_dir / "recover"), "metrics.enabled": args.metrics}


def run_metaq_stream(args: WorkerArgs) -> Meter:
    """metaq's 0.8 stream iterator: one stream, every partition, ``for message in stream``."""
    from metaq.consumer import Consumer

    meter = Meter(args.messages, args.value_size)
    with Consumer(metaq_properties(args, f"bench-stream-{os.getpid()}")) as consumer:
        [stream] = consumer.create_message_streams({args.topic: 1})[args.topic]
        add = meter.add
        for message in stream:
            if add(1, len(message.value)):
                break
    return meter


class _CountingListener:
    """A MetaQ MessageListener that only counts."""

    executor = None

    def __init__(self, meter: Meter) -> None:
        self._add = meter.add

    def receive_message(self, message: Any) -> None:
        self._add(1, len(message.value))


class _CountingBatchListener:
    """A MetaQ batch-delivery listener that only counts."""

    executor = None

    def __init__(self, meter: Meter) -> None:
        self._add = meter.add

    def receive_messages(self, batch: list[Any]) -> None:
        self._add(len(batch), sum(len(m.value) for m in batch))


def _run_metaq_listener(args: WorkerArgs, listener_class: Callable[[Meter], Any], name: str) -> Meter:
    from metaq.consumer.listener import MessageConsumer

    meter = Meter(args.messages, args.value_size)
    consumer = MessageConsumer(metaq_properties(args, f"bench-{name}-{os.getpid()}"))
    consumer.subscribe(args.topic, 1 << 20, listener_class(meter)).complete_subscribe()
    try:
        if not meter.done.wait(WORKER_TIMEOUT_S):
            raise TimeoutError(f"{name}: {meter.count} of {meter.target} messages in {WORKER_TIMEOUT_S}s")
    finally:
        consumer.shutdown()
    return meter


def run_metaq_listener(args: WorkerArgs) -> Meter:
    """MetaQ's MessageListener: ``receive_message`` per message on the dispatch thread."""
    return _run_metaq_listener(args, _CountingListener, "listener")


def run_metaq_batch_listener(args: WorkerArgs) -> Meter:
    """MetaQ's batch-delivery listener: ``receive_messages`` per fetched chunk (max_size 1 MiB)."""
    return _run_metaq_listener(args, _CountingBatchListener, "batch-listener")


def run_kafka_python(args: WorkerArgs) -> Meter:
    """kafka-python's KafkaConsumer, assigned every partition, iterated."""
    from kafka import KafkaConsumer, TopicPartition

    meter = Meter(args.messages, args.value_size)
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=int(WORKER_TIMEOUT_S * 1000))
    consumer.assign([TopicPartition(args.topic, p) for p in range(args.partitions)])
    add = meter.add
    for message in consumer:
        if add(1, len(message.value)):
            break
    consumer.close()
    return meter


def _confluent(args: WorkerArgs) -> Any:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": f"bench-confluent-{os.getpid()}",
        "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    consumer.assign([confluent_kafka.TopicPartition(args.topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(args.partitions)])
    return consumer


def run_confluent_poll(args: WorkerArgs) -> Meter:
    """confluent-kafka's Consumer in assign mode, ``poll()`` one message at a time."""
    meter = Meter(args.messages, args.value_size)
    consumer = _confluent(args)
    add = meter.add
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error() is not None:
            raise RuntimeError(str(message.error()))
        if add(1, len(message.value())):
            break
    consumer.close()
    return meter


def run_confluent_consume(args: WorkerArgs) -> Meter:
    """confluent-kafka's Consumer in assign mode, ``consume(10000)`` batches."""
    meter = Meter(args.messages, args.value_size)
    consumer = _confluent(args)
    add = meter.add
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while time.monotonic() < deadline:
        batch = consumer.consume(10000, 1.0)
        if not batch:
            continue
        nbytes = 0
        for message in batch:
            if message.error() is not None:
                raise RuntimeError(str(message.error()))
            nbytes += len(message.value())
        if add(len(batch), nbytes):
            break
    consumer.close()
    return meter


@dataclass(frozen=True)
class Client:
    key: str
    label: str
    run: Callable[[WorkerArgs], Meter]


CLIENTS = [
    Client("metaq-stream", "metaq stream iterator", run_metaq_stream),
    Client("metaq-listener", "metaq listener (per message)", run_metaq_listener),
    Client("metaq-batch-listener", "metaq listener (batches)", run_metaq_batch_listener),
    Client("kafka-python", "kafka-python KafkaConsumer (iterating)", run_kafka_python),
    Client("confluent-poll", "confluent-kafka poll()", run_confluent_poll),
    Client("confluent-consume", "confluent-kafka consume(10000)", run_confluent_consume),
]
BY_KEY = {c.key: c for c in CLIENTS}

BATCH_LISTENER_TARGET = 0.9
"""metaq's batch listener >= 0.9x confluent-kafka's consume(10000), uncompressed and on every codec of CODECS."""
RATIOS = [
    # (numerator, denominator, target)
    ("metaq-stream", "kafka-python", 2.0),
    ("metaq-stream", "confluent-poll", 0.8),  # the consumer throughput target
    ("metaq-batch-listener", "confluent-consume", BATCH_LISTENER_TARGET),
    ("metaq-listener", "kafka-python", None),
    ("metaq-listener", "confluent-poll", 0.8),
]
METRICS_OFF = ("metaq-stream", "metaq-batch-listener")
"""Also run with metrics.enabled=false, to show what the metrics cost."""
CODECS = ("lz4", "zstd")
"""Compressed topics: the same messages, produced with these compression.type values."""
CODEC_CLIENTS = ["metaq-stream", "metaq-batch-listener", "confluent-poll", "confluent-consume"]
CODEC_RATIOS = [("metaq-stream", "confluent-poll"), ("metaq-batch-listener", "confluent-consume")]


# -- the parent: data, workers, table ------------------------------------------------------------------------


@dataclass
class Result:
    client: Client
    messages: int
    rates: list[float]
    cpus: list[float]  # CPU seconds per 1M messages
    metrics: bool = True
    codec: str = "none"

    @property
    def rate(self) -> float:
        """The best of the repetitions (noise on a shared machine only ever slows a run down)."""
        return max(self.rates)

    @property
    def cpu_per_m(self) -> float:
        return min(self.cpus)


def produce(bootstrap: str, topic: str, partitions: int, messages: int, codec: str = "none") -> None:
    """``messages`` 100-byte values, round-robin over the partitions, with confluent-kafka."""
    produce_values({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1000000,
                    "queue.buffering.max.messages": 2000000, "acks": 1, "compression.type": codec}, topic,
                   b"v" * VALUE_SIZE, messages, partitions)


def run_worker(kind: str, args: WorkerArgs) -> dict[str, Any]:
    """One client in a fresh process; returns its JSON report."""
    cmd = [sys.executable, "-m", "bench.consumer", "worker", kind, "--zk", args.zk, "--bootstrap", args.bootstrap,
           "--topic", args.topic, "--partitions", str(args.partitions), "--messages", str(args.messages),
           "--work-dir", str(args.work_dir), "--value-size", str(args.value_size),
           *(() if args.metrics else ("--metrics-off",))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S + 60,
                          preexec_fn=die_with_parent(), cwd=Path(__file__).resolve().parent.parent)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {kind} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def measure(args: WorkerArgs, repeat: int = 1, clients: list[str] | None = None,
            report: Callable[[str], None] = print, codec: str = "none") -> list[Result]:
    """Each client ``repeat`` times over the topic in ``args`` (already produced), in rounds (every client once
    per round, those in METRICS_OFF a second time with metrics off, first in odd rounds), so that a change in
    the machine's load affects every client alike."""
    chosen = [c for c in CLIENTS if clients is None or c.key in clients]
    variants = {c.key: (True, False) if c.key in METRICS_OFF and codec == "none" else (True,) for c in chosen}
    results = {(c.key, m): Result(c, args.messages, [], [], m, codec) for c in chosen for m in variants[c.key]}
    for round_ in range(repeat):
        for client in chosen:
            for metrics in variants[client.key][::-1] if round_ % 2 else variants[client.key]:
                out = run_worker(client.key, replace(args, metrics=metrics))
                result = results[client.key, metrics]
                result.rates.append(out["timed"] / out["seconds"])
                result.cpus.append(out["cpu"] / out["timed"] * 1e6)
                label = client.label if metrics else f"{client.label}, metrics off"
                label = label if codec == "none" else f"{label}, {codec}"
                report(f"  {label}: {result.rates[-1]:,.0f} msgs/s, {result.cpus[-1]:.2f} CPU s/1M msgs")
    return list(results.values())


def table(results: list[Result]) -> Table:
    header = ["consumer (1 process)", "messages", "msgs/s", "CPU s/1M msgs"]
    rows = [[r.client.label, f"{r.messages:,}", f"{r.rate:,.0f}", f"{r.cpu_per_m:.2f}"] for r in results
            if r.metrics and r.codec == "none"]
    return header, rows


def codec_table(results: list[Result]) -> Table:
    """Per compressed topic: each client's rate and CPU, and each metaq path's ratio to its confluent-kafka
    counterpart on that topic."""
    by_key = {(r.codec, r.client.key): r for r in results if r.metrics}
    counterpart = dict(CODEC_RATIOS)
    header = ["consumer (1 process)", "codec", "msgs/s", "CPU s/1M msgs", "ratio to confluent", "CPU/msg ratio"]
    rows = []
    for r in results:
        if r.codec == "none" or not r.metrics:
            continue
        other = by_key.get((r.codec, counterpart.get(r.client.key, "")))
        ratio = "-" if other is None else f"{r.rate / other.rate:.2f}x ({BY_KEY[other.client.key].label})"
        cpu = "-" if other is None else f"{r.cpu_per_m / other.cpu_per_m:.2f}x"
        rows.append([r.client.label, r.codec, f"{r.rate:,.0f}", f"{r.cpu_per_m:.2f}", ratio, cpu])
    return header, rows


def targets(results: list[Result]) -> list[Target]:
    """The batch listener over consume(10000) on each topic (uncompressed and each codec)."""
    by_key = {(r.codec, r.client.key): r for r in results if r.metrics}
    return [Target(f"batch listener/confluent consume(10000) msgs/s ({codec})",
                   by_key[codec, "metaq-batch-listener"].rate / by_key[codec, "confluent-consume"].rate,
                   BATCH_LISTENER_TARGET)
            for codec in ("none", *CODECS)
            if (codec, "metaq-batch-listener") in by_key and (codec, "confluent-consume") in by_key]


def metrics_table(results: list[Result]) -> Table:
    """The clients measured with metrics on and off, side by side; cost = CPU on / CPU off - 1."""
    on = {r.client.key: r for r in results if r.metrics and r.codec == "none"}
    header = ["consumer (1 process)", "msgs/s on", "msgs/s off", "CPU s/1M on", "CPU s/1M off", "CPU cost"]
    rows = [[r.client.label, f"{on[r.client.key].rate:,.0f}", f"{r.rate:,.0f}", f"{on[r.client.key].cpu_per_m:.2f}",
             f"{r.cpu_per_m:.2f}", f"{on[r.client.key].cpu_per_m / r.cpu_per_m - 1:+.1%}"]
            for r in results if not r.metrics and r.codec == "none"]
    return header, rows


def ratio_table(results: list[Result]) -> Table:
    by_key = {r.client.key: r for r in results if r.metrics and r.codec == "none"}
    header = ["ratio", "value", "target", "met", "CPU/msg ratio"]
    rows = []
    for num, den, target in RATIOS:
        if num not in by_key or den not in by_key:
            continue
        value = by_key[num].rate / by_key[den].rate
        met = "-" if target is None else ("yes" if value >= target else "NO")
        rows.append([f"{BY_KEY[num].label} / {BY_KEY[den].label}", f"{value:.2f}x",
                     "-" if target is None else f">= {target}x", met,
                     f"{by_key[num].cpu_per_m / by_key[den].cpu_per_m:.2f}x"])
    return header, rows


def prepare(bootstrap: str, layout: Any, topic: str, partitions: int, messages: int, codec: str = "none") -> float:
    """Create and fill the topic; returns the seconds the produce took."""
    from metaq.broker.topics import create_topic
    from metaq.testing.broker import topic_leaders
    from metaq.testing.wait import wait_until

    create_topic(layout, topic, partitions)
    wait_until(lambda: len(topic_leaders(bootstrap, topic)) == partitions, 20, f"topic {topic}")
    t0 = time.perf_counter()
    produce(bootstrap, topic, partitions, messages, codec)
    return time.perf_counter() - t0


def run(env: Environment, messages: int, partitions: int, repeat: int = 1,
        clients: list[str] | None = None, codecs: tuple[str, ...] = CODECS) -> list[Result]:
    """The uncompressed topic with every client (or ``clients``), then one topic per codec in ``codecs`` with
    CODEC_CLIENTS (those of them in ``clients``)."""
    results: list[Result] = []
    for codec in ("none", *codecs):
        topic = "bench-consume" if codec == "none" else f"bench-consume-{codec}"
        chosen = clients if codec == "none" else [c for c in CODEC_CLIENTS if clients is None or c in clients]
        if chosen is not None and not chosen:
            continue
        seconds = prepare(env.bootstrap, env.layout, topic, partitions, messages, codec)
        print(f"  produced {messages:,} x {VALUE_SIZE} B on {partitions} partitions in {seconds:.1f}s"
              f"{'' if codec == 'none' else f' ({codec})'}", flush=True)
        args = WorkerArgs(env.zk, env.bootstrap, topic, partitions, messages, env.work_dir)
        results += measure(args, repeat, chosen, report=lambda line: print(line, flush=True), codec=codec)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("worker", help="(internal) run one client and print its JSON report")
    worker.add_argument("kind", choices=list(BY_KEY))
    worker.add_argument("--zk", required=True)
    worker.add_argument("--bootstrap", required=True)
    worker.add_argument("--topic", required=True)
    worker.add_argument("--partitions", type=int, required=True)
    worker.add_argument("--messages", type=int, required=True)
    worker.add_argument("--work-dir", type=Path, required=True)
    worker.add_argument("--metrics-off", action="store_true", help="metrics.enabled=false")
    worker.add_argument("--value-size", type=int, default=VALUE_SIZE, help="bytes of every value (checked)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--clients", default=None, help="comma-separated subset of " + ",".join(BY_KEY))
    parser.add_argument("--codecs", default=",".join(CODECS), help="compressed topics too (comma-separated; '' none)")
    args = parser.parse_args()
    if args.command == "worker":
        wargs = WorkerArgs(args.zk, args.bootstrap, args.topic, args.partitions, args.messages, args.work_dir,
                           metrics=not args.metrics_off, value_size=args.value_size)
        meter = BY_KEY[args.kind].run(wargs)
        print(json.dumps(meter.result()), flush=True)
        os._exit(0)  # do not wait for the clients' background threads
    clients = args.clients.split(",") if args.clients else None
    with environment() as env:
        codecs = tuple(c for c in args.codecs.split(",") if c)
        results = run(env, args.messages, args.partitions, args.repeat, clients, codecs)
        print_table(*table(results), title="Consumer throughput")
        print_table(*metrics_table(results), title="Metrics on and off")
        print_table(*ratio_table(results), title="Ratios")
        if codecs:
            print_table(*codec_table(results), title="Compressed topics")


if __name__ == "__main__":
    main()
