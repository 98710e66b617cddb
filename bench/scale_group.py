"""bench.scale's group: its members on threads of this process or spread over spawned worker processes,
driven by commands over a pipe."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from typing import Any

from bench.scale_counters import COUNTERS, instrumented
from bench.scale_members import Members, MemberView, Settled
from bench.scale_settings import (
    CONFIRM_S,
    POLL_S,
    SETTLE_TIMEOUT_S,
    TOPIC_PARTITIONS,
    ZOOKEEPER,
)
from metaq.consumer.zk_member_state import STABLE
from zk_layout import ZkLayout, paths


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
