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
import multiprocessing
import os
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Transaction

from bench.tables import Table
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer
from metaq.consumer.coordination import GroupMember
from metaq.consumer.fetcher_manager import FetcherManager
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_member_state import STABLE
from metaq.consumer.zk_ownership import OwnerNodes
from metaq.errors import MetaqError
from zk_layout import ZkLayout, paths

log = logging.getLogger(__name__)

SIZES = ((10, 1_000), (50, 5_000), (100, 10_000))
ZOOKEEPER = "zookeeper/range"
KAFKA_MODES = ("kafka/range", "kafka/cooperative-sticky")
"""group.coordination=kafka, eager and incremental; measured after ZooKeeper at the sizes of KAFKA_SIZES."""
KAFKA_SIZES = ((100, 10_000),)
KAFKA_STEPS = ("_join", "_assign", "_sync", "_fetch_offsets")
"""GroupMember's steps of a round, timed: JoinGroup (waits for every member), the leader's assignment,
SyncGroup (waits for the leader), OffsetFetch of the assigned partitions."""
PROCESSES = 4  # worker processes the members are spread over (see above)
TOPIC_PARTITIONS = 1_000
SETTLE_TIMEOUT_S = 300.0
POLL_S = 0.1
CONFIRM_S = 1.0  # settled means: still settled, with no new rebalance, this long after


# -- instrumentation (class-level wrappers, keyed by instance) ------------------------------------------------


@dataclass
class Counters:
    """What the wrapped methods recorded; every list entry is (monotonic time, value)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    attempts: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # rebalancer -> times
    conflicts: list[tuple[float, int]] = field(default_factory=list)  # (time, partitions in the way)
    zk_requests: list[float] = field(default_factory=list)  # times of requests made inside a rebalance
    zk_ops: int = 0  # requests counting every op of a multi
    in_rebalance: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # rebalancer -> depth
    # fetcher -> partition -> when it was last handed to the fetcher (an eager rebalance hands over every
    # partition, an incremental one only the added ones)
    started: dict[int, dict[tuple[str, int], float]] = field(default_factory=lambda: defaultdict(dict))
    registered: dict[str, float] = field(default_factory=dict)  # consumer id -> time (first JoinGroup: kafka)
    # group.coordination=kafka: GroupMember step -> (member, start, seconds) of each call (where the time goes)
    steps: dict[str, list[tuple[int, float, float]]] = field(default_factory=lambda: defaultdict(list))


COUNTERS = Counters()
_local = threading.local()


@contextmanager
def instrumented() -> Iterator[Counters]:
    """Wrap the methods the counters come from; undone on exit."""
    originals: list[tuple[type, str, Any]] = []

    def wrap(cls: type, name: str, make: Callable[[Any], Any]) -> None:
        owner = next(c for c in cls.__mro__ if name in c.__dict__)  # the class defining it (maybe a base)
        original = owner.__dict__[name]
        originals.append((owner, name, original))
        setattr(owner, name, make(original))

    def call(original: Any) -> Any:
        def wrapper(self: KazooClient, request: Any, async_object: Any) -> Any:
            if getattr(_local, "rebalancing", 0):
                with COUNTERS.lock:
                    COUNTERS.zk_requests.append(time.monotonic())
                    COUNTERS.zk_ops += len(request.operations) if isinstance(request, Transaction) else 1
            return original(self, request, async_object)
        return wrapper

    def synced(original: Any) -> Any:
        def wrapper(self: ZKRebalancerListener, *args: Any, **kwargs: Any) -> Any:
            _local.rebalancing = getattr(_local, "rebalancing", 0) + 1
            with COUNTERS.lock:
                COUNTERS.in_rebalance[id(self)] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                _local.rebalancing -= 1
                with COUNTERS.lock:
                    COUNTERS.in_rebalance[id(self)] -= 1
        return wrapper

    def attempt(original: Any) -> Any:
        def wrapper(self: ZKRebalancerListener) -> Any:
            with COUNTERS.lock:
                COUNTERS.attempts[id(self)].append(time.monotonic())
            return original(self)
        return wrapper

    def claim(original: Any) -> Any:
        def wrapper(self: ZKRebalancerListener, mine: Any) -> Any:
            ok = original(self, mine)
            if not ok:
                with COUNTERS.lock:
                    COUNTERS.conflicts.append((time.monotonic(), len(self._conflicts or {})))
            return ok
        return wrapper

    def start(original: Any) -> Any:
        def wrapper(self: FetcherManager, infos: Any) -> None:  # records instead of fetching (see above)
            keys = [i.key for i in infos if not i.revoked]
            now = time.monotonic()
            with COUNTERS.lock:
                COUNTERS.started[id(self)].update(dict.fromkeys(keys, now))
        return wrapper

    def timed(original: Any) -> Any:
        def wrapper(self: GroupMember, *args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return original(self, *args, **kwargs)
            finally:
                with COUNTERS.lock:
                    COUNTERS.steps[original.__name__].append((id(self), start, time.monotonic() - start))
        return wrapper

    def member_round(original: Any) -> Any:
        """group.coordination=kafka: one JoinGroup/SyncGroup round (or more, on a restart) is an attempt."""
        def wrapper(self: GroupMember, *args: Any, **kwargs: Any) -> Any:
            now = time.monotonic()
            with COUNTERS.lock:
                COUNTERS.attempts[id(self)].append(now)
                COUNTERS.registered.setdefault(self._consumer_id, now)
                COUNTERS.in_rebalance[id(self)] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                with COUNTERS.lock:
                    COUNTERS.in_rebalance[id(self)] -= 1
        return wrapper

    def register(original: Any) -> Any:
        def wrapper(self: ZkLayout, group: str, consumer_id: str, topic_count: Any) -> Any:
            result = original(self, group, consumer_id, topic_count)
            with COUNTERS.lock:
                COUNTERS.registered[consumer_id] = time.monotonic()
            return result
        return wrapper

    from zk_layout.groups import _Groups

    wrap(KazooClient, "_call", call)
    wrap(ZKRebalancerListener, "synced_rebalance", synced)
    wrap(ZKRebalancerListener, "_attempt", attempt)
    wrap(OwnerNodes, "_claim_all", claim)  # ZKRebalancerListener inherits it from there
    wrap(FetcherManager, "start_connections", start)
    wrap(_Groups, "register_consumer", register)
    wrap(GroupMember, "synced_rebalance", member_round)
    for step in KAFKA_STEPS:
        wrap(GroupMember, step, timed)
    try:
        yield COUNTERS
    finally:
        for cls, name, original in reversed(originals):
            setattr(cls, name, original)


# -- the group -----------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class MemberView:
    """What :meth:`ScaleGroup.settled` needs of one member, wherever it runs."""

    consumer_id: str
    state: str | None
    busy: bool  # a rebalance is running or triggered
    registry: dict[tuple[str, int], str]  # partition -> owning thread id
    fetching: dict[tuple[str, int], float]  # partition -> when it was last handed to the fetcher


@dataclass(frozen=True)
class Settled:
    """A settled group: when its last partition was handed to a fetcher, and partition -> (owner, since)."""

    at: float
    owners: dict[tuple[str, int], tuple[str, float]]

    def paused_since(self, t0: float) -> int:
        return sum(1 for _, since in self.owners.values() if since >= t0)

    def moved_from(self, before: Settled) -> int:
        return sum(1 for key, (owner, _) in self.owners.items() if before.owners.get(key, ("",))[0] != owner)


class Members:
    """The members on threads of this process (all of them, or one worker process's share)."""

    def __init__(self, zk: str, topics: list[str], group: str, mode: str = ZOOKEEPER) -> None:
        self.zk = zk
        self.topics = topics
        self.group = group
        self.mode = mode
        self.members: list[Consumer] = []
        self._joining: list[Consumer] = []

    def config(self) -> dict[str, Any]:
        return {"group.id": self.group, "zookeeper.connect": self.zk, "metrics.enabled": False,
                "zookeeper.session.timeout.ms": 10000, "fetch.wait.max.ms": 1000, "consumer.timeout.ms": 100,
                "auto.commit.enable": False, "metaq.self.check.interval.ms": 0, **mode_config(self.mode)}

    def prepare(self, n: int) -> None:
        """Connect ``n`` members (the slow part), so that they can then subscribe at once."""
        self._joining = [Consumer(self.config()) for _ in range(n)]

    def join(self) -> None:
        """The prepared members subscribe together; returns when every first rebalance returned."""
        consumers, self._joining = self._joining, []
        barrier = threading.Barrier(len(consumers))
        errors: list[BaseException] = []

        def subscribe(consumer: Consumer) -> None:
            barrier.wait()
            try:
                consumer.create_message_streams(dict.fromkeys(self.topics, 1))
            except BaseException as e:  # reported by the caller
                errors.append(e)

        threads = [threading.Thread(target=subscribe, args=(c,), name=f"scale-join-{i}", daemon=True)
                   for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SETTLE_TIMEOUT_S)
        self.members.extend(consumers)
        if errors:
            raise RuntimeError(f"{len(errors)} members failed to join: {errors[0]!r}")

    def leave(self, index: int) -> None:
        self.members.pop(index).shutdown()

    def stop(self) -> None:
        threads = [threading.Thread(target=m.shutdown, name="scale-stop", daemon=True) for m in self.members]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.members.clear()

    def views(self) -> list[MemberView]:
        with COUNTERS.lock:
            started = {k: dict(v) for k, v in COUNTERS.started.items()}
            busy = {k for k, v in COUNTERS.in_rebalance.items() if v}
        views = []
        for member in self.members:
            rebalancer = member._rebalancer
            registry = {} if rebalancer is None else {k: i.thread_id for k, i in rebalancer.registry.items()}
            pending = rebalancer is not None and (
                rebalancer._rejoin_needed if isinstance(rebalancer, GroupMember) else rebalancer._triggered)
            views.append(MemberView(member.consumer_id, None if rebalancer is None else rebalancer.state,
                                    rebalancer is not None and (id(rebalancer) in busy or pending),
                                    registry, started.get(id(member._fetcher), {})))
        return views


def mode_config(mode: str) -> dict[str, Any]:
    """The consumer properties of a ``coordination/assignor`` mode."""
    coordination, assignor = mode.split("/")
    if coordination == "zookeeper":
        return {}
    return {"group.coordination": coordination, "partition.assignment.strategy": assignor,
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 3000}


def _worker(conn: Connection, zk: str, topics: list[str], group: str, mode: str) -> None:
    """A worker process: its share of the members, driven by the commands of :class:`WorkerMembers`."""
    logging.basicConfig(level=os.environ.get("METAQ_BENCH_LOG_LEVEL", "WARNING"))
    members = Members(zk, topics, group, mode)
    with instrumented():
        while True:
            command, args = conn.recv()
            try:
                result = getattr(members, command)(*args) if command != "counters" else _counters(*args)
            except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
                conn.send(("error", f"{type(e).__name__}: {e}"))
                continue
            conn.send(("ok", result))
            if command == "stop":
                return


class WorkerMembers:
    """:class:`Members` in a worker process (spawned: a fork would copy this process's ZooKeeper threads)."""

    def __init__(self, zk: str, topics: list[str], group: str, index: int, mode: str = ZOOKEEPER) -> None:
        self._conn, child = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_worker, args=(child, zk, topics, group, mode), name=f"scale-worker-{index}", daemon=True)
        self._process.start()
        child.close()

    def send(self, command: str, *args: Any) -> None:
        self._conn.send((command, args))

    def reply(self) -> Any:
        if not self._conn.poll(SETTLE_TIMEOUT_S):
            raise RuntimeError(f"worker {self._process.name} did not answer within {SETTLE_TIMEOUT_S}s")
        status, result = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"worker {self._process.name}: {result}")
        return result

    def call(self, command: str, *args: Any) -> Any:
        self.send(command, *args)
        return self.reply()

    def close(self) -> None:
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()


def _counters(reset: bool) -> dict[str, Any]:
    """This process's counters (serialisable), and its CPU time; ``reset``: start counting afresh."""
    with COUNTERS.lock:
        dump = {"attempts": {f"{os.getpid()}:{k}": list(v) for k, v in COUNTERS.attempts.items()},
                "conflicts": list(COUNTERS.conflicts), "zk_requests": list(COUNTERS.zk_requests),
                "zk_ops": COUNTERS.zk_ops, "registered": dict(COUNTERS.registered), "cpu": time.process_time(),
                "steps": {k: [(f"{os.getpid()}:{m}", t, d) for m, t, d in v] for k, v in COUNTERS.steps.items()}}
        if reset:
            COUNTERS.attempts.clear()
            COUNTERS.conflicts.clear()
            COUNTERS.zk_requests.clear()
            COUNTERS.zk_ops = 0
            COUNTERS.registered.clear()
            COUNTERS.steps.clear()
    return dump


class ScaleGroup:
    """The group's members, on threads of this process (``processes`` 0) or spread over worker processes."""

    def __init__(self, zk: str, topics: list[str], partitions: int, group: str, processes: int = 0,
                 mode: str = ZOOKEEPER) -> None:
        self.topics = topics
        self.partitions = partitions
        self.group = group
        self.mode = mode
        self.local = Members(zk, topics, group, mode) if processes <= 0 else None
        self.workers = [WorkerMembers(zk, topics, group, i, mode) for i in range(processes)]
        self.sizes = [0] * max(1, processes)  # members per host

    def __len__(self) -> int:
        return sum(self.sizes)

    def _all(self, command: str, *args_per_host: tuple[Any, ...]) -> list[Any]:
        """``command`` on every host (workers first, concurrently), with its own arguments."""
        if self.local is not None:
            return [getattr(self.local, command)(*args_per_host[0])] if command != "counters" \
                else [_counters(*args_per_host[0])]
        for worker, args in zip(self.workers, args_per_host, strict=True):
            worker.send(command, *args)
        return [worker.reply() for worker in self.workers]

    def join(self, n: int) -> None:
        """Start ``n`` members at once: connected first, then all subscribe together."""
        share = [n // len(self.sizes) + (1 if i < n % len(self.sizes) else 0) for i in range(len(self.sizes))]
        self._all("prepare", *[(k,) for k in share])
        self._all("join", *[() for _ in share])
        self.sizes = [a + b for a, b in zip(self.sizes, share, strict=True)]

    def leave(self, index: int) -> None:
        """Member ``index`` (in host order) shuts down cleanly."""
        for host, size in enumerate(self.sizes):
            if index < size:
                self.sizes[host] -= 1
                if self.local is not None:
                    self.local.leave(index)
                else:
                    self.workers[host].call("leave", index)
                return
            index -= size
        raise IndexError(index)

    def stop(self) -> None:
        self._all("stop", *[() for _ in self.sizes])
        for worker in self.workers:
            worker.close()
        self.sizes = [0] * len(self.sizes)

    def counters(self, *, reset: bool = False) -> list[dict[str, Any]]:
        dumps = self._all("counters", *[(reset,) for _ in self.sizes])
        if self.local is None:  # this process's own CPU counts too (it polls the workers)
            dumps.append({**_counters(reset), "attempts": {}, "conflicts": [], "zk_requests": [], "zk_ops": 0,
                          "registered": {}, "steps": {}})
        return dumps

    def views(self) -> list[MemberView]:
        return [view for views in self._all("views", *[() for _ in self.sizes]) for view in views]

    def settled(self) -> Settled | str:
        """When the last member started fetching its final assignment (and who fetches what since when), or
        what is still missing."""
        owners: dict[tuple[str, int], tuple[str, float]] = {}
        total = 0
        for view in self.views():
            if view.state != STABLE:
                return f"{view.consumer_id} is {view.state}"
            if view.busy:
                return f"{view.consumer_id} is rebalancing"
            owned = set(view.registry)
            if not owned <= set(view.fetching):
                return f"{view.consumer_id} is not fetching {len(owned - set(view.fetching))} of its partitions"
            owners.update({key: (view.consumer_id, view.fetching[key]) for key in owned})
            total += len(owned)
        if len(owners) != self.partitions or total != self.partitions:
            return f"{len(owners)} of {self.partitions} partitions owned ({total} claims)"
        return Settled(max((t for _, t in owners.values()), default=0.0), owners)

    def wait_settled(self) -> Settled:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        state: Settled | str = "not checked"
        while time.monotonic() < deadline:
            state = self.settled()
            if not isinstance(state, str):
                time.sleep(CONFIRM_S)
                again = self.settled()
                if again == state:
                    return state
                state = again
            time.sleep(POLL_S)
        raise RuntimeError(f"group {self.group} did not settle within {SETTLE_TIMEOUT_S}s: {state}")

    def check_owner_nodes(self, layout: ZkLayout) -> None:
        """The owner nodes in ZooKeeper are exactly the members' registries (pipelined reads)."""
        expected = {key: tid for view in self.views() for key, tid in view.registry.items()}
        client = layout.client
        requests = {(t, p): client.get_async(paths.owner_path(self.group, t, p))
                    for t in self.topics for p in range(TOPIC_PARTITIONS)}
        actual = {}
        for key, request in requests.items():
            try:
                actual[key] = request.get(30)[0].decode()
            except Exception:  # noqa: BLE001 - no owner node: reported below
                continue
        if actual != expected:
            wrong = sorted(k for k in set(actual) | set(expected) if actual.get(k) != expected.get(k))
            raise RuntimeError(f"owner nodes differ from the members' registries at {len(wrong)} partitions, "
                               f"e.g. {wrong[:3]}")


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


# -- offsets: fence and commit ----------------------------------------------------------------------------------


@dataclass
class OffsetRow:
    what: str
    partitions: int
    seconds: float
    cpu_s: float
    error: str = ""

    def cells(self) -> list[str]:
        if self.error:
            return [self.what, f"{self.partitions:,}", f"failed: {self.error}", "", ""]
        return [self.what, f"{self.partitions:,}", f"{self.seconds * 1000:.0f}",
                f"{self.seconds / self.partitions * 1000:.3f}", f"{self.cpu_s * 1000:.0f}"]


OFFSET_HEADER = ["ZooKeeper offsets", "partitions", "ms", "ms/partition", "CPU ms"]


def measure_offsets(layout: ZkLayout, partitions: int, rep: int) -> list[OffsetRow]:
    """Fence (take_ownership, nodes missing: a new group) and re-fence (nodes present: the next owner),
    then commit every offset changed; the first store must then be fenced out. A step that fails is
    reported as such and ends the measurement."""
    group = f"scale-offsets-{partitions}-{rep}-{os.getpid()}"
    keys = [(f"scale-offsets-{i // TOPIC_PARTITIONS}", i % TOPIC_PARTITIONS) for i in range(partitions)]
    rows: list[OffsetRow] = []

    def timed(what: str, fn: Callable[[], object]) -> None:
        cpu0, t0 = time.process_time(), time.perf_counter()
        fn()
        rows.append(OffsetRow(what, partitions, time.perf_counter() - t0, time.process_time() - cpu0))

    first = ZooKeeperOffsetStore(layout, group)
    second = ZooKeeperOffsetStore(layout, group)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("fence at claim (new group: nodes created)", lambda: first.take_ownership(keys)),
        ("commit, all changed", lambda: first.commit({key: 1000 + i for i, key in enumerate(keys)})),
        ("fence at claim (taking over: nodes exist)", lambda: second.take_ownership(keys)),
        ("commit, all changed", lambda: second.commit({key: 2000 + i for i, key in enumerate(keys)})),
    ]
    for what, step in steps:
        try:
            timed(what, step)
        except MetaqError as e:
            rows.append(OffsetRow(what, partitions, 0.0, 0.0, type(e.__cause__ or e).__name__))
            return rows
    quiet = logging.getLogger("metaq.consumer.offset_store")
    level, quiet.level = quiet.level, logging.ERROR  # one "fenced" warning per partition is expected here
    try:
        fenced_out = first.commit(dict.fromkeys(keys, 10**9)).lost  # an offset neither store committed
    finally:
        quiet.setLevel(level)
    if fenced_out != set(keys):
        raise RuntimeError(f"the fenced-out store could still commit: {len(fenced_out)} of {len(keys)} refused")
    if layout.read_offset(group, *keys[-1]) != 2000 + partitions - 1:
        raise RuntimeError("the offsets read back differ from the last commit")
    return rows


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
