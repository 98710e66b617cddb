"""bench.scale's phases: one join burst and one leave of a group, and their figures."""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.scale_group import ScaleGroup
from bench.scale_members import Settled
from bench.scale_settings import (
    KAFKA_STEPS,
    TOPIC_PARTITIONS,
    ZOOKEEPER,
)
from metaq.broker.topics import create_topic
from zk_layout import ZkLayout

# -- the phases ----------------------------------------------------------------------------------------------


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
    mode: str = ZOOKEEPER
    paused: int = 0  # partitions handed to a fetcher again after the change (stopped, then started)
    moved: int = 0  # partitions whose owner after the change differs from the one before
    steps: str = ""  # group.coordination=kafka: where the time went (see KAFKA_STEPS)

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


    def mode_cells(self) -> list[str]:
        return [f"{self.members} x {self.partitions:,}", self.mode, self.kind, f"{self.settle_s:.2f}",
                str(self.attempts_max), f"{self.paused:,}", f"{self.moved:,}", f"{self.cpu_s:.1f}",
                f"{self.wall_s:.1f}", self.steps or "-"]


MODE_HEADER = ["N x P", "coordination/assignor", "change", "settle s", "rounds/member max", "paused", "moved",
               "CPU s", "wall s", "kafka steps: calls/member max, slowest call s"]
HEADER = ["N x P", "member processes", "change", "settle s", "attempts/member max", "mean", "ZK requests/attempt",
          "ZK ops/attempt", "conflicts (attempts / partitions)", "CPU s", "wall s"]


def _phase(kind: str, group: ScaleGroup, members: int, dumps: list[dict[str, Any]], t0: float, since: float,
           settled: Settled, cpu0: float, wall0: float, before: Settled | None = None) -> Phase:
    """The phase's figures from every host's counters (``cpu0``: their CPU time summed at the start)."""
    attempts = [times for dump in dumps for times in dump["attempts"].values()]
    per_member = [len([t for t in times if t >= t0]) for times in attempts]
    burst = [len([t for t in times if t >= since]) for times in attempts]
    requests = len([t for dump in dumps for t in dump["zk_requests"] if t >= since])
    conflicts = [n for dump in dumps for t, n in dump["conflicts"] if t >= since]
    live = [n for n in per_member if n] or [0]
    moved = settled.moved_from(before) if before is not None else group.partitions
    steps = _steps(dumps, since)
    return Phase(kind, members, group.partitions, settled.at - t0, max(live),
                 statistics.mean(per_member) if per_member else 0.0, max(burst or [0]), requests,
                 sum(dump["zk_ops"] for dump in dumps), sum(burst), len(conflicts), sum(conflicts),
                 sum(dump["cpu"] for dump in dumps) - cpu0, time.monotonic() - wall0, len(group.workers), group.mode,
                 settled.paused_since(t0), moved, steps)


STEP_NAMES = {"_join": "JoinGroup", "_assign": "assign", "_sync": "SyncGroup", "_fetch_offsets": "OffsetFetch"}


def _steps(dumps: list[dict[str, Any]], since: float) -> str:
    """Per GroupMember step since ``since``: the most calls one member made and the slowest call."""
    cells = []
    for step in KAFKA_STEPS:
        calls = [(member, d) for dump in dumps for member, t, d in dump.get("steps", {}).get(step, []) if t >= since]
        if calls:
            per_member: dict[str, int] = defaultdict(int)
            for member, _ in calls:
                per_member[member] += 1
            cells.append(f"{STEP_NAMES[step]} {max(per_member.values())}x {max(d for _, d in calls):.2f}")
    return ", ".join(cells)


def measure_group(zk: str, layout: ZkLayout, broker_id: int, members: int, partitions: int, rep: int,
                  report: Callable[[str], None] = print, processes: int = 0, mode: str = ZOOKEEPER) -> list[Phase]:
    """One join burst and one leave for ``members`` x ``partitions``, coordinated as ``mode`` says."""
    topics = []
    for i in range(max(1, partitions // TOPIC_PARTITIONS)):
        name = f"scale-{members}x{partitions}-{rep}-{i}"
        if name not in layout.topics():
            create_topic(layout, name, TOPIC_PARTITIONS, assignment={p: [broker_id]
                                                                     for p in range(TOPIC_PARTITIONS)})
        topics.append(name)
    group = ScaleGroup(zk, topics, len(topics) * TOPIC_PARTITIONS,
                       f"scale-{members}x{partitions}-{rep}-{mode.replace('/', '-')}-{os.getpid()}", processes, mode)
    cells = Phase.cells if mode == ZOOKEEPER else Phase.mode_cells
    phases = []
    try:
        cpu0 = sum(dump["cpu"] for dump in group.counters(reset=True))
        wall0 = since = time.monotonic()
        group.join(members)
        last_join = max(t for dump in group.counters() for t in dump["registered"].values())
        before = group.wait_settled()
        dumps = group.counters(reset=True)
        phases.append(_phase("join", group, len(group), dumps, last_join, since, before, cpu0, wall0))
        if mode == ZOOKEEPER:
            group.check_owner_nodes(layout)
        report("  " + " | ".join(cells(phases[-1])))
        cpu0 = sum(dump["cpu"] for dump in dumps)
        wall0 = t0 = time.monotonic()
        group.leave(len(group) // 2)
        after = group.wait_settled()
        phases.append(_phase("leave", group, len(group) + 1, group.counters(), t0, t0, after, cpu0, wall0,
                             before))
        if mode == ZOOKEEPER:
            group.check_owner_nodes(layout)
        report("  " + " | ".join(cells(phases[-1])))
    finally:
        group.stop()
    return phases
