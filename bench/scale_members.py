"""bench.scale's members on threads of one process (all of them, or one worker process's share), and what
ScaleGroup reads of each."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from bench.scale_counters import COUNTERS
from bench.scale_settings import (
    SETTLE_TIMEOUT_S,
    ZOOKEEPER,
)
from metaq.consumer import Consumer
from metaq.consumer.coordination import GroupMember


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
