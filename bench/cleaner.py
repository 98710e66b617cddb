"""The log cleaner beside Apache Kafka 3.9's, and produce throughput while it cleans (``--only cleaner``).

    python -m bench --only cleaner                       # 1,000,000 keys x 10 versions, 100 B values
    python -m bench --only cleaner --cleaner-keys 100000 # a quicker run on a tenth of the keys

1. **Cleaning cost.** The same records -- ``keys`` keys written ``VERSIONS`` times in turn, 100 B values, by
   confluent-kafka (acks=1, linger.ms 5, batch.size 1,000,000) -- go to a one-partition topic on the metaq broker
   and on Apache Kafka 3.9.2 as the test harness starts it (metaq/testing/apache_kafka.py; both brokers with a
   ``log.cleaner.dedupe.buffer.size`` of 32 MiB, one pass for up to 1.25M keys, and ``log.cleaner.backoff.ms``
   500). The topic is created ``cleanup.policy=delete`` with small segments (``segment.bytes``: a sixteenth of the
   data, 1-16 MiB), so nothing is cleaned while it fills; then IncrementalAlterConfigs sets ``compact`` and the
   broker's CPU (``/proc/<pid>/stat`` utime+stime) and the wall time are taken until its
   ``cleaner-offset-checkpoint`` (same file and format in both) reaches the active segment, i.e. every inactive
   segment is cleaned. MB/s and records/s are of the inactive segments' bytes and offsets over that wall time
   (it includes up to one backoff before the cleaner wakes); CPU seconds per GB of them is the figure to compare
   on a shared machine. Kafka's own stats line (``MB of log processed in ... seconds``) is shown beside it.
2. **Produce while cleaning** (metaq broker): confluent-kafka produce of N x 100 B to a plain topic, timed while the
   broker's cleaner is idle (twice), while it cleans a backlog (a compacted topic of ``keys`` x ``BACKLOG_VERSIONS``
   records switched to ``compact`` just before; rounds are counted only if its checkpoint had not reached the end
   when they finished), and idle again. The drop is one minus the median busy rate over the median idle rate.
   ``--cleaner-io-rate B`` sets the metaq broker's ``log.cleaner.io.max.bytes.per.second`` (default: unthrottled,
   as Kafka); ``--cleaner-produce-only`` skips part 1 (no Kafka broker) to compare throttle settings quickly.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from bench.apache import proc_cpu
from bench.clients import CONFLUENT_BATCH_SIZE, confluent_produce
from bench.environment import environment
from bench.tables import print_table
from bench.targets import Target
from metaq.broker.log.cleaner.log_cleaner import CLEANER_CHECKPOINT
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.broker import topic_leaders
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

VERSIONS = 10
VALUE_SIZE = 100
RECORD_BYTES = VALUE_SIZE + 30
"""About what one record of this data takes in a batch (value, 12-byte key, varints), for sizing segments."""
DEDUPE_BUFFER = 32 << 20
BACKOFF_MS = 500
BROKER_PROPERTIES = {"log.cleaner.dedupe.buffer.size": DEDUPE_BUFFER, "log.cleaner.backoff.ms": BACKOFF_MS}
BACKLOG_VERSIONS = 3
PRODUCE_ROUNDS_IDLE = 2
PRODUCE_ROUNDS_BUSY = 3
CLEAN_TIMEOUT_S = 7200.0
_SEGMENT_LOG = re.compile(r"^(\d{20})\.log$")
_KAFKA_STATS = re.compile(r"Log cleaner thread \d+ cleaned log (?P<log>\S+) \(dirty section = \[\d+, \d+\]\)\s+"
                          r"(?P<mb>[\d,.]+) MB of log processed in (?P<s>[\d,.]+) seconds")


@dataclass
class Cleaning:
    """One broker's cleaning of the whole data set: inactive bytes and offsets cleaned, wall and CPU seconds,
    produce rate while filling, and (Kafka) what its own stats lines say: MB (MiB) and seconds summed."""

    broker: str
    log_bytes: int
    offsets: int
    wall_s: float
    cpu_s: float
    produce_rate: float
    own_mib: float | None = None
    own_s: float | None = None

    @property
    def cpu_per_gb(self) -> float:
        return self.cpu_s / (self.log_bytes / 1e9)

    def cells(self) -> list[str]:
        own = (f"{self.own_mib / self.own_s:,.1f} MiB/s ({self.own_mib:,.0f} MiB in {self.own_s:,.1f} s)"
               if self.own_mib is not None and self.own_s else "-")
        return [self.broker, f"{self.produce_rate:,.0f}", f"{self.log_bytes / 1e6:,.1f}", f"{self.offsets:,}",
                f"{self.wall_s:,.1f}", f"{self.log_bytes / 1e6 / self.wall_s:,.1f}",
                f"{self.offsets / self.wall_s:,.0f}", f"{self.cpu_s:,.1f}", f"{self.cpu_per_gb:,.1f}", own]


CLEANING_HEADER = ["broker", "fill msgs/s", "cleaned MB", "offsets", "wall s", "MB/s", "records/s", "CPU s",
                   "CPU s/GB", "broker's own stats"]


@dataclass
class ProduceRound:
    phase: str
    rate: float
    counted: bool = True


@dataclass
class CleanerResults:
    keys: int
    messages: int = 0
    io_rate: float | None = None
    cleanings: list[Cleaning] = field(default_factory=list)
    rounds: list[ProduceRound] = field(default_factory=list)
    load: list[str] = field(default_factory=list)

    def rate(self, phase: str) -> float | None:
        rates = [r.rate for r in self.rounds if r.phase == phase and r.counted]
        return statistics.median(rates) if rates else None


def _log(line: str) -> None:
    print(line, flush=True)


def _loadavg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


# -- brokers and their files ----------------------------------------------------------------------------------------

@dataclass
class Broker:
    """What this section needs of a broker: where to connect, its process, where its log directory is and how
    to create a topic with config overrides."""

    name: str
    bootstrap: str
    pid: int
    log_dir: Path
    make_topic: Callable[[str, dict[str, str]], None]

    def partition_dir(self, topic: str) -> Path:
        return self.log_dir / f"{topic}-0"

    def segments(self, topic: str) -> list[tuple[int, int]]:
        """(base offset, bytes) of each ``.log`` segment of partition 0, by base offset."""
        found = []
        for entry in os.scandir(self.partition_dir(topic)):
            match = _SEGMENT_LOG.match(entry.name)
            if match:
                try:
                    found.append((int(match.group(1)), entry.stat().st_size))
                except FileNotFoundError:
                    continue  # swapped away by the cleaner meanwhile
        return sorted(found)

    def cleaner_checkpoint(self, topic: str) -> int | None:
        """The partition's entry in ``cleaner-offset-checkpoint`` (version, count, then ``topic partition
        offset`` lines: the same file in Kafka and metaq)."""
        try:
            lines = (self.log_dir / CLEANER_CHECKPOINT).read_text().splitlines()
        except FileNotFoundError:
            return None
        for line in lines[2:]:
            parts = line.split()
            if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
                return int(parts[2])
        return None


def metaq_broker(broker: BrokerProcess, layout: ZkLayout) -> Broker:
    def make(name: str, config: dict[str, str]) -> None:
        create_topic(layout, name, 1, assignment={0: [broker.broker_id]}, config=config)
        wait_until(lambda: len(topic_leaders(broker.bootstrap, name)) == 1, 30, f"topic {name}")

    assert broker.pid is not None
    return Broker("metaq", broker.bootstrap, broker.pid, broker.data_dir / f"logs-{broker.broker_id}", make)


def kafka_broker(kafka: ApacheKafkaBroker) -> Broker:
    def make(name: str, config: dict[str, str]) -> None:
        kafka.create_topic(name, 1, 1, config)

    assert kafka.pid is not None
    return Broker(f"Kafka {kafka.version}", kafka.bootstrap, kafka.pid, kafka.dir / "data", make)


def set_compact(bootstrap: str, topic: str) -> None:
    """IncrementalAlterConfigs ``cleanup.policy=compact`` (Kafka's AdminClient call, answered by both brokers)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


# -- the data -------------------------------------------------------------------------------------------------------

def produce_versions(bootstrap: str, topic: str, keys: int, versions: int) -> float:
    """``keys`` keys ``versions`` times in turn (100 B values naming the version); the rate in msgs/s."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                         "batch.size": CONFLUENT_BATCH_SIZE,
                                         "queue.buffering.max.messages": 2000000, "acks": 1})
    names = [f"key-{k:08d}".encode() for k in range(keys)]
    started = time.perf_counter()
    for version in range(versions):
        value = f"{version}:".encode().ljust(VALUE_SIZE, b"v")
        for key in names:
            while True:
                try:
                    producer.produce(topic, value, key, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
    if producer.flush(300) != 0:
        raise RuntimeError(f"producing to {topic}: not every record was acknowledged")
    return keys * versions / (time.perf_counter() - started)


def segment_bytes(keys: int, versions: int) -> int:
    """A sixteenth of the data, between 1 and 16 MiB: enough inactive segments to clean."""
    return max(1 << 20, min(16 << 20, keys * versions * RECORD_BYTES // 16))


def _cleaned(broker: Broker, topic: str) -> bool:
    active = broker.segments(topic)[-1][0]
    checkpoint = broker.cleaner_checkpoint(topic)
    return checkpoint is not None and checkpoint >= active


def clean_all(broker: Broker, topic: str) -> tuple[int, int, float, float]:
    """Switch ``topic`` to ``compact`` and wait until every inactive segment is cleaned: (inactive bytes,
    offsets, wall seconds, broker CPU seconds)."""
    segments = broker.segments(topic)
    inactive_bytes, active_base = sum(size for _, size in segments[:-1]), segments[-1][0]
    cpu, wall = proc_cpu([broker.pid]), time.perf_counter()
    set_compact(broker.bootstrap, topic)
    wait_until(lambda: _cleaned(broker, topic), CLEAN_TIMEOUT_S, f"{broker.name} cleaning {topic}", interval=0.2)
    return inactive_bytes, active_base, time.perf_counter() - wall, proc_cpu([broker.pid]) - cpu


def kafka_stats(kafka: ApacheKafkaBroker, topic: str) -> tuple[float, float] | None:
    """MiB and seconds summed over Kafka's cleaner stats lines for ``topic``-0 (server.log: the harness's log4j
    sends every logger there)."""
    text = kafka.log_path.read_text(errors="replace")
    found = [m for m in _KAFKA_STATS.finditer(text) if m.group("log") == f"{topic}-0"]
    if not found:
        return None
    return (sum(float(m.group("mb").replace(",", "")) for m in found),
            sum(float(m.group("s").replace(",", "")) for m in found))


def measure_cleaning(broker: Broker, keys: int) -> Cleaning:
    topic = "cleaner-data"
    broker.make_topic(topic, {"cleanup.policy": "delete", "segment.bytes": str(segment_bytes(keys, VERSIONS))})
    _log(f"  {broker.name}: producing {keys:,} keys x {VERSIONS} (load average {_loadavg()})")
    rate = produce_versions(broker.bootstrap, topic, keys, VERSIONS)
    _log(f"  {broker.name}: {rate:,.0f} msgs/s; cleaning (load average {_loadavg()})")
    log_bytes, offsets, wall, cpu = clean_all(broker, topic)
    cleaning = Cleaning(broker.name, log_bytes, offsets, wall, cpu, rate)
    _log(f"  {broker.name}: cleaned {log_bytes / 1e6:,.1f} MB in {wall:,.1f} s, {cpu:,.1f} CPU s "
         f"({cleaning.cpu_per_gb:,.1f} CPU s/GB)")
    return cleaning


# -- produce while cleaning -----------------------------------------------------------------------------------------

def produce_while_cleaning(broker: Broker, keys: int, messages: int,
                           io_rate: float | None = None) -> list[ProduceRound]:
    """Idle rounds, busy rounds while a backlog is cleaned, an idle round after (see the module doc)."""
    backlog = "cleaner-backlog"
    broker.make_topic(backlog, {"cleanup.policy": "delete",
                                "segment.bytes": str(segment_bytes(keys, BACKLOG_VERSIONS))})
    produce_versions(broker.bootstrap, backlog, keys, BACKLOG_VERSIONS)
    rounds: list[ProduceRound] = []
    serial = 0

    def timed(phase: str) -> ProduceRound:
        nonlocal serial
        serial += 1
        topic = f"cleaner-produce-{serial}"
        broker.make_topic(topic, {})
        started = time.perf_counter()
        confluent_produce(broker.bootstrap, topic, b"p" * VALUE_SIZE, messages)
        produced = ProduceRound(phase, messages / (time.perf_counter() - started))
        if phase == "busy":
            produced.counted = not _cleaned(broker, backlog)
        _log(f"  produce {phase}: {produced.rate:,.0f} msgs/s{'' if produced.counted else ' (cleaning had ended)'}")
        rounds.append(produced)
        return produced

    for _ in range(PRODUCE_ROUNDS_IDLE):
        timed("idle")
    set_compact(broker.bootstrap, backlog)
    # a throttled cleaner reads the whole backlog for its offset map before it writes a .cleaned file
    wait_until(lambda: broker.cleaner_checkpoint(backlog) is not None or _cleaning_started(broker, backlog),
               60 if io_rate is None else CLEAN_TIMEOUT_S, "the cleaner starting on the backlog", interval=0.05)
    for _ in range(PRODUCE_ROUNDS_BUSY):
        if not timed("busy").counted:
            break
    wait_until(lambda: _cleaned(broker, backlog), CLEAN_TIMEOUT_S, "the backlog cleaned", interval=0.2)
    timed("idle")
    return rounds


def _cleaning_started(broker: Broker, topic: str) -> bool:
    """A ``.cleaned`` file in the partition: the cleaner is writing its first group."""
    return any(entry.name.endswith(".cleaned") for entry in os.scandir(broker.partition_dir(topic)))


# -- the section ----------------------------------------------------------------------------------------------------

def run(keys: int = 1_000_000, messages: int = 300_000, io_rate: float | None = None,
        produce_only: bool = False) -> CleanerResults:
    """Both parts on one ZooKeeper: a metaq broker (this run's) and a Kafka 3.9 broker beside it; ``io_rate``:
    the metaq broker's cleaner I/O limit in bytes/s (None: unthrottled)."""
    results = CleanerResults(keys, messages, io_rate=io_rate)

    def configure(zk: str, broker: BrokerProcess, work: Path) -> None:
        broker.properties.update(BROKER_PROPERTIES)
        if io_rate is not None:
            broker.properties["log.cleaner.io.max.bytes.per.second"] = str(io_rate)

    with environment(configure) as env:
        results.load.append(f"start: {_loadavg()}")
        metaq = metaq_broker(env.broker, env.layout)
        if produce_only:
            results.rounds = produce_while_cleaning(metaq, keys, messages, io_rate)
            results.load.append(f"after produce while cleaning: {_loadavg()}")
            return results
        results.cleanings.append(measure_cleaning(metaq, keys))
        zk_hosts = env.zk.split("/", 1)[0]
        with ApacheKafkaBroker(V3_9, zk_hosts=zk_hosts, base_dir=env.work_dir / "kafka",
                               properties=BROKER_PROPERTIES) as kafka:
            cleaning = measure_cleaning(kafka_broker(kafka), keys)
            stats = kafka_stats(kafka, "cleaner-data")
            if stats is not None:
                cleaning.own_mib, cleaning.own_s = stats
            results.cleanings.append(cleaning)
        results.load.append(f"after the cleanings: {_loadavg()}")
        results.rounds = produce_while_cleaning(metaq, keys, messages, io_rate)
        results.load.append(f"after produce while cleaning: {_loadavg()}")
    return results


def targets(results: CleanerResults) -> list[Target]:
    found: list[Target] = []
    by_name = {c.broker.split()[0]: c for c in results.cleanings}
    if "metaq" in by_name and "Kafka" in by_name:
        found.append(Target("cleaner CPU s/GB Kafka / metaq (metaq <= 2x Kafka's)",
                            by_name["Kafka"].cpu_per_gb / by_name["metaq"].cpu_per_gb, 0.5))
    idle, busy = results.rate("idle"), results.rate("busy")
    if idle and busy:
        found.append(Target("produce msgs/s while cleaning / idle, metaq (drop <= 20%)", busy / idle, 0.8))
    return found


def print_tables(results: CleanerResults) -> None:
    print_table(CLEANING_HEADER, [c.cells() for c in results.cleanings],
                f"Log cleaner: {results.keys:,} keys x {VERSIONS} versions, {VALUE_SIZE} B values, one partition "
                f"(dedupe buffer {DEDUPE_BUFFER >> 20} MiB; MB/s and records/s over the wall time from "
                f"cleanup.policy=compact to the checkpoint)")
    rows = [[r.phase, f"{r.rate:,.0f}", "yes" if r.counted else "no (cleaning had ended)"] for r in results.rounds]
    idle, busy = results.rate("idle"), results.rate("busy")
    if idle and busy:
        rows.append(["median busy / median idle", f"{busy / idle:.2f}x", f"drop {100 * (1 - busy / idle):.0f}%"])
    print_table(["phase", "msgs/s", "counted"], rows,
                f"Produce while cleaning (metaq broker, confluent-kafka, {results.messages:,} x {VALUE_SIZE} B, "
                f"acks=1; backlog {results.keys:,} keys x {BACKLOG_VERSIONS}; cleaner I/O "
                f"{'unthrottled' if results.io_rate is None else f'{results.io_rate:,.0f} B/s'})")
    print(f"load average: {'; '.join(results.load)}")
