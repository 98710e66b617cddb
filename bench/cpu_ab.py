"""CPU seconds per 1M messages of this checkout's broker and metaq.Producer against a baseline commit's, in
alternating rounds of one run (``--baseline``), or of this checkout alone.

    python -m bench.cpu_ab [--baseline REV] [--parts broker,producer] [--messages 300000] [--rounds 4]
                           [--batch-records 135] [--profile DIR]

On a loaded machine rates move with the load; the CPU a process spends per message moves far less, and
alternating the two versions in one run exposes both to the same load. The baseline's ``metaq`` and
``zk_layout`` are exported (``git archive``) into a temporary directory beside a copy of this ``bench``, and
its processes run from there (a child's working directory comes first on its ``sys.path``).

- ``broker``: one broker of each version on the same ZooKeeper. Each round, on each broker (the order reversed
  every other round): confluent-kafka produces N x 100 B to a new one-partition topic with
  ``batch.num.messages`` = ``--batch-records`` (about 135 records per Produce request, as at a fixed moderate
  rate with linger.ms 5: docs/performance.md), then a confluent-kafka consumer reads it back (consume(10000), a
  fresh process). The broker's CPU (``/proc/<pid>/stat`` utime+stime) over each job, per 1M messages.
- ``producer``: metaq.Producer of each version (a fresh process each) sends N x 100 B to one partition (acks=1,
  linger.ms 5, batch.size 1,000,000, the producer section's settings) on the current broker; its process CPU
  from the first send to the end of flush(), per 1M messages.
- ``--profile DIR``: py-spy (on ``PATH`` or beside this Python; not a dependency of metaq) samples the current
  broker during one extra produce and one extra fetch job, and the current producer during one extra run;
  raw collapsed stacks go to DIR and the top functions by own and inclusive samples are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.apache import proc_cpu
from bench.clients import CONFLUENT_BATCH_SIZE, send_all
from bench.consumer import WorkerArgs, run_worker
from bench.environment import Environment, environment
from bench.tables import print_table
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.childproc import die_with_parent
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until

REPO = Path(__file__).resolve().parent.parent
PARTS = ("broker", "producer")
VALUE = b"x" * 100
WORKER_TIMEOUT_S = 600.0


@dataclass
class Version:
    """One version under test: a label and the directory its processes run in (its ``metaq`` first on their
    ``sys.path``)."""

    label: str
    root: Path
    broker: BrokerProcess | None = None


@dataclass
class Runs:
    """CPU seconds per 1M messages (and msgs/s) of each (version, job), in run order."""

    cpu: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    rate: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, label: str, job: str, messages: int, seconds: float, cpu: float) -> None:
        self.cpu.setdefault((label, job), []).append(cpu / messages * 1e6)
        self.rate.setdefault((label, job), []).append(messages / seconds if seconds > 0 else float("nan"))
        print(f"  {label:>9} {job:<34} {messages / seconds:>10,.0f} msgs/s {cpu / messages * 1e6:6.2f} CPU s/1M"
              f"  (load {os.getloadavg()[0]:.1f})", flush=True)


def export(rev: str, into: Path) -> Path:
    """``metaq`` and ``zk_layout`` of ``rev``, and this checkout's ``bench``, under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "metaq", "zk_layout"], check=True,
                             capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.copytree(REPO / "bench", into / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    return into


@contextmanager
def in_directory(path: Path) -> Iterator[None]:
    """BrokerProcess starts ``python -m metaq`` in the current directory: the baseline's is its export."""
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def new_topic(env: Environment, broker: BrokerProcess, name: str) -> str:
    create_topic(env.layout, name, 1, assignment={0: [broker.broker_id]})
    wait_until(lambda: len(topic_leaders(broker.bootstrap, name)) == 1, 30, f"topic {name}")
    return name


def small_request_produce(bootstrap: str, topic: str, messages: int, batch_records: int) -> None:
    """confluent-kafka, acks=1, linger.ms 5, at most ``batch_records`` records per batch (one partition: one
    batch per Produce request)."""
    send_all(confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": CONFLUENT_BATCH_SIZE, "acks": 1,
        "batch.num.messages": batch_records, "queue.buffering.max.messages": 2_000_000}), topic, VALUE, messages)


def broker_jobs(env: Environment, version: Version, messages: int, batch_records: int, runs: Runs,
                tag: str) -> None:
    """Produce in small requests, then fetch it back; the broker's CPU over each."""
    broker = version.broker
    assert broker is not None and broker.pid is not None
    topic = new_topic(env, broker, f"ab-{tag}-{version.label}")
    cpu0, t0 = proc_cpu([broker.pid]), time.perf_counter()
    small_request_produce(broker.bootstrap, topic, messages, batch_records)
    runs.add(version.label, f"produce ({batch_records} records/request)", messages, time.perf_counter() - t0,
             proc_cpu([broker.pid]) - cpu0)
    cpu0 = proc_cpu([broker.pid])
    out = run_worker("confluent-consume", WorkerArgs(env.zk, broker.bootstrap, topic, 1, messages, env.work_dir))
    runs.add(version.label, "fetch (confluent consume(10000))", messages, out["seconds"] * messages / out["timed"],
             proc_cpu([broker.pid]) - cpu0)


def producer_worker(bootstrap_zk: str, topic: str, messages: int) -> dict[str, float]:
    """metaq.Producer as the producer section runs it; CPU and time from the first timed send to flush()."""
    from metaq import Producer

    with Producer({"zookeeper.connect": bootstrap_zk, "linger.ms": 5, "batch.size": CONFLUENT_BATCH_SIZE,
                   "acks": 1}) as producer:
        producer.send(topic, VALUE, partition=0)
        producer.flush()  # connected, metadata read
        send = producer.send
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(messages):
            send(topic, VALUE, partition=0)
        producer.flush()
        return {"cpu": time.process_time() - cpu0, "seconds": time.perf_counter() - t0}


def run_producer(env: Environment, version: Version, topic: str, messages: int,
                 profile: Path | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.cpu_ab", "producer-worker", env.zk, topic, str(messages)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=version.root,
                            preexec_fn=die_with_parent())
    with sampled(proc.pid, profile):
        out, err = proc.communicate(timeout=WORKER_TIMEOUT_S)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"producer worker ({version.label}) failed ({proc.returncode}):\n{err[-3000:]}")
    return dict(json.loads(lines[-1]))


# -- py-spy -----------------------------------------------------------------------------------------------------------

def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy); it is not a dependency of metaq")
    return found


@contextmanager
def sampled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy record of ``pid`` (all threads, idle ones left out) into ``out`` (raw collapsed stacks)."""
    if out is None:
        yield
        return
    spy = subprocess.Popen([py_spy(), "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)
        spy.wait(60)


WAITING = frozenset({
    "Condition.wait (threading.py)", "_worker (thread.py)", "PollHandler.select (zkclient.py)",
    "EpollSelector.select (selectors.py)", "TerminationHandler._watch (signals.py)", "Event.wait (threading.py)",
    "Queue.get (queue.py)",
})
"""Leaf frames of a thread that waits (py-spy's idle detection misses some on a loaded machine)."""


def _frame(raw: str) -> str:
    """``Class.function (file.py)`` of py-spy's ``Class.function (path/file.py:line)``."""
    name, _, where = raw.rpartition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})"


def summarise(path: Path, top: int = 25) -> None:
    """Own and inclusive samples per function of py-spy's raw output (``frame;frame;... count`` lines), waiting
    threads left out."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        if not frames or frames[-1] in WAITING:
            continue
        total += n
        own[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    print(f"\n  {path.name}: {total} samples")
    rows = [[name, f"{n / total:.1%}", f"{inclusive[name] / total:.1%}"] for name, n in own.most_common(top)]
    print_table(["function (own samples)", "own", "inclusive"], rows)
    rows = [[name, f"{n / total:.1%}"] for name, n in inclusive.most_common(top * 2)]
    print_table(["function (inclusive samples)", "inclusive"], rows)


# -- the run ----------------------------------------------------------------------------------------------------------

def run(baseline: str | None, parts: tuple[str, ...], messages: int, rounds: int, batch_records: int,
        profile: Path | None) -> Runs:
    runs = Runs()
    tmp = Path(tempfile.mkdtemp(prefix="metaq-bench-ab-"))
    try:
        versions = [Version("current", REPO)]
        if baseline:
            versions.insert(0, Version("base", export(baseline, tmp / "base")))
        with environment() as env:
            versions[-1].broker = env.broker
            for i, version in enumerate(versions[:-1], start=1):
                with in_directory(version.root):
                    version.broker = BrokerProcess(env.zk, i, env.work_dir, log_level="WARNING").start()
            try:
                _rounds(env, versions, parts, messages, rounds, batch_records, runs)
                if profile is not None:
                    _profile(env, versions[-1], parts, messages, batch_records, profile)
            finally:
                for version in versions[:-1]:
                    if version.broker is not None:
                        version.broker.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return runs


def _rounds(env: Environment, versions: list[Version], parts: tuple[str, ...], messages: int, rounds: int,
            batch_records: int, runs: Runs) -> None:
    for round_ in range(rounds):
        order = versions[::-1] if round_ % 2 else versions
        print(f"  -- round {round_ + 1} (load average {', '.join(f'{x:.1f}' for x in os.getloadavg())})", flush=True)
        if "broker" in parts:
            for version in order:
                broker_jobs(env, version, messages, batch_records, runs, f"r{round_}")
        if "producer" in parts:
            for version in order:
                topic = new_topic(env, env.broker, f"ab-producer-r{round_}-{version.label}")
                out = run_producer(env, version, topic, messages)
                runs.add(version.label, "metaq.Producer send+flush (client)", messages, out["seconds"], out["cpu"])


def _profile(env: Environment, current: Version, parts: tuple[str, ...], messages: int, batch_records: int,
             out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    broker = current.broker
    assert broker is not None and broker.pid is not None
    files = []
    if "broker" in parts:
        topic = new_topic(env, broker, "ab-profile")
        files.append(out / "broker-produce.txt")
        with sampled(broker.pid, files[-1]):
            small_request_produce(broker.bootstrap, topic, messages, batch_records)
        files.append(out / "broker-fetch.txt")
        with sampled(broker.pid, files[-1]):
            run_worker("confluent-consume", WorkerArgs(env.zk, broker.bootstrap, topic, 1, messages, env.work_dir))
    if "producer" in parts:
        files.append(out / "producer.txt")
        run_producer(env, current, new_topic(env, broker, "ab-profile-producer"), messages, files[-1])
    for path in files:
        summarise(path)


def report(runs: Runs) -> None:
    jobs = list(dict.fromkeys(job for _, job in runs.cpu))
    labels = list(dict.fromkeys(label for label, _ in runs.cpu))
    rows = []
    for job in jobs:
        medians = {label: statistics.median(runs.cpu[label, job]) for label in labels if (label, job) in runs.cpu}
        cells = [job]
        for label in labels:
            cpus = runs.cpu.get((label, job), [])
            cells.append(f"{medians[label]:.2f} ({' '.join(f'{c:.2f}' for c in cpus)})" if cpus else "-")
        if "base" in medians and "current" in medians:
            cells.append(f"{medians['current'] / medians['base'] - 1:+.1%}")
        rows.append(cells)
    header = ["job", *(f"{label} CPU s/1M median (runs)" for label in labels)]
    if "base" in labels:
        header.append("change")
    print_table(header, rows, "CPU seconds per 1M messages (medians of alternating rounds)")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "producer-worker":
        print(json.dumps(producer_worker(argv[1], argv[2], int(argv[3]))), flush=True)
        return
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="a git revision to compare with (default: this checkout alone)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-records", type=int, default=135, help="records per Produce request (broker part)")
    parser.add_argument("--profile", type=Path, help="py-spy the current version into this directory")
    args = parser.parse_args(argv)
    parts = tuple(p for p in args.parts.split(",") if p)
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")
    t0 = time.monotonic()
    runs = run(args.baseline, parts, args.messages, args.rounds, args.batch_records, args.profile)
    report(runs)
    print(f"\n{os.cpu_count()} CPUs, load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
