"""Rebalance time on broker (Kafka group protocol) vs ZooKeeper coordination, eager vs incremental, same run.

    python -m bench.rebalance_kafka [--quick]    # standalone: its own ZooKeeper and broker
    python -m bench --only rebalance-kafka

Four group members (separate processes, ``python -m bench.rebalance_kafka worker``, metaq's stream iterator) on
a topic of 64 partitions with a steady trickle on every partition (bench/rebalance.py's ``Trickle``), in three
modes one after another on the same broker and ZooKeeper:

- ``zookeeper/range``: ``group.coordination=zookeeper`` (Kafka 0.8's algorithm; eager by design);
- ``kafka/range``: ``group.coordination=kafka``, the eager protocol: every member revokes everything before it
  rejoins;
- ``kafka/cooperative-sticky``: KIP-429: only the partitions that change owner are revoked, in a first round,
  and assigned in a second one (docs/broker-coordinated-consumer.md, "Incremental rebalancing").

The changes: a clean leave (SIGTERM: the member closes; with Kafka coordination it sends LeaveGroup) and a
clean join (the clock starts when the new process has built its consumer). Each worker prints JSON lines for
its ``before_release``/``lost``/``assigned`` hooks and for the first message of each partition after it was
assigned, so the parent knows, at any time, who owns what. Per change:

- assigned: until the last ``assigned`` hook of the change;
- fetching: until every partition that changed owner or paused delivered a message to its final owner;
- paused: partitions revoked by any member (``before_release``/``lost``) or owned by the member that left;
- moved: partitions whose owner after the change differs from the owner before it.

Target: with cooperative-sticky, paused == moved (kept partitions never stop); eager pauses all of them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import rebalance
from bench.environment import environment
from bench.rebalance import Trickle, consume_until_stopped
from bench.tables import Table, print_table
from bench.targets import Target

TOPIC = "bench-rebalance-kafka"
PARTITIONS = 64
MEMBERS = 4
MODES = ("zookeeper/range", "kafka/range", "kafka/cooperative-sticky")
STABLE_TIMEOUT_S = 120.0
POLL_S = 0.05
SETTLE_CONFIRM_S = 0.5
"""A settled state must still hold this much later: a second round (cooperative) or a second rebalance would
change an owner set or a member's hooks within it."""


# -- the worker (a group member in its own process) ----------------------------------------------------------


class _Reporter:
    """Prints the worker's hooks as JSON lines and the first message of each partition after it was assigned."""

    def __init__(self, consumer_id: str) -> None:
        self._lock = threading.Lock()
        self._consumer_id = consumer_id
        self._fresh: set[int] = set()

    def emit(self, name: str, **fields: Any) -> None:
        line = json.dumps({"e": name, "t": time.monotonic(), **fields})
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    # RebalanceListener
    def before_release(self, partitions: Mapping[str, set[int]]) -> None:
        released = sorted(partitions.get(TOPIC, set()))
        with self._lock:
            self._fresh -= set(released)
        self.emit("released", partitions=released)

    def lost(self, partitions: Mapping[str, set[int]]) -> None:
        gone = sorted(partitions.get(TOPIC, set()))
        with self._lock:
            self._fresh -= set(gone)
        self.emit("lost", partitions=gone)

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        # ZooKeeper mode names every member's partitions, Kafka mode only this member's (all of them when
        # eager, the added ones when cooperative): keep ours.
        mine = sorted(p for p, tid in assignment.get(TOPIC, {}).items() if tid.rsplit("-", 1)[0] == consumer_id)
        with self._lock:
            self._fresh |= set(mine)
        self.emit("assigned", partitions=mine)

    def rebalance_failed(self, error: Exception) -> None:
        self.emit("rebalance_failed", error=str(error))

    def consumed(self, partition: int) -> None:
        if partition not in self._fresh:
            return
        with self._lock:
            if partition not in self._fresh:
                return
            self._fresh.discard(partition)
        self.emit("first", partition=partition)


def worker(zk: str, group: str, mode: str, session_timeout_ms: int, heartbeat_ms: int) -> None:
    """One group member: consume until SIGTERM, reporting as described in the module docstring."""
    from metaq.consumer import Consumer

    logging.basicConfig(level=os.environ.get("METAQ_BENCH_LOG_LEVEL", "WARNING"), stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(threadName)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    coordination, strategy = mode.split("/")
    config: dict[str, Any] = {"group.id": group, "zookeeper.connect": zk, "consumer.timeout.ms": 100,
                              "auto.offset.reset": "largest", "group.coordination": coordination,
                              "partition.assignment.strategy": strategy}
    if coordination == "kafka":
        config.update({"session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": heartbeat_ms})
    else:
        config["zookeeper.session.timeout.ms"] = session_timeout_ms
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    holder: list[_Reporter] = []

    class _Listener:
        """Forwards to the reporter, which needs the consumer id the Consumer makes."""

        def before_release(self, partitions: Mapping[str, set[int]]) -> None:
            holder[0].before_release(partitions)

        def lost(self, partitions: Mapping[str, set[int]]) -> None:
            holder[0].lost(partitions)

        def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
            holder[0].assigned(consumer_id, assignment)

        def rebalance_failed(self, error: Exception) -> None:
            holder[0].rebalance_failed(error)

    consumer = Consumer(config, rebalance_listener=_Listener())
    reporter = _Reporter(consumer.consumer_id)
    holder.append(reporter)
    consume_until_stopped(consumer, reporter, TOPIC, stop)


# -- the parent ----------------------------------------------------------------------------------------------


class Member(rebalance.Member):
    """A worker process of this module, the events it printed, and what they say it owns."""

    def __init__(self, argv: list[str], log_dir: Path, name: str) -> None:
        super().__init__(argv, log_dir, name, module="bench.rebalance_kafka")

    def owned(self) -> tuple[set[int], set[int], int]:
        """(owned partitions, those not yet delivering since assigned, number of events) from the hooks."""
        owned: set[int] = set()
        waiting: set[int] = set()
        events = self.snapshot()
        for e in events:
            if e["e"] in ("released", "lost"):
                owned -= set(e["partitions"])
                waiting -= set(e["partitions"])
            elif e["e"] == "assigned":
                owned |= set(e["partitions"])
                waiting |= set(e["partitions"])
            elif e["e"] == "first":
                waiting.discard(e["partition"])
        return owned, waiting, len(events)


@dataclass
class Outcome:
    """One membership change, measured."""

    assigned_s: float
    fetching_s: float
    paused: int
    moved: int


@dataclass
class ModeResult:
    mode: str
    changes: dict[str, list[Outcome]] = field(default_factory=dict)


class Group(rebalance.MemberGroup[Member]):
    """The members of one mode's group and the check that it settled."""

    def __init__(self, zk: str, mode: str, session_timeout_ms: int, heartbeat_ms: int, work_dir: Path) -> None:
        super().__init__(zk, f"bench-rk-{mode.replace('/', '-')}-{os.getpid()}", session_timeout_ms, work_dir,
                         Member, mode=mode, heartbeat_ms=heartbeat_ms)

    def _state(self) -> tuple[dict[int, str], tuple[int, ...]] | str:
        """(partition -> member name, event counts) if the live members own every partition exactly once, each
        owns some and each owned partition delivers; otherwise what is missing."""
        owners: dict[int, str] = {}
        counts = []
        for member in self.members:
            owned, waiting, n = member.owned()
            counts.append(n)
            if not owned:
                return f"{member.name} owns nothing"
            if waiting:
                return f"{member.name} is not consuming from {sorted(waiting)}"
            for partition in owned:
                if partition in owners:
                    return f"partition {partition} owned by {owners[partition]} and {member.name}"
                owners[partition] = member.name
        if len(owners) != PARTITIONS:
            return f"{len(owners)} of {PARTITIONS} partitions owned"
        return owners, tuple(counts)

    def wait_settled(self, timeout: float = STABLE_TIMEOUT_S) -> dict[int, str]:
        deadline = time.monotonic() + timeout
        state: tuple[dict[int, str], tuple[int, ...]] | str = "not checked"
        while time.monotonic() < deadline:
            state = self._state()
            if not isinstance(state, str):
                time.sleep(SETTLE_CONFIRM_S)
                again = self._state()
                if again == state:
                    return state[0]
                state = again
            time.sleep(POLL_S)
        raise RuntimeError(f"{self.mode} group did not settle within {timeout}s: {state}")


def _outcome(members: list[Member], t0: float, before: Mapping[int, str], after: Mapping[int, str],
             leaver: Member | None) -> Outcome:
    paused: set[int] = set()
    assigned_at = t0
    fetching_at = t0
    for member in members:
        for e in member.snapshot():
            if e["t"] < t0:
                continue
            if e["e"] in ("released", "lost"):
                paused |= set(e["partitions"])
            elif e["e"] == "assigned":
                assigned_at = max(assigned_at, e["t"])
            elif e["e"] == "first":
                fetching_at = max(fetching_at, e["t"])
    if leaver is not None:
        paused |= {p for p, owner in before.items() if owner == leaver.name}
    moved = sum(1 for p, owner in after.items() if before.get(p) != owner)
    return Outcome(assigned_at - t0, fetching_at - t0, len(paused), moved)


def measure_mode(zk: str, mode: str, work_dir: Path, *, reps: int, session_timeout_ms: int, heartbeat_ms: int,
                 report: Any = print) -> ModeResult:
    """``reps`` times: a member leaves (SIGTERM), then a new one joins; 4 members x 64 partitions."""
    group = Group(zk, mode, session_timeout_ms, heartbeat_ms, work_dir)
    result = ModeResult(mode, {"clean leave": [], "clean join": []})
    everyone: list[Member] = []
    try:
        for _ in range(MEMBERS):
            everyone.append(group.add())
        before = group.wait_settled()
        for i in range(reps):
            leaver = group.members[i % len(group.members)]
            group.remove(leaver)
            t0 = time.monotonic()
            leaver.terminate()
            after = group.wait_settled()
            outcome = _outcome(everyone, t0, before, after, leaver)
            result.changes["clean leave"].append(outcome)
            report(f"  {mode} clean leave: {outcome}")
            leaver.wait()
            before = after
            newcomer = group.add()
            everyone.append(newcomer)
            t0 = rebalance.join_time(newcomer)
            after = group.wait_settled()
            outcome = _outcome(everyone, t0, before, after, None)
            result.changes["clean join"].append(outcome)
            report(f"  {mode} clean join: {outcome}")
            before = after
    finally:
        group.stop_all()
    return result


def measure(zk: str, bootstrap: str, layout: Any, work_dir: Path, *, reps: int, session_timeout_ms: int,
            heartbeat_ms: int, modes: tuple[str, ...] = MODES, report: Any = print) -> list[ModeResult]:
    """Every mode in turn over one topic with one trickle producer."""
    from metaq.broker.topics import create_topic
    from metaq.testing.broker import topic_leaders
    from metaq.testing.wait import wait_until

    create_topic(layout, TOPIC, PARTITIONS)
    wait_until(lambda: len(topic_leaders(bootstrap, TOPIC)) == PARTITIONS, 20, f"topic {TOPIC}")
    trickle = Trickle(bootstrap, topic=TOPIC, partitions=PARTITIONS)
    trickle.start()
    try:
        return [measure_mode(zk, mode, work_dir, reps=reps, session_timeout_ms=session_timeout_ms,
                             heartbeat_ms=heartbeat_ms, report=report) for mode in modes]
    finally:
        trickle.stop()


# -- tables and targets --------------------------------------------------------------------------------------


def table(results: list[ModeResult]) -> Table:
    header = ["coordination/assignor (4 x 64)", "change", "n", "assigned median", "fetching median",
              "fetching max", "paused (median)", "moved (median)"]
    rows = []
    for r in results:
        for kind, outcomes in r.changes.items():
            if not outcomes:
                continue
            fetching = [o.fetching_s for o in outcomes]
            rows.append([r.mode, kind, str(len(outcomes)),
                         f"{statistics.median(o.assigned_s for o in outcomes):.3f}s",
                         f"{statistics.median(fetching):.3f}s", f"{max(fetching):.3f}s",
                         f"{statistics.median(o.paused for o in outcomes):g}",
                         f"{statistics.median(o.moved for o in outcomes):g}"])
    return header, rows


def targets(results: list[ModeResult]) -> list[Target]:
    """Cooperative-sticky pauses only what moves: moved/paused summed over every change (>= 1.0: no partition
    paused that kept its owner), stated in bench/targets.py's one format."""
    out = []
    for r in results:
        if not r.mode.endswith("cooperative-sticky"):
            continue
        outcomes = [o for changes in r.changes.values() for o in changes]
        paused = sum(o.paused for o in outcomes)
        moved = sum(o.moved for o in outcomes)
        if outcomes:
            out.append(Target(f"cooperative pauses only moved (moved/paused = {moved}/{paused})",
                              moved / paused if paused else 1.0, 1.0))
    return out


# -- running it ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    w = sub.add_parser("worker", help="(internal) one group member")
    w.add_argument("--zk", required=True)
    w.add_argument("--group", required=True)
    w.add_argument("--mode", required=True, choices=MODES)
    w.add_argument("--session-timeout-ms", type=int, required=True)
    w.add_argument("--heartbeat-ms", type=int, required=True)
    parser.add_argument("--quick", action="store_true", help="one leave and one join per mode")
    parser.add_argument("--heartbeat-ms", type=int, default=3000, help="heartbeat.interval.ms (Kafka's default)")
    args = parser.parse_args()
    if args.command == "worker":
        worker(args.zk, args.group, args.mode, args.session_timeout_ms, args.heartbeat_ms)
        return
    reps = 1 if args.quick else 3
    with environment() as env:
        results = measure(env.zk, env.bootstrap, env.layout, env.work_dir, reps=reps, session_timeout_ms=10000,
                          heartbeat_ms=args.heartbeat_ms, report=lambda s: print(s, flush=True))
    print_table(*table(results), title=f"Rebalance: Kafka vs ZooKeeper coordination (session 10 s, heartbeat "
                                       f"{args.heartbeat_ms} ms)")
    for target in targets(results):
        print(target.line())


if __name__ == "__main__":
    main()
