"""Consumer-group scale: N members x P partitions, rebalance settle time, attempts, ZooKeeper ops, conflicts.

    python -m bench.scale [--sizes 10x1000,50x5000,100x10000] [--reps 2]   # its own ZooKeeper and broker

Every member is a real :class:`metaq.consumer.Consumer` on a thread, each with its own ZooKeeper session (the
embedded ZooKeeper child process), all in one group subscribed to P partitions
(``P / 1000`` topics of 1,000 partitions each: one topic's nodes are created in one ZooKeeper transaction,
and 1,000 is what fits). The rebalance needs only ZooKeeper: the registered broker (one real broker
process) and the topics' nodes. The fetchers are not started: a member counts as fetching again when its
fetcher is handed its partitions (``FetcherManager.start_connections`` is replaced by a recorder), because
100 members fetching 10,000 partitions from one broker on a shared 2-CPU machine measure the broker, not the
rebalance (tried: the broker stopped answering within 30 s).

Phases, each measured from a membership change until every partition is owned (the members' registries
are disjoint and cover all P) and fetching again (each member's fetcher was started on exactly its
registry), and nothing is pending (no rebalance running or triggered):

- join: all N members start at once (a burst); the clock starts at the last registration;
- leave: one member (the middle one, so that most ranges shift) shuts down cleanly; the clock starts at
  its shutdown call.

Counted per phase: rebalance attempts per member (max and mean; for the join, those after the last
registration and in the whole burst), ZooKeeper requests made by rebalances (a multi-op counts as one;
per attempt), owner-claim conflicts (attempts whose claim found nodes in the way, and partitions in the
way), CPU seconds of this process (all members) and wall seconds. The owner nodes in ZooKeeper are
checked against the members' registries at the end of each phase.

Where the members run: ``--processes K`` spreads them over K worker processes (members are threads there),
as the members of a real group are separate processes; 0 runs them all on threads of this process, where
100 members share one interpreter lock, and their rebalances queue behind each other for it.

Also: ``ZooKeeperOffsetStore`` fencing (``take_ownership``) and commit of 10,000 partitions (all changed).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.scale_counters import instrumented
from bench.scale_group import TOPIC_PARTITIONS, ScaleGroup
from bench.scale_offsets import OFFSET_HEADER, OffsetRow, measure_offsets
from metaq.broker.topics import create_topic
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

SIZES = ((10, 1_000), (50, 5_000), (100, 10_000))
PROCESSES = 4  # worker processes the members are spread over (see above)


@dataclass
class Phase:
    kind: str
    members: int
    partitions: int
    settle_s: float
    attempts_max: int
    attempts_mean: float
    attempts_burst_max: int
    zk_requests: int
    zk_ops: int
    rebalance_attempts: int
    conflict_attempts: int
    conflict_partitions: int
    cpu_s: float
    wall_s: float
    processes: int = 0

    @property
    def requests_per_attempt(self) -> float:
        return self.zk_requests / max(self.rebalance_attempts, 1)

    def cells(self) -> list[str]:
        burst = f" ({self.attempts_burst_max} in burst)" if self.kind == "join" else ""
        return [f"{self.members} x {self.partitions:,}", str(self.processes or "this one"), self.kind,
                f"{self.settle_s:.2f}",
                f"{self.attempts_max}{burst}", f"{self.attempts_mean:.1f}",
                f"{self.requests_per_attempt:,.0f}", f"{self.zk_ops / max(self.rebalance_attempts, 1):,.0f}",
                f"{self.conflict_attempts} / {self.conflict_partitions:,}", f"{self.cpu_s:.1f}",
                f"{self.wall_s:.1f}"]


HEADER = ["N x P", "member processes", "change", "settle s", "attempts/member max", "mean", "ZK requests/attempt",
          "ZK ops/attempt", "conflicts (attempts / partitions)", "CPU s", "wall s"]


def _phase(kind: str, group: ScaleGroup, members: int, dumps: list[dict[str, Any]], t0: float, since: float,
           settled_at: float, cpu0: float, wall0: float) -> Phase:
    """The phase's figures from every host's counters (``cpu0``: their CPU time summed at the start)."""
    attempts = [times for dump in dumps for times in dump["attempts"].values()]
    per_member = [len([t for t in times if t >= t0]) for times in attempts]
    burst = [len([t for t in times if t >= since]) for times in attempts]
    requests = len([t for dump in dumps for t in dump["zk_requests"] if t >= since])
    conflicts = [n for dump in dumps for t, n in dump["conflicts"] if t >= since]
    live = [n for n in per_member if n] or [0]
    return Phase(kind, members, group.partitions, settled_at - t0, max(live),
                 statistics.mean(per_member) if per_member else 0.0, max(burst or [0]), requests,
                 sum(dump["zk_ops"] for dump in dumps), sum(burst), len(conflicts), sum(conflicts),
                 sum(dump["cpu"] for dump in dumps) - cpu0, time.monotonic() - wall0, len(group.workers))


def measure_group(zk: str, layout: ZkLayout, broker_id: int, members: int, partitions: int, rep: int,
                  report: Callable[[str], None] = print, processes: int = 0) -> list[Phase]:
    """One join burst and one leave for ``members`` x ``partitions``."""
    topics = []
    for i in range(max(1, partitions // TOPIC_PARTITIONS)):
        name = f"scale-{members}x{partitions}-{rep}-{i}"
        if name not in layout.topics():
            create_topic(layout, name, TOPIC_PARTITIONS, assignment={p: [broker_id]
                                                                     for p in range(TOPIC_PARTITIONS)})
        topics.append(name)
    group = ScaleGroup(zk, topics, len(topics) * TOPIC_PARTITIONS, f"scale-{members}x{partitions}-{rep}-{os.getpid()}",
                       processes)
    phases = []
    try:
        cpu0 = sum(dump["cpu"] for dump in group.counters(reset=True))
        wall0 = since = time.monotonic()
        group.join(members)
        last_join = max(t for dump in group.counters() for t in dump["registered"].values())
        settled_at = group.wait_settled()
        dumps = group.counters(reset=True)
        phases.append(_phase("join", group, len(group), dumps, last_join, since, settled_at, cpu0, wall0))
        group.check_owner_nodes(layout)
        report("  " + " | ".join(phases[-1].cells()))
        cpu0 = sum(dump["cpu"] for dump in dumps)
        wall0 = t0 = time.monotonic()
        group.leave(len(group) // 2)
        settled_at = group.wait_settled()
        phases.append(_phase("leave", group, len(group) + 1, group.counters(), t0, t0, settled_at, cpu0,
                             wall0))
        group.check_owner_nodes(layout)
        report("  " + " | ".join(phases[-1].cells()))
    finally:
        group.stop()
    return phases


# -- running it ------------------------------------------------------------------------------------------------


def run(zk: str, layout: ZkLayout, broker_id: int, sizes: list[tuple[int, int]], reps: int,
        offsets_partitions: tuple[int, ...] = (1_000, 10_000), report: Callable[[str], None] = print,
        processes: int = PROCESSES) -> tuple[list[Phase], list[OffsetRow]]:
    phases: list[Phase] = []
    offsets: list[OffsetRow] = []
    report("  " + " | ".join(HEADER))
    with instrumented():
        for rep in range(reps):
            for members, partitions in sizes:
                phases.extend(measure_group(zk, layout, broker_id, members, partitions, rep, report,
                                            min(processes, members)))
    for rep in range(reps):
        for partitions in offsets_partitions:
            rows = measure_offsets(layout, partitions, rep)
            for row in rows:
                report("  " + " | ".join(row.cells()))
            offsets.extend(rows)
    return phases, offsets


def tables(phases: list[Phase], offsets: list[OffsetRow]) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    return [
        ("7. Group scale: settle time after the last join / a leave, every run (targets at 100 x 10,000: <= 5 s, "
         "<= 2 attempts per member)", (HEADER, [p.cells() for p in phases])),
        ("   ZooKeeper offsets at scale, every run (targets: commit of 10,000 <= 1 s; fence <= 0.2 ms/partition)",
         (OFFSET_HEADER, [r.cells() for r in offsets])),
    ]


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        n, _, p = item.strip().partition("x")
        sizes.append((int(n), int(p)))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(f"{n}x{p}" for n, p in SIZES), help="NxP,...")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--processes", type=int, default=PROCESSES,
                        help="worker processes the members are spread over (0: threads of this process)")
    parser.add_argument("--offsets", default="1000,10000", help="partitions of the fence/commit rows, comma separated")
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("METAQ_BENCH_LOG_LEVEL", "WARNING"))
    from bench.environment import environment
    from bench.tables import print_table

    with environment() as env:
        phases, offsets = run(env.zk, env.layout, env.broker.broker_id, parse_sizes(args.sizes) if args.sizes else [],
                              args.reps, tuple(int(x) for x in args.offsets.split(",")), processes=args.processes)
    for title, (header, rows) in tables(phases, offsets):
        print_table(header, rows, title)


if __name__ == "__main__":
    main()
