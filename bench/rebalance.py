"""Rebalance latency of a consumer group, and the latency of committing 1,000 partitions' offsets.

    python -m bench.rebalance [--quick]          # standalone: its own ZooKeeper and broker

Rebalance: a topic of 64 partitions gets a steady trickle of messages on every partition (one per partition
every 50 ms, from confluent-kafka in this process), and 4 group members run as separate processes
(``python -m bench.rebalance worker``: metaq's stream iterator, Kafka 0.8 defaults except the session
timeout). Each worker prints JSON lines: when it joins, each assignment (from the rebalance listener's
``assigned`` hook) and, per assignment, the first message it consumes from each of its partitions. The
membership changes are a clean leave (SIGTERM: the member shuts down, releasing its partitions), a clean
join (a new worker; the clock starts just before it registers), and a SIGKILL (the group notices when
ZooKeeper expires the session). For each change two latencies are measured:

- owned: until the last owner node of the final, stable assignment was created (its ZooKeeper ctime), the
  assignment being complete (64 partitions), exclusive (one node each) and held by live members only;
- fetching: until every member has consumed a message from every partition of its final assignment.

Commit: ``ZooKeeperOffsetStore.commit`` of 1,000 partitions' offsets (all changed) over a real ZooKeeper,
after fencing them as a rebalance does (``take_ownership``), several times; also the fence itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from bench.environment import environment
from bench.tables import print_table
from metaq.childproc import die_with_parent

TOPIC = "bench-rebalance"
PARTITIONS = 64
MEMBERS = 4
TRICKLE_INTERVAL_S = 0.05
STABLE_TIMEOUT_S = 90.0
POLL_S = 0.05


# -- the worker (a group member in its own process) ----------------------------------------------------------


class _Reporter:
    """Prints the worker's events as JSON lines; tracks which partitions of the current assignment have
    delivered a message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._assigned: frozenset[int] = frozenset()
        self._seen: set[int] = set()

    def emit(self, name: str, **fields: Any) -> None:
        line = json.dumps({"e": name, "t": time.monotonic(), "wall": time.time(), **fields})
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    # RebalanceListener
    def before_release(self, partitions: Mapping[str, set[int]]) -> None:
        pass

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        mine = sorted(p for p, tid in assignment.get(TOPIC, {}).items() if tid.rsplit("-", 1)[0] == consumer_id)
        with self._lock:
            self._generation += 1
            self._assigned = frozenset(mine)
            self._seen = set()
            generation = self._generation
        self.emit("assigned", gen=generation, partitions=mine)

    def rebalance_failed(self, error: Exception) -> None:
        self.emit("rebalance_failed", error=str(error))

    def consumed(self, partition: int) -> None:
        if partition in self._seen:
            return
        with self._lock:
            if partition in self._seen or partition not in self._assigned:
                return
            self._seen.add(partition)
            generation = self._generation
        self.emit("first", gen=generation, partition=partition)


def worker(zk: str, group: str, session_timeout_ms: int) -> None:
    """One group member: consume until SIGTERM, reporting as described in the module docstring."""
    from metaq.consumer import Consumer

    logging.basicConfig(level=os.environ.get("METAQ_BENCH_LOG_LEVEL", "WARNING"), stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(threadName)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    reporter = _Reporter()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = {"group.id": group, "zookeeper.connect": zk, "zookeeper.session.timeout.ms": session_timeout_ms,
              "consumer.timeout.ms": 100, "auto.offset.reset": "largest"}
    consumer = Consumer(config, rebalance_listener=reporter)
    consume_until_stopped(consumer, reporter, TOPIC, stop)


def consume_until_stopped(consumer: Any, reporter: Any, topic: str, stop: threading.Event) -> None:
    """A worker's life after its consumer exists: one stream of ``topic``, each message's partition to
    ``reporter.consumed``, shut down when ``stop`` is set; ``joining``/``leaving``/``left`` events around it."""
    from metaq.consumer import ConsumerTimeoutError

    reporter.emit("joining", consumer_id=consumer.consumer_id)
    [stream] = consumer.create_message_streams({topic: 1})[topic]
    consumed = reporter.consumed
    while not stop.is_set():
        try:
            for message in stream:
                consumed(message.partition)
                if stop.is_set():
                    break
        except ConsumerTimeoutError:
            continue
    reporter.emit("leaving")
    consumer.shutdown()
    reporter.emit("left")


# -- the parent: members, the trickle producer, the measurements ---------------------------------------------


class Member:
    """A worker process and the events it printed."""

    def __init__(self, worker_argv: list[str], log_dir: Path, name: str, module: str = "bench.rebalance") -> None:
        """``python -m <module> worker <worker_argv>``, its stderr in ``log_dir/<name>.log``."""
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "worker", *worker_argv],
            stdout=subprocess.PIPE, stderr=self._log, preexec_fn=die_with_parent(),
            cwd=Path(__file__).resolve().parent.parent)
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def event(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.snapshot() if e["e"] == name), None)

    @property
    def consumer_id(self) -> str | None:
        joined = self.event("joining")
        return None if joined is None else str(joined["consumer_id"])

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float = 30.0) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        self._log.close()


class Trickle(threading.Thread):
    """One message per partition every ``interval`` seconds, so that a new owner always has data soon."""

    def __init__(self, bootstrap: str, interval: float = TRICKLE_INTERVAL_S, topic: str = TOPIC,
                 partitions: int = PARTITIONS) -> None:
        super().__init__(name="trickle", daemon=True)
        import confluent_kafka

        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": 1})
        self._interval = interval
        self._topic = topic
        self._partitions = partitions
        self._halt = threading.Event()

    def run(self) -> None:
        value = b"r" * 100
        next_at = time.monotonic()
        while not self._halt.is_set():
            for p in range(self._partitions):
                self._producer.produce(self._topic, value, partition=p)
            self._producer.poll(0)
            next_at += self._interval
            self._halt.wait(max(0.0, next_at - time.monotonic()))
        self._producer.flush(10)

    def stop(self) -> None:
        self._halt.set()
        self.join(15)


@dataclass
class Change:
    kind: str
    owned: list[float] = field(default_factory=list)
    fetching: list[float] = field(default_factory=list)


def _owner_nodes(client: Any, group: str) -> dict[int, tuple[str, int]]:
    """partition -> (owner thread id, ctime in ms), read with pipelined requests."""
    from zk_layout import paths

    try:
        children = client.get_children(paths.topic_owners_path(group, TOPIC))
    except Exception:  # no owners yet
        return {}
    asyncs = {int(c): client.get_async(paths.owner_path(group, TOPIC, int(c))) for c in children}
    result = {}
    for partition, request in asyncs.items():
        try:
            data, stat = request.get(10)
        except Exception:  # deleted in between
            continue
        result[partition] = (data.decode(), stat.ctime)
    return result


M = TypeVar("M", bound=Member)


class MemberGroup(Generic[M]):
    """One group's worker processes (``python -m <module> worker``), all started with the same arguments and
    numbered in order; ``mode`` and ``heartbeat_ms`` for the workers that take them (bench/rebalance_kafka.py),
    ``new_member`` makes the :class:`Member` (sub)class that reads the worker's events."""

    def __init__(self, zk: str, group: str, session_timeout_ms: int, work_dir: Path,
                 new_member: Callable[[list[str], Path, str], M], *, mode: str | None = None,
                 heartbeat_ms: int | None = None) -> None:
        self.group = group
        self.mode = mode
        self.argv = ["--zk", zk, "--group", group, "--session-timeout-ms", str(session_timeout_ms)]
        if mode is not None:
            self.argv += ["--mode", mode]
        if heartbeat_ms is not None:
            self.argv += ["--heartbeat-ms", str(heartbeat_ms)]
        self.work_dir = work_dir
        self.members: list[M] = []
        self._new_member = new_member
        self._prefix = "" if mode is None else mode.replace("/", "-") + "-"
        self._count = 0

    def add(self) -> M:
        self._count += 1
        member = self._new_member(self.argv, self.work_dir, f"{self._prefix}member-{self._count}")
        self.members.append(member)
        return member

    def remove(self, member: M) -> None:
        self.members.remove(member)

    def stop_all(self) -> None:
        for member in self.members:
            member.terminate()
        for member in self.members:
            member.wait()
        self.members.clear()


class Group(MemberGroup[Member]):
    """The ZooKeeper-coordinated group's members and the stability checks (its owner nodes)."""

    def __init__(self, zk: str, client: Any, session_timeout_ms: int, work_dir: Path) -> None:
        super().__init__(zk, f"bench-rebalance-{os.getpid()}", session_timeout_ms, work_dir, Member)
        self.client = client

    def settled(self, since: float) -> tuple[float, float] | str:
        """(owned at, fetching at) in monotonic seconds if the group is stable with its current members and
        every member has assigned and consumed after ``since``; otherwise what is still missing."""
        ids: dict[str, Member] = {}
        for member in self.members:
            cid = member.consumer_id
            if cid is None:
                return f"{member.name} has not joined"
            ids[cid] = member
        owners = _owner_nodes(self.client, self.group)
        if sorted(owners) != list(range(PARTITIONS)):
            return f"{len(owners)} of {PARTITIONS} partitions owned"
        by_member: dict[str, set[int]] = {}
        for partition, (thread_id, _) in owners.items():
            by_member.setdefault(thread_id.rsplit("-", 1)[0], set()).add(partition)
        if set(by_member) != set(ids):
            return f"owners {sorted(by_member)} are not the live members {sorted(ids)}"
        fetching_at = 0.0
        wall_offset = 0.0
        for cid, member in ids.items():
            events = member.snapshot()
            assigned = [e for e in events if e["e"] == "assigned"]
            if not assigned or assigned[-1]["t"] < since:
                return f"{member.name} has not rebalanced yet"
            last = assigned[-1]
            if set(last["partitions"]) != by_member[cid]:
                return f"{member.name} reports {last['partitions']}, ZooKeeper says {sorted(by_member[cid])}"
            firsts = {e["partition"]: e["t"] for e in events if e["e"] == "first" and e["gen"] == last["gen"]}
            if set(firsts) != by_member[cid]:
                return f"{member.name} is not consuming from {sorted(by_member[cid] - set(firsts))}"
            fetching_at = max(fetching_at, max(firsts.values()))
            wall_offset = last["wall"] - last["t"]  # the same clocks on every process of this machine
        owned_at = max(ctime for _, ctime in owners.values()) / 1000.0 - wall_offset
        return owned_at, fetching_at

    def wait_settled(self, since: float, timeout: float = STABLE_TIMEOUT_S) -> tuple[float, float]:
        deadline = time.monotonic() + timeout
        state: tuple[float, float] | str = "not checked"
        while time.monotonic() < deadline:
            state = self.settled(since)
            if not isinstance(state, str):
                time.sleep(POLL_S * 4)  # still the same after a moment: no second rebalance on the way
                again = self.settled(since)
                if again == state:
                    return state
                state = again
            time.sleep(POLL_S)
        raise RuntimeError(f"group did not settle within {timeout}s: {state}")


def join_time(member: Member, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        joined = member.event("joining")
        if joined is not None:
            return float(joined["t"])
        if member.proc.poll() is not None:
            raise RuntimeError(f"{member.name} exited with {member.proc.returncode}")
        time.sleep(0.01)
    raise RuntimeError(f"{member.name} did not start within {timeout}s")


def measure_rebalance(zk: str, client: Any, bootstrap: str, layout: Any, work_dir: Path, *,
                      reps: int, kill_reps: int, session_timeout_ms: int,
                      report: Any = print) -> list[Change]:
    """Clean leave/join ``reps`` times each and SIGKILL ``kill_reps`` times on 4 members x 64 partitions."""
    from metaq.broker.topics import create_topic
    from metaq.testing.broker import topic_leaders
    from metaq.testing.wait import wait_until

    create_topic(layout, TOPIC, PARTITIONS)
    wait_until(lambda: len(topic_leaders(bootstrap, TOPIC)) == PARTITIONS, 20, f"topic {TOPIC}")
    trickle = Trickle(bootstrap)
    trickle.start()
    group = Group(zk, client, session_timeout_ms, work_dir)
    changes = {kind: Change(kind) for kind in ("clean leave", "clean join", "SIGKILL")}
    try:
        start = time.monotonic()
        for _ in range(MEMBERS):
            group.add()
        group.wait_settled(start)

        def record(kind: str, t0: float) -> None:
            owned_at, fetching_at = group.wait_settled(t0)
            change = changes[kind]
            change.owned.append(owned_at - t0)
            change.fetching.append(fetching_at - t0)
            report(f"  {kind}: owned after {owned_at - t0:.3f}s, fetching after {fetching_at - t0:.3f}s")
            time.sleep(0.3)

        for i in range(reps + kill_reps):
            victim = group.members[i % len(group.members)]
            group.remove(victim)
            t0 = time.monotonic()
            if i < reps:
                victim.terminate()
                record("clean leave", t0)
            else:
                victim.kill()
                record("SIGKILL", t0)
            victim.wait()
            newcomer = group.add()
            record("clean join", join_time(newcomer))
    finally:
        group.stop_all()
        trickle.stop()
    return [c for c in changes.values() if c.owned]


def measure_commit(client: Any, partitions: int = 1000, reps: int = 10,
                   report: Any = print) -> tuple[float, list[float]]:
    """(seconds to fence, [seconds per commit]) for ``partitions`` partitions of one group."""
    from metaq.consumer.offset_store import ZooKeeperOffsetStore
    from zk_layout import ZkLayout

    layout = ZkLayout(client)
    group = f"bench-commit-{os.getpid()}"
    keys = [(f"bench-commit-{i // 100}", i % 100) for i in range(partitions)]  # 10 topics x 100 partitions
    store = ZooKeeperOffsetStore(layout, group)
    t0 = time.perf_counter()
    store.take_ownership(keys)
    fence = time.perf_counter() - t0
    report(f"  fenced {partitions} partitions in {fence * 1000:.0f} ms")
    times = []
    for rep in range(reps):
        offsets = {key: 1000 * (rep + 1) + i for i, key in enumerate(keys)}
        t0 = time.perf_counter()
        result = store.commit(offsets)
        times.append(time.perf_counter() - t0)
        if len(result.committed) != partitions or result.lost:
            raise RuntimeError(f"commit wrote {len(result.committed)} of {partitions}, lost {len(result.lost)}")
    committed = layout.offsets(group)
    if committed != {key: 1000 * reps + i for i, key in enumerate(keys)}:
        raise RuntimeError("the offsets read back differ from the last commit")
    report(f"  commit of {partitions} partitions: median {statistics.median(times) * 1000:.1f} ms, "
           f"max {max(times) * 1000:.1f} ms")
    return fence, times


# -- tables --------------------------------------------------------------------------------------------------


def rebalance_table(changes: list[Change], session_timeout_ms: int) -> tuple[list[str], list[list[str]]]:
    header = ["membership change (4 members x 64 partitions)", "n", "owned median", "owned max",
              "fetching median", "fetching max", "target (fetching median)", "met"]
    rows = []
    for c in changes:
        target = session_timeout_ms / 1000.0 + 0.5 if c.kind == "SIGKILL" else 0.5
        median = statistics.median(c.fetching)
        rows.append([c.kind, str(len(c.owned)), f"{statistics.median(c.owned):.3f}s", f"{max(c.owned):.3f}s",
                     f"{median:.3f}s", f"{max(c.fetching):.3f}s", f"<= {target:.1f}s",
                     "yes" if median <= target else "NO"])
    return header, rows


def commit_table(partitions: int, fence: float, times: list[float]) -> tuple[list[str], list[list[str]]]:
    header = ["ZooKeeper offsets", "n", "median", "max", "target", "met"]
    median = statistics.median(times)
    return header, [
        [f"commit {partitions} partitions (all changed)", str(len(times)), f"{median * 1000:.1f} ms",
         f"{max(times) * 1000:.1f} ms", "<= 200 ms", "yes" if median <= 0.2 else "NO"],
        [f"fence {partitions} partitions (take_ownership)", "1", f"{fence * 1000:.1f} ms", "", "", ""],
    ]


# -- running it ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    w = sub.add_parser("worker", help="(internal) one group member")
    w.add_argument("--zk", required=True)
    w.add_argument("--group", required=True)
    w.add_argument("--session-timeout-ms", type=int, required=True)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 3 s sessions")
    args = parser.parse_args()
    if args.command == "worker":
        worker(args.zk, args.group, args.session_timeout_ms)
        return
    reps, kill_reps, session_ms = (2, 1, 3000) if args.quick else (5, 3, 6000)
    with environment() as env:
        print("Commit latency", flush=True)
        fence, times = measure_commit(env.client, reps=5 if args.quick else 20)
        print("Rebalance latency", flush=True)
        changes = measure_rebalance(env.zk, env.client, env.bootstrap, env.layout, env.work_dir, reps=reps,
                                    kill_reps=kill_reps, session_timeout_ms=session_ms,
                                    report=lambda s: print(s, flush=True))
    print_table(*rebalance_table(changes, session_ms), title="Rebalance latency")
    print_table(*commit_table(1000, fence, times), title="Offset commit")


if __name__ == "__main__":
    main()
