"""Reassignment: moving a topic of ``--reassign-mb`` (default 1,024 MiB) between brokers, its time and rate, and
the produce latency of a steady acks=all producer on another topic whose replicas are the two brokers involved,
before any move, during an unthrottled move (broker 0 -> 1) and during a move back throttled to
``--reassign-throttle-mb`` MB/s (default 20; broker 1 -> 0, ``--throttle`` as ``metaq topics reassign`` sets it:
docs/reassignment.md).
The load average is read at the end of each phase (the machine is shared: it says how busy it was).

Brokers 1 and 2 are started for this section on the shared environment's ZooKeeper (broker 0 is the shared
broker) and stopped after it; the moves are written as ``metaq topics reassign --zookeeper`` writes them
(metaq.admin.reassignment) and the controller carries them out.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from bench.clients import send_all
from bench.environment import Environment
from metaq.admin import reassign_throttle as throttling
from metaq.admin import reassignment as plans
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until

PARTITIONS = 4
VALUE = b"r" * 1000
PROBE_RATE = 200  # records/s of the latency probe
BASELINE_S = 10.0
FAST_REPLICAS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200}


@dataclass
class Phase:
    name: str
    seconds: float  # the move's duration (the baseline's length without a move)
    moved_bytes: int
    throttle: int | None  # bytes/s
    latencies_ms: list[float]
    load: tuple[float, float, float]

    def cells(self) -> list[str]:
        ordered = sorted(self.latencies_ms) or [float("nan")]

        def pct(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        rate = f"{self.moved_bytes / self.seconds / 1e6:.1f}" if self.moved_bytes else "-"
        return [self.name, f"{self.moved_bytes / 2**20:,.0f}" if self.moved_bytes else "-", f"{self.seconds:.1f}",
                rate, f"{self.throttle / 1e6:.1f}" if self.throttle else "-", f"{len(self.latencies_ms):,}",
                f"{pct(0.5):.1f}", f"{pct(0.99):.1f}", f"{ordered[-1]:.1f}",
                " ".join(f"{x:.2f}" for x in self.load)]


class Probe:
    """confluent-kafka, acks=all, ``PROBE_RATE`` 100-byte records/s to one partition; each delivery's latency is
    kept in the list of the phase it was sent in."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                                   "enable.idempotence": False})
        self._topic = topic
        self._stop = threading.Event()
        self.current: list[float] = []
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="bench-reassign-probe", daemon=True)

    def _run(self) -> None:
        interval = 1.0 / PROBE_RATE
        next_at = time.monotonic()
        while not self._stop.is_set():
            sink, sent = self.current, time.monotonic()

            def done(err: Any, _msg: Any, sink: list[float] = sink, sent: float = sent) -> None:
                if err is None:
                    sink.append((time.monotonic() - sent) * 1000)
                else:
                    self.failed += 1

            self._producer.produce(self._topic, b"p" * 100, partition=0, on_delivery=done)
            next_at += interval
            while (wait := next_at - time.monotonic()) > 0:  # poll returns early when it served a delivery
                self._producer.poll(wait)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def phase(self) -> list[float]:
        """Start a new phase; the previous phase's latencies (deliveries still due may add a few)."""
        previous, self.current = self.current, []
        return previous

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(60)


def _log_bytes(brokers: list[BrokerProcess], broker_id: int, topic: str) -> int:
    base = brokers[broker_id].data_dir / f"logs-{broker_id}"
    return sum(f.stat().st_size for p in range(PARTITIONS) for f in (base / f"{topic}-{p}").glob("*.log"))


def _move(env: Environment, topic: str, source: int, target: int, throttle: int | None) -> float:
    """Move every partition of ``topic`` from ``source`` to ``target``; seconds until --verify says completed
    (which then clears the throttles)."""
    plan = {(topic, p): (target,) for p in range(PARTITIONS)}
    configs = throttling.ZooKeeperThrottleConfigs(env.layout)

    def throttled(current: plans.Plan) -> None:
        if throttle is not None:
            throttling.set_throttles(configs, throttling.reassignment_throttles(current, plan), throttle)

    started = time.monotonic()
    plans.execute(env.layout, plan, throttled)
    wait_until(lambda: set(plans.verify(env.layout, plan).values()) == {plans.COMPLETED}, 3600,
               f"{topic} moved to broker {target}", interval=0.2)
    seconds = time.monotonic() - started
    throttling.clear_throttles(configs, plan)
    return seconds


def run(env: Environment, megabytes: int, throttle_mb: float = 20.0) -> list[Phase]:
    brokers = [env.broker]
    probe: Probe | None = None
    try:
        for i in (1, 2):
            brokers.append(BrokerProcess(env.zk, i, env.work_dir, log_level="WARNING",
                                         properties=FAST_REPLICAS).start())
        data, probe_topic = "reassign-data", "reassign-probe"
        create_topic(env.layout, data, PARTITIONS, assignment={p: [0] for p in range(PARTITIONS)})
        create_topic(env.layout, probe_topic, 1, assignment={0: [0, 1]}, config={"min.insync.replicas": "2"})
        for name in (data, probe_topic):
            wait_until(lambda name=name: len(topic_leaders(env.bootstrap, name)) >= 1, 30, f"{name} served")
        print(f"  filling {megabytes} MiB ...", flush=True)
        send_all(confluent_kafka.Producer({"bootstrap.servers": env.bootstrap, "linger.ms": 20,
                                           "batch.size": 1_000_000, "queue.buffering.max.messages": 500_000}),
                 data, VALUE, megabytes * 2**20 // len(VALUE), PARTITIONS)
        size = _log_bytes(brokers, 0, data)
        probe = Probe(env.bootstrap, probe_topic).start()
        time.sleep(BASELINE_S)  # the baseline phase: the probe alone, for a fixed time
        phases = [Phase("no move", BASELINE_S, 0, None, probe.phase(), os.getloadavg())]
        print(f"  {' | '.join(phases[-1].cells())}", flush=True)
        seconds = _move(env, data, 0, 1, None)
        phases.append(Phase("move 0 -> 1, unthrottled", seconds, size, None, probe.phase(), os.getloadavg()))
        print(f"  {' | '.join(phases[-1].cells())}", flush=True)
        throttle = int(throttle_mb * 1e6)
        seconds = _move(env, data, 1, 0, throttle)
        phases.append(Phase("move 1 -> 0, throttled", seconds, size, throttle, probe.phase(), os.getloadavg()))
        print(f"  {' | '.join(phases[-1].cells())}", flush=True)
        probe.stop()
        if probe.failed:
            raise RuntimeError(f"{probe.failed} acks=all probe records failed during the moves")
        return phases
    finally:
        if probe is not None:
            probe.stop()
        for b in brokers[1:]:
            b.stop()


def tables(phases: list[Phase]) -> list[tuple[str, Any]]:
    header = ["phase", "MiB moved", "seconds", "MB/s", "throttle MB/s", "probe records", "p50 ms", "p99 ms",
              "max ms", "load avg 1/5/15"]
    return [(f"12. Reassignment: {PARTITIONS} partitions moved between brokers; produce latency of a {PROBE_RATE} "
             "records/s acks=all producer to a topic on both brokers (confluent-kafka, 100 B)",
             (header, [p.cells() for p in phases]))]
