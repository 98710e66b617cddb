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

The sizes of ``--kafka-sizes`` (100 x 10,000) are measured again, on the same topics and in the same run, with
``group.coordination=kafka`` (the broker's group coordinator; JoinGroup/SyncGroup) and the eager ``range`` and
the incremental ``cooperative-sticky`` assignors (session 10 s, heartbeat 3 s): settle time as above (a member
counts as busy while a round runs or a rejoin is pending: cooperative-sticky's second round), rounds per member,
partitions paused (handed to a fetcher again after the change: all of them when eager) and moved, and where
the time of the rounds went (KAFKA_STEPS: JoinGroup, the leader's assignment, SyncGroup, OffsetFetch; the most
calls one member made and the slowest call). ``--initial-rebalance-delay-ms`` sets the broker's
``group.initial.rebalance.delay.ms`` (metaq's default 0; Kafka's 3000 batches a burst of joins into one round).

Also: ``ZooKeeperOffsetStore`` fencing (``take_ownership``) and commit of 10,000 partitions (all changed).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from typing import Any

from bench.scale_counters import instrumented
from bench.scale_offsets import OFFSET_HEADER, OffsetRow, measure_offsets
from bench.scale_phases import HEADER, MODE_HEADER, Phase, measure_group
from bench.scale_settings import (
    KAFKA_MODES,
    KAFKA_SIZES,
    PROCESSES,
    SIZES,
    ZOOKEEPER,
)
from bench.tables import Table
from zk_layout import ZkLayout

__all__ = ["PROCESSES", "SIZES", "main", "run", "tables"]

log = logging.getLogger(__name__)

# -- running it ------------------------------------------------------------------------------------------------


def run(zk: str, layout: ZkLayout, broker_id: int, sizes: list[tuple[int, int]], reps: int,
        offsets_partitions: tuple[int, ...] = (1_000, 10_000), report: Callable[[str], None] = print,
        processes: int = PROCESSES, kafka_sizes: tuple[tuple[int, int], ...] = KAFKA_SIZES,
        kafka_modes: tuple[str, ...] = KAFKA_MODES) -> tuple[list[Phase], list[OffsetRow]]:
    """Every size with ZooKeeper coordination, then those of ``kafka_sizes`` also in each of KAFKA_MODES
    (same topics, one group per mode), then the offset rows."""
    phases: list[Phase] = []
    offsets: list[OffsetRow] = []
    report("  " + " | ".join(HEADER))
    with instrumented():
        for rep in range(reps):
            for members, partitions in sizes:
                modes = (ZOOKEEPER, *kafka_modes) if (members, partitions) in kafka_sizes else (ZOOKEEPER,)
                for mode in modes:
                    phases.extend(measure_group(zk, layout, broker_id, members, partitions, rep, report,
                                                min(processes, members), mode))
    for rep in range(reps):
        for partitions in offsets_partitions:
            rows = measure_offsets(layout, partitions, rep)
            for row in rows:
                report("  " + " | ".join(row.cells()))
            offsets.extend(rows)
    return phases, offsets


def tables(phases: list[Phase], offsets: list[OffsetRow]) -> list[tuple[str, Table]]:
    zookeeper = [p for p in phases if p.mode == ZOOKEEPER]
    compared = {(p.members, p.partitions) for p in phases if p.mode != ZOOKEEPER}
    by_mode = [p for p in phases if (p.members, p.partitions) in compared]
    mode_table = [("   Group scale by coordination, same run (target: <= 5 s; cooperative-sticky pauses only what "
                   "moves; paused: partitions handed to a fetcher again after the change)",
                   (MODE_HEADER, [p.mode_cells() for p in by_mode]))] if by_mode else []
    return [
        ("7. Group scale: settle time after the last join / a leave, every run (targets at 100 x 10,000: <= 5 s, "
         "<= 2 attempts per member)", (HEADER, [p.cells() for p in zookeeper])),
        *mode_table,
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
    parser.add_argument("--kafka-sizes", default=",".join(f"{n}x{p}" for n, p in KAFKA_SIZES),
                        help="NxP,... of --sizes also measured with group.coordination=kafka, eager and cooperative")
    parser.add_argument("--kafka-modes", default=",".join(KAFKA_MODES), help="of: " + ", ".join(KAFKA_MODES))
    parser.add_argument("--initial-rebalance-delay-ms", type=int, default=None,
                        help="the broker's group.initial.rebalance.delay.ms (metaq's default 0, Kafka's 3000)")
    parser.add_argument("--offsets", default="1000,10000", help="partitions of the fence/commit rows, comma separated")
    args = parser.parse_args()
    logging.basicConfig(level=os.environ.get("METAQ_BENCH_LOG_LEVEL", "WARNING"))
    from bench.environment import environment
    from bench.tables import print_table

    def configure(_zk: str, broker: Any, _work: Any) -> None:
        if args.initial_rebalance_delay_ms is not None:
            broker.properties["group.initial.rebalance.delay.ms"] = args.initial_rebalance_delay_ms

    with environment(configure) as env:
        phases, offsets = run(env.zk, env.layout, env.broker.broker_id, parse_sizes(args.sizes) if args.sizes else [],
                              args.reps, tuple(int(x) for x in args.offsets.split(",") if x),
                              processes=args.processes,
                              kafka_sizes=tuple(parse_sizes(args.kafka_sizes)) if args.kafka_sizes else (),
                              kafka_modes=tuple(m for m in args.kafka_modes.split(",") if m))
    for title, (header, rows) in tables(phases, offsets):
        if rows:
            print_table(header, rows, title)


if __name__ == "__main__":
    main()
