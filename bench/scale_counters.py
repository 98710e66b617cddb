"""The instrumentation of ``bench/scale.py``: class-level wrappers (keyed by instance) around the methods the
counters come from (rebalance attempts, owner-claim conflicts, ZooKeeper requests made inside a rebalance,
fetcher starts, registrations), and a process's counters dumped for the parent.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Transaction

from metaq.consumer.fetcher_manager import FetcherManager
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_ownership import OwnerNodes
from zk_layout import ZkLayout


@dataclass
class Counters:
    """What the wrapped methods recorded; every list entry is (monotonic time, value)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    attempts: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # rebalancer -> times
    conflicts: list[tuple[float, int]] = field(default_factory=list)  # (time, partitions in the way)
    zk_requests: list[float] = field(default_factory=list)  # times of requests made inside a rebalance
    zk_ops: int = 0  # requests counting every op of a multi
    in_rebalance: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # rebalancer -> depth
    started: dict[int, tuple[float, frozenset[tuple[str, int]]]] = field(default_factory=dict)  # fetcher -> last
    registered: dict[str, float] = field(default_factory=dict)  # consumer id -> time


COUNTERS = Counters()
_local = threading.local()


@contextmanager
def instrumented() -> Iterator[Counters]:
    """Wrap the methods the counters come from; undone on exit."""
    originals: list[tuple[type, str, Any]] = []

    def wrap(cls: type, name: str, make: Callable[[Any], Any]) -> None:
        original = cls.__dict__[name]
        originals.append((cls, name, original))
        setattr(cls, name, make(original))

    def call(original: Any) -> Any:
        def wrapper(self: KazooClient, request: Any, async_object: Any) -> Any:
            if getattr(_local, "rebalancing", 0):
                with COUNTERS.lock:
                    COUNTERS.zk_requests.append(time.monotonic())
                    COUNTERS.zk_ops += len(request.operations) if isinstance(request, Transaction) else 1
            return original(self, request, async_object)
        return wrapper

    def synced(original: Any) -> Any:
        def wrapper(self: ZKRebalancerListener) -> Any:
            _local.rebalancing = getattr(_local, "rebalancing", 0) + 1
            with COUNTERS.lock:
                COUNTERS.in_rebalance[id(self)] += 1
            try:
                return original(self)
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
            keys = frozenset(i.key for i in infos if not i.revoked)
            with COUNTERS.lock:
                COUNTERS.started[id(self)] = (time.monotonic(), keys)
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
    try:
        yield COUNTERS
    finally:
        for cls, name, original in reversed(originals):
            setattr(cls, name, original)


def _counters(reset: bool) -> dict[str, Any]:
    """This process's counters (serialisable), and its CPU time; ``reset``: start counting afresh."""
    with COUNTERS.lock:
        dump = {"attempts": {f"{os.getpid()}:{k}": list(v) for k, v in COUNTERS.attempts.items()},
                "conflicts": list(COUNTERS.conflicts), "zk_requests": list(COUNTERS.zk_requests),
                "zk_ops": COUNTERS.zk_ops, "registered": dict(COUNTERS.registered), "cpu": time.process_time()}
        if reset:
            COUNTERS.attempts.clear()
            COUNTERS.conflicts.clear()
            COUNTERS.zk_requests.clear()
            COUNTERS.zk_ops = 0
            COUNTERS.registered.clear()
    return dump
