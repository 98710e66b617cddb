"""Finding partition leaders in ZooKeeper, and the thread that keeps looking for partitions without one.

As Kafka 0.8's ``LeaderFinderThread``: a partition whose leader is unknown (no state node, leader -1, the
leader's registration gone) or whose fetches failed with NOT_LEADER / UNKNOWN_TOPIC_OR_PARTITION or repeated
connection errors is handed to one thread per consumer, ``<consumer id>-leader-finder``. It re-reads the
partition's state node and the leader's registration (:meth:`metaq.client.ClusterClient.leader`) every
``refresh.leader.backoff.ms`` until it finds a leader, then hands the partition back to the fetcher manager,
which gives it to a fetch runner::

    finder = LeaderFinder("c1-leader-finder", client, backoff_s=0.2, assign=manager.assign)
    finder.start()
    finder.add([info])          # wakes the thread at once; it retries until assign() took the partition
    finder.shutdown(); finder.join(1.0)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from metaq.client.cluster import ClusterClient, Leader, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import MetaqError

log = logging.getLogger(__name__)

__all__ = ["Leader", "LeaderFinder", "TopicPartition"]

_IDLE_WAIT_S = 1.0  # with nothing to look for; add() and shutdown() wake the thread earlier anyway
_MIN_ROUND_INTERVAL_S = 0.01  # refresh.leader.backoff.ms=0 must not make the thread spin on ZooKeeper


class LeaderFinder(threading.Thread):
    """The thread that retries leader look-ups; see the module docstring.

    ``assign(info, leader)`` hands a partition to a runner and returns False when the manager is stopping
    (the partition is then dropped). It runs on this thread and must not block for long."""

    def __init__(self, name: str, client: ClusterClient, *, backoff_s: float,
                 assign: Callable[[PartitionTopicInfo, Leader], bool]) -> None:
        super().__init__(name=name, daemon=True)
        self._client = client
        self._backoff_s = max(backoff_s, _MIN_ROUND_INTERVAL_S)
        self._assign = assign
        self._lock = threading.Lock()
        self._pending: dict[TopicPartition, PartitionTopicInfo] = {}
        self._wakeup = threading.Event()
        self._stopped = threading.Event()

    def add(self, infos: Iterable[PartitionTopicInfo]) -> None:
        """Look for these partitions' leaders (at once, then every backoff until found)."""
        with self._lock:
            for info in infos:
                self._pending[info.key] = info
        self._wakeup.set()

    def pending(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._pending)

    def shutdown(self) -> None:
        """Ask the thread to stop; it returns within one ZooKeeper read. Join it to wait."""
        self._stopped.set()
        self._wakeup.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            if not self._has_pending():
                self._wakeup.wait(_IDLE_WAIT_S)
                self._wakeup.clear()  # a signal lost here is caught by _has_pending on the next turn
                continue
            try:
                self._find_round()
            except Exception:  # the thread must survive anything; the next round tries again
                log.exception("%s: looking for partition leaders failed", self.name)
            if self._has_pending():
                self._stopped.wait(self._backoff_s)  # refresh.leader.backoff.ms between rounds
        log.debug("%s stopped", self.name)

    def _has_pending(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def _find_round(self) -> None:
        """One look-up per pending partition; found ones go to the manager, revoked ones are dropped."""
        with self._lock:
            pending = list(self._pending.values())
        for info in pending:
            if self._stopped.is_set():
                return
            if info.revoked:
                self._forget(info)
                continue
            try:
                leader = self._client.leader(info.topic, info.partition, fresh=True)
            except MetaqError as e:
                log.warning("%s: cannot read the leader of %s-%d from ZooKeeper: %s", self.name, info.topic,
                            info.partition, e)
                continue
            if leader is None:
                log.debug("%s: %s-%d has no live leader yet", self.name, info.topic, info.partition)
                continue
            self._forget(info)
            if not self._assign(info, leader):
                return  # the manager is stopping; nothing more will be fetched
            log.info("%s: %s-%d is led by broker %d at %s:%d", self.name, info.topic, info.partition,
                     leader.broker_id, leader.host, leader.port)

    def _forget(self, info: PartitionTopicInfo) -> None:
        with self._lock:
            if self._pending.get(info.key) is info:
                del self._pending[info.key]
