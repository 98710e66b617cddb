"""Topic partitions and their leaders, read from ZooKeeper (not from Metadata requests).

The producer reads the Kafka 0.8 layout that the broker and tools maintain: ``/brokers/topics/<t>`` for the
partitions, ``.../partitions/<p>/state`` for each leader, ``/brokers/ids/<id>`` for its address::

    metadata = ClusterMetadata.from_zookeeper("127.0.0.1:2181/metaq")
    metadata.partitions_for("clicks")          # [0, 1, 2]
    metadata.leader_for("clicks", 1)           # Leader(host='127.0.0.1', port=9092, broker_id=0)

Reads are cached per topic for ``metadata.max.age.ms``; :meth:`ClusterMetadata.invalidate` forces the next
lookup to go back to ZooKeeper (after NOT_LEADER_OR_FOLLOWER and the like). Tests substitute a fake layout
(any object with the ZkLayout methods below) or a whole fake ClusterMetadata.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from metaq.errors import MetaqError, UnknownTopicError

log = logging.getLogger(__name__)

_RETRY_FAILED_READ = 1.0  # seconds before re-reading ZooKeeper after a failed read of a known topic


class Leader(NamedTuple):
    host: str
    port: int
    broker_id: int


class Layout(Protocol):
    """The part of ``zk_layout.ZkLayout`` the producer reads."""

    def topic_assignment(self, topic: str) -> Any: ...  # .partitions: dict[int, tuple[int, ...]]

    def partition_state(self, topic: str, partition: int) -> Any: ...  # .leader, .leader_epoch, .isr

    def brokers(self) -> dict[int, Any]: ...  # id -> .id, .host, .port


@dataclass(frozen=True)
class TopicInfo:
    """One topic as read at ``read_at`` (time.monotonic())."""

    name: str
    partitions: tuple[int, ...]  # sorted
    available: tuple[int, ...]  # partitions with a registered leader
    leaders: dict[int, Leader] = field(repr=False)
    read_at: float


class ClusterMetadata:
    """Cached view of the topics a producer writes; thread-safe."""

    def __init__(self, layout: Layout, *, max_age_ms: int = 300000,
                 on_close: Callable[[], None] | None = None) -> None:
        self._layout = layout
        self._max_age = max_age_ms / 1000.0
        self._on_close = on_close
        self._topics: dict[str, TopicInfo] = {}
        self._lock = threading.Lock()  # serialises ZooKeeper reads so concurrent misses do one refresh

    @classmethod
    def from_zookeeper(cls, connect: str, *, session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                       max_age_ms: int = 300000) -> ClusterMetadata:
        """Connect a kazoo client (via metaq.zkclient) and read through zk_layout.ZkLayout."""
        from metaq import zkclient  # imported late: tests that inject metadata need no ZooKeeper code
        from zk_layout import ZkLayout

        client = zkclient.connect(connect, session_timeout_ms=session_timeout_ms,
                                  connection_timeout_ms=connection_timeout_ms)
        return cls(ZkLayout(client), max_age_ms=max_age_ms, on_close=lambda: _stop_kazoo(client))

    def refresh(self, topic: str) -> TopicInfo | None:
        """Read ``topic`` from ZooKeeper now; None (and forgotten) if it does not exist."""
        with self._lock:
            return self._read(topic)

    def topic(self, topic: str) -> TopicInfo:
        """The cached topic, re-read when missing or older than metadata.max.age.ms; raises UnknownTopicError."""
        info = self._topics.get(topic)
        if info is None or time.monotonic() - info.read_at > self._max_age:
            with self._lock:
                info = self._topics.get(topic)
                if info is None or time.monotonic() - info.read_at > self._max_age:
                    info = self._read_or_keep(topic, info)
        if info is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist in ZooKeeper")
        return info

    def partitions_for(self, topic: str) -> list[int]:
        return list(self.topic(topic).partitions)

    def leader_for(self, topic: str, partition: int) -> Leader | None:
        """The partition's leader as last read, or None if it has none (or the topic is gone)."""
        try:
            return self.topic(topic).leaders.get(partition)
        except UnknownTopicError:
            return None

    def invalidate(self, topic: str) -> None:
        """Make the next lookup of ``topic`` read ZooKeeper again."""
        info = self._topics.get(topic)
        if info is not None:
            self._topics[topic] = TopicInfo(info.name, info.partitions, info.available, info.leaders,
                                            read_at=-float("inf"))

    def close(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    def _read_or_keep(self, topic: str, cached: TopicInfo | None) -> TopicInfo | None:
        """Re-read ``topic``; if ZooKeeper fails and we know the topic, keep using what we know for a while."""
        try:
            return self._read(topic)
        except MetaqError as e:
            if cached is None:
                raise
            log.warning("cannot re-read topic %s from ZooKeeper, using older metadata: %s", topic, e)
            retry_in = min(_RETRY_FAILED_READ, self._max_age)
            kept = TopicInfo(cached.name, cached.partitions, cached.available, cached.leaders,
                             read_at=time.monotonic() - self._max_age + retry_in)
            self._topics[topic] = kept
            return kept

    def _read(self, topic: str) -> TopicInfo | None:
        assignment = self._layout.topic_assignment(topic)
        if assignment is None:
            self._topics.pop(topic, None)
            return None
        brokers = self._layout.brokers()
        leaders: dict[int, Leader] = {}
        for partition, replicas in assignment.partitions.items():
            leader = self._leader(topic, partition, replicas, brokers)
            if leader is not None:
                leaders[partition] = leader
        partitions = tuple(sorted(assignment.partitions))
        info = TopicInfo(topic, partitions, tuple(p for p in partitions if p in leaders), leaders,
                         time.monotonic())
        self._topics[topic] = info
        log.debug("read topic %s from ZooKeeper: %d partitions, %d with a leader", topic, len(partitions),
                  len(leaders))
        return info

    def _leader(self, topic: str, partition: int, replicas: tuple[int, ...],
                brokers: dict[int, Any]) -> Leader | None:
        state = self._layout.partition_state(topic, partition)
        if state is not None:
            broker_id = state.leader
        else:
            # No state node yet (a topic created by hand): assume the preferred replica leads, if it is up;
            # a wrong guess is answered NOT_LEADER_OR_FOLLOWER and retried after a refresh.
            broker_id = next((r for r in replicas if r in brokers), -1)
        info = brokers.get(broker_id)
        if broker_id < 0 or info is None or not info.host or info.port < 0:  # no PLAINTEXT endpoint
            return None
        return Leader(info.host, int(info.port), int(broker_id))


def _stop_kazoo(client: Any) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # closing is best effort: the session expires on its own
        log.warning("closing the ZooKeeper client failed", exc_info=True)
