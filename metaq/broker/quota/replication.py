"""Replication throttles: a byte rate for the leader serving throttled replicas and one for the follower
fetching them (Kafka's ``ReplicationQuotaManager``, docs/quotas.md).

The rates are the dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` (``/config/brokers/<id>``, else ``/config/brokers/<default>``;
unlimited when unset); which replicas are throttled is the topic configs
``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas``: ``*`` or a list of
``partition:broker``, of which a broker keeps the partitions listed with its own id (Kafka's
``TopicConfigHandler.parseThrottledPartitions``). Only replicas outside the ISR are held back (the throttle
must not slow a replica that keeps up); the bytes of every throttled partition count towards the rate.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from metaq.broker.quota.rate import WindowConfig, WindowedRate
from metaq.errors import ConfigError

log = logging.getLogger(__name__)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
ALL_REPLICAS = "*"


@dataclass(frozen=True)
class ThrottledPartitions:
    """The partitions of one topic a broker throttles: ``every`` one, or those in ``partitions``."""

    every: bool = False
    partitions: frozenset[int] = frozenset()

    def covers(self, partition: int) -> bool:
        return self.every or partition in self.partitions


def parse_throttled_replicas(value: str, broker_id: int) -> ThrottledPartitions:
    """``*``, or ``p:b,p:b`` keeping the partitions whose broker is ``broker_id``; ConfigError otherwise."""
    text = value.strip()
    if text == ALL_REPLICAS:
        return ThrottledPartitions(every=True)
    if not text:
        return ThrottledPartitions()
    mine = set()
    for entry in text.split(","):
        partition, sep, broker = entry.strip().partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ConfigError(f"throttled replicas {value!r}: must be '*' or a list of partition:broker")
        if int(broker) == broker_id:
            mine.add(int(partition))
    return ThrottledPartitions(partitions=frozenset(mine))


@dataclass
class ReplicationQuota:
    """One direction's throttle (leader or follower). Thread-safe: the follower's fetchers are threads."""

    name: str
    window: WindowConfig = field(default_factory=WindowConfig)
    bound: float | None = None
    _throttled: dict[str, ThrottledPartitions] = field(default_factory=dict)
    _rate: WindowedRate | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rate = WindowedRate(self.window, simple=True)

    def set_bound(self, bound: float | None) -> None:
        with self._lock:
            if bound != self.bound:
                log.info("%s replication throttle: %s", self.name,
                         "unlimited" if bound is None else f"{bound:.0f} bytes/s")
            self.bound = bound

    def set_throttled(self, topic: str, partitions: ThrottledPartitions | None) -> None:
        """The throttled partitions of ``topic`` (None or none listed: not throttled)."""
        with self._lock:
            if partitions is None or (not partitions.every and not partitions.partitions):
                self._throttled.pop(topic, None)
            else:
                self._throttled[topic] = partitions

    def is_throttled(self, topic: str, partition: int) -> bool:
        with self._lock:
            throttled = self._throttled.get(topic)
        return throttled is not None and throttled.covers(partition)

    def is_exceeded(self, now_ms: int) -> bool:
        """Whether the rate is over the bound now (Kafka's ``isQuotaExceeded``)."""
        with self._lock:
            assert self._rate is not None
            return self.bound is not None and self._rate.measure(now_ms) > self.bound

    def record(self, size: int, now_ms: int) -> None:
        with self._lock:
            assert self._rate is not None
            self._rate.record(size, now_ms)

    def holds_back(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """Whether a replica's data is held back now (Kafka's ``shouldLeaderThrottle``/``shouldFollowerThrottle``:
        out of the ISR, throttled, and the rate is over its bound)."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_exceeded(now_ms)
