"""A ZooKeeper-coordinated member across its session: the ownership voided and the registration made again after
the session was lost, the watches re-armed after a reconnection in the same session (rebalancing only if the group
changed meanwhile), and the periodic self-check of the owner nodes. Part of
:class:`~metaq.consumer.rebalance.ZKRebalancerListener`.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from typing import Any

from metaq.consumer.offset_store import OffsetStore, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.consumer.zk_group_view import GroupView
from metaq.consumer.zk_member_state import LOST, REBALANCING, STABLE, ZkMemberStates
from metaq.errors import MetaqError
from metaq.retry import RetryPolicy

log = logging.getLogger(__name__)


class SessionRecovery(GroupView, ZkMemberStates):
    """Session loss, reconnection and self-check, for :class:`~metaq.consumer.rebalance.ZKRebalancerListener`."""

    _fetcher: Any
    _store: OffsetStore
    _lock: threading.RLock
    _session_lost: bool
    _registration_policy: RetryPolicy
    _next_self_check: float
    registry: dict[TopicPartition, PartitionTopicInfo]

    @abstractmethod
    def trigger_later(self, delay_s: float) -> None: ...

    def _handle_session_loss(self) -> None:
        """The old session's ephemerals are gone: void ownership without committing, re-register."""
        with self._lock:
            log.warning("consumer %s: ZooKeeper session lost; ownership void, re-registering", self._consumer_id)
            self._fetcher.stop_connections()
            for info in self.registry.values():
                info.revoke()
            self._subscription.clear_queues()
            self._store.release(list(self.registry))
            self.registry = {}
            try:
                self._layout.register_consumer(self._group, self._consumer_id, self._subscription.topic_count())
            except MetaqError:
                with self._wakeup:  # not connected yet: handle the loss again on the next tick
                    self._session_lost = True
                self.trigger_later(self._registration_policy.delay(1))
                raise
            if self.state == LOST:
                self._set_state(REBALANCING)  # registered again: the rebalance that follows is under way

    def _recheck(self) -> bool:
        """After the connection came back in the same session: re-arm the watches kazoo dropped and tell
        whether a rebalance is needed, i.e. whether the group changed while we could not watch it (a
        member came or went, partitions were added) or our owner nodes are not what we believe."""
        with self._lock:
            if self.state != STABLE:
                return True  # FAILED: the rebalance it needs re-arms everything
            try:
                if not self._layout.broker_ids():
                    return True
                _, mine = self._assignment()
                current = {key: info.thread_id for key, info in self.registry.items()}
                changed = mine != current or any(self._layout.owner(self._group, topic, partition) != tid
                                                 for (topic, partition), tid in mine.items())
            except MetaqError as e:
                log.info("consumer %s: re-arming watches after reconnecting failed (retrying): %s",
                         self._consumer_id, e)
                with self._wakeup:
                    self._rearm = True
                return False
            if changed:
                log.info("consumer %s: the group changed while disconnected from ZooKeeper; rebalancing",
                         self._consumer_id)
            else:
                log.info("consumer %s: reconnected to ZooKeeper; ownership unchanged, watches re-armed",
                         self._consumer_id)
            return changed

    def _self_check_fails(self) -> bool:
        """Periodically compare the owner nodes with what this member believes it owns."""
        interval = self._config.self_check_interval_ms / 1000.0
        if interval <= 0 or self.state not in (STABLE,) or time.monotonic() < self._next_self_check:
            return False
        self._next_self_check = time.monotonic() + interval
        for (topic, partition), info in list(self.registry.items()):
            if self._layout.owner(self._group, topic, partition) != info.thread_id:
                log.warning("self-check: %s-%d is not owned by %s in ZooKeeper; rebalancing",
                            topic, partition, info.thread_id)
                return True
        return False
