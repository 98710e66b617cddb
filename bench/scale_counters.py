"""bench.scale's instrumentation: class-level wrappers of the methods its counters come from, keyed by
instance (every list entry is (monotonic time, value))."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.serialization import Transaction

from bench.scale_settings import (
    KAFKA_STEPS,
)
from metaq.consumer.coordination import GroupMember
from metaq.consumer.fetcher_manager import FetcherManager
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_ownership import OwnerNodes
from zk_layout import ZkLayout

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
        cls = next(c for c in cls.__mro__ if name in c.__dict__)  # a mixin's (GroupMember's steps)
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
