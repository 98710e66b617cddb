"""The broker half of ``metaq demo``: a few broker processes behind a replicated topic, the SIGKILL of the
one that leads the most partitions while the group keeps consuming, its restart, and the figures the
summary reports (partitions whose leader moved, how long until a new leader acknowledged an acks=all
produce and until the group read a record produced after the failover, when the broker was back in the ISR).

    brokers = DemoBrokers(zk, work, count=3).start()
    brokers.kill_busiest(layout, "demo", partitions)  # then poll() once a tick; restart() later
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaq.broker.process import BrokerProcess
from metaq.config import Properties
from metaq.errors import MetaqError
from zk_layout import PartitionState, ZkLayout

# replicas re-fetch soon after an error, so the restarted broker catches up (and rejoins the ISR) quickly
BROKER_PROPERTIES = {"replica.fetch.backoff.ms": 200}


@dataclass
class Failover:
    """One broker's SIGKILL and return, in ``time.monotonic()`` seconds (comparable across processes)."""

    victim: int
    pid: int | None
    killed_at: float
    led: dict[int, int] = field(default_factory=dict)  # partition -> leader before the kill (the victim's)
    moved: dict[int, int] = field(default_factory=dict)  # partition -> its new leader
    elected_at: float | None = None
    restarted_at: float | None = None
    restart_error: str | None = None
    rejoined_at: float | None = None

    def produce_resumed(self, acked_at: Mapping[tuple[int, int], float]) -> float | None:
        """Seconds from the kill to the first acknowledgement, by a new leader, of a moved partition."""
        first = min(self._after_election(acked_at).values(), default=None)
        return None if first is None else first - self.killed_at

    def read_resumed(self, events: Iterable[Mapping[str, Any]],
                     acked_at: Mapping[tuple[int, int], float]) -> float | None:
        """Seconds from the kill to the first time the group read, from a moved partition, a record that a
        new leader acknowledged (so it was produced after the failover and fetched from the new leader)."""
        fresh = self._after_election(acked_at)
        for e in events:  # in time order
            if e["name"] == "records_consumed" and any(
                    (part["partition"], o) in fresh for part in e["partitions"]
                    for o in range(part["minOffset"], part["maxOffset"] + 1)):
                return float(e["time"]) - self.killed_at
        return None

    def _after_election(self, acked_at: Mapping[tuple[int, int], float]) -> dict[tuple[int, int], float]:
        if self.elected_at is None:
            return {}
        return {k: t for k, t in acked_at.items() if k[0] in self.moved and t >= self.elected_at}


class DemoBrokers:
    """``count`` broker processes (ids 0..count-1) on one ZooKeeper, and at most one failover of them."""

    def __init__(self, zk_connect: str, work_dir: Path, count: int,
                 properties: Properties | None = None) -> None:
        props = {**BROKER_PROPERTIES, **(properties or {})} if count > 1 else dict(properties or {})
        self.brokers = [BrokerProcess(zk_connect, i, work_dir, log_level="WARNING", properties=props)
                        for i in range(count)]
        self.failover: Failover | None = None

    def start(self) -> DemoBrokers:
        for broker in self.brokers:
            broker.start()
        return self

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def kill_busiest(self, layout: ZkLayout, topic: str, partitions: int) -> Failover:
        """SIGKILL the broker that leads the most partitions of ``topic`` (the lowest id on a tie)."""
        leaders = {p: s.leader for p, s in _states(layout, topic, partitions).items() if s is not None}
        counts = Counter(leaders.values())
        victim = min(counts, key=lambda b: (-counts[b], b))
        broker = self.brokers[victim]
        pid = broker.pid
        killed_at = time.monotonic()
        broker.kill()
        self.failover = Failover(victim, pid, killed_at, led={p: b for p, b in leaders.items() if b == victim})
        return self.failover

    def poll(self, layout: ZkLayout, topic: str, partitions: int) -> list[str]:
        """Advance the failover from what ZooKeeper says now; returns the news worth printing."""
        f = self.failover
        if f is None:
            return []
        now = time.monotonic()
        states = _states(layout, topic, partitions)
        news = []
        if f.elected_at is None:
            new = {p: s.leader for p, s in states.items() if p in f.led and s is not None
                   and s.leader not in (f.victim, -1)}
            if len(new) == len(f.led):
                f.elected_at, f.moved = now, new
                moves = ", ".join(f"p{p} {f.victim}->{b}" for p, b in sorted(new.items()))
                news.append(f"*** leaders moved off broker {f.victim} {now - f.killed_at:.1f}s after the kill: "
                            f"{moves}")
        if f.restarted_at is not None and f.rejoined_at is None and f.restart_error is None:
            if all(s is not None and f.victim in s.isr for s in states.values()):
                f.rejoined_at = now
                news.append(f"*** broker {f.victim} is back in the ISR of all {partitions} partitions "
                            f"({now - f.restarted_at:.1f}s after its restart)")
        return news

    def restart(self) -> str:
        """Start the killed broker again, on its port and data (it truncates to the high watermark and
        catches up from the leaders). On this thread, though the live view waits for the start: a child
        process dies with the thread that started it (PR_SET_PDEATHSIG, metaq/childproc.py), so a helper
        thread would kill the broker as it ends."""
        f = self.failover
        assert f is not None and f.restarted_at is None
        f.restarted_at = time.monotonic()  # the rejoin is timed from here, the process start included
        broker = self.brokers[f.victim]
        try:
            broker.start()
        except MetaqError as e:  # the demo fails: the broker is not back in the ISR
            f.restart_error = str(e).splitlines()[0]
            return f"*** broker {f.victim} did not start again: {f.restart_error}"
        return f"*** restarted broker {f.victim} at {broker.bootstrap}; it catches up as a follower"

    def leaders_view(self, layout: ZkLayout, topic: str, partitions: int) -> str:
        """``0:3 1:down 2:5``: partitions each broker leads (``down`` while it is killed)."""
        counts = Counter(s.leader for s in _states(layout, topic, partitions).values() if s is not None)
        f = self.failover
        down = f.victim if f is not None and f.restarted_at is None else None
        return " ".join(f"{b.broker_id}:{'down' if b.broker_id == down else counts[b.broker_id]}"
                        for b in self.brokers)


def _states(layout: ZkLayout, topic: str, partitions: int) -> dict[int, PartitionState | None]:
    return {p: s for (_t, p), s in layout.partition_states((topic, p) for p in range(partitions)).items()}
