"""The members of ``bench/scale.py``'s group, on threads of this process or spread over spawned worker processes
(driven by commands over a pipe), and when the group counts as settled: every partition owned by exactly one
member, each member's fetcher started on exactly its registry, no rebalance running or triggered.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench.scale_counters import COUNTERS, _counters, instrumented
from metaq.consumer import Consumer
from metaq.consumer.zk_member_state import STABLE
from zk_layout import ZkLayout, paths

TOPIC_PARTITIONS = 1_000
SETTLE_TIMEOUT_S = 300.0
POLL_S = 0.1
CONFIRM_S = 1.0  # settled means: still settled, with no new rebalance, this long after


@dataclass(frozen=True)
class MemberView:
    """What :meth:`ScaleGroup.settled` needs of one member, wherever it runs."""

    consumer_id: str
    state: str | None
    busy: bool  # a rebalance is running or triggered
    registry: dict[tuple[str, int], str]  # partition -> owning thread id
    fetching: tuple[float, frozenset[tuple[str, int]]] | None  # the last fetcher start: (time, partitions)


class Members:
    """The members on threads of this process (all of them, or one worker process's share)."""

    def __init__(self, zk: str, topics: list[str], group: str) -> None:
        self.zk = zk
        self.topics = topics
        self.group = group
        self.members: list[Consumer] = []
        self._joining: list[Consumer] = []

    def config(self) -> dict[str, Any]:
        return {"group.id": self.group, "zookeeper.connect": self.zk, "metrics.enabled": False,
                "zookeeper.session.timeout.ms": 10000, "fetch.wait.max.ms": 1000, "consumer.timeout.ms": 100,
                "auto.commit.enable": False, "metaq.self.check.interval.ms": 0}

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
            started = dict(COUNTERS.started)
            busy = {k for k, v in COUNTERS.in_rebalance.items() if v}
        views = []
        for member in self.members:
            rebalancer = member._rebalancer
            registry = {} if rebalancer is None else {k: i.thread_id for k, i in rebalancer.registry.items()}
            views.append(MemberView(member.consumer_id, None if rebalancer is None else rebalancer.state,
                                    rebalancer is not None and (id(rebalancer) in busy or rebalancer._triggered),
                                    registry, started.get(id(member._fetcher))))
        return views


def _worker(conn: Connection, zk: str, topics: list[str], group: str) -> None:
    """A worker process: its share of the members, driven by the commands of :class:`WorkerMembers`."""
    logging.basicConfig(level=os.environ.get("METAQ_BENCH_LOG_LEVEL", "WARNING"))
    members = Members(zk, topics, group)
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

    def __init__(self, zk: str, topics: list[str], group: str, index: int) -> None:
        self._conn, child = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_worker, args=(child, zk, topics, group), name=f"scale-worker-{index}", daemon=True)
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


class ScaleGroup:
    """The group's members, on threads of this process (``processes`` 0) or spread over worker processes."""

    def __init__(self, zk: str, topics: list[str], partitions: int, group: str, processes: int = 0) -> None:
        self.topics = topics
        self.partitions = partitions
        self.group = group
        self.local = Members(zk, topics, group) if processes <= 0 else None
        self.workers = [WorkerMembers(zk, topics, group, i) for i in range(processes)]
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
                          "registered": {}})
        return dumps

    def views(self) -> list[MemberView]:
        return [view for views in self._all("views", *[() for _ in self.sizes]) for view in views]

    def settled(self) -> float | str:
        """When the last member started fetching its final assignment, or what is still missing."""
        seen: set[tuple[str, int]] = set()
        total = 0
        latest = 0.0
        for view in self.views():
            if view.state != STABLE:
                return f"{view.consumer_id} is {view.state}"
            if view.busy:
                return f"{view.consumer_id} is rebalancing"
            owned = set(view.registry)
            if owned and (view.fetching is None or view.fetching[1] != owned):
                return f"{view.consumer_id} is not fetching its partitions"
            seen |= owned
            total += len(owned)
            if view.fetching is not None:
                latest = max(latest, view.fetching[0])
        if len(seen) != self.partitions or total != self.partitions:
            return f"{len(seen)} of {self.partitions} partitions owned ({total} claims)"
        return latest

    def wait_settled(self) -> float:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        state: float | str = "not checked"
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
