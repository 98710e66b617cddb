"""A ZooKeeper-coordinated member's offset nodes: its commits (fenced: a partition whose fence was lost is
revoked) and the watches on the owned partitions' nodes that notice a write not its own (an operator's forced
reset). Part of :class:`~metaq.consumer.rebalance.ZKRebalancerListener`.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Iterable
from typing import Any

from kazoo.protocol.states import WatchedEvent

from metaq.consumer.offset_store import OffsetStore, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import MetaqError, ZooKeeperUnavailableError
from metaq.metrics.consumer import ConsumerMetrics
from zk_layout import ZkLayout, paths

log = logging.getLogger(__name__)


class OffsetNodes:
    """Commits and offset-node watches, for :class:`~metaq.consumer.rebalance.ZKRebalancerListener`."""

    _layout: ZkLayout
    _group: str
    _consumer_id: str
    _store: OffsetStore
    _metrics: ConsumerMetrics | None
    _lock: threading.RLock
    _wakeup: threading.Condition
    _commit_lock: threading.Lock
    _rearm: bool
    _offset_keys: dict[str, TopicPartition]
    registry: dict[TopicPartition, PartitionTopicInfo]

    @abstractmethod
    def trigger(self, *_: Any) -> None: ...

    @abstractmethod
    def _on_offset_watch(self, event: WatchedEvent) -> None: ...

    def _watch_offset_nodes(self, mine: Iterable[TopicPartition]) -> None:
        """Arm a data watch on each owned partition's offset node, so that a forced ``offsets reset`` (or any
        write but ours) is noticed at once, not at our next commit, which may be long in coming on a quiet
        partition (README.md, "Ops tools")."""
        keys = list(mine)
        with self._wakeup:
            self._offset_keys = {paths.offset_path(self._group, *key): key for key in keys}
        self._check_offset_nodes(keys)

    def _check_offset_nodes(self, keys: Iterable[TopicPartition]) -> None:
        """Re-arm the offset watches of ``keys`` and act on the nodes someone else wrote: the partition is
        taken again (a rebalance of this member: release, claim, fence, read), so that it restarts from the
        offset now in the node. Our own commits fire the watch too and are told apart by the node version.

        A check the connection drop cut short is no sign of a change: it is made again (with every watch)
        once reconnected, in the same session. Left to the executor's error path it would schedule a retry,
        i.e. a whole rebalance right after every ZooKeeper restart, since our own commits (every
        auto.commit.interval.ms) keep such a check in flight much of the time."""
        with self._lock:
            owned = [key for key in keys if key in self.registry and not self.registry[key].is_revoked]
            if not owned:
                return
            try:
                changed = self._store.changed_behind(owned, watch=self._on_offset_watch)
            except ZooKeeperUnavailableError as e:
                log.info("consumer %s: cannot check the owned offset nodes now (%s); checked again once "
                         "reconnected", self._consumer_id, e)
                with self._wakeup:
                    self._rearm = True
                return
            if not changed:
                return
            for key, offset in sorted(changed.items()):
                self.registry[key].revoke()
                self._explain_changed_node(key, offset)
        self.trigger()

    def _explain_changed_node(self, key: TopicPartition, offset: int | None) -> None:
        """Log why an owned partition's offset node changed: while our owner node still stands, no other member
        can have fenced it (a member claims the owner node first), so an operator wrote it."""
        info = self.registry.get(key)
        try:
            owner = self._layout.owner(self._group, *key)
        except MetaqError:
            owner = None
        if info is not None and owner == info.thread_id:
            log.warning("consumer %s: the offset of %s-%d was reset to %s by an operator (its offset node changed "
                        "while this member owns the partition); restarting the partition from there",
                        self._consumer_id, key[0], key[1], "none (auto.offset.reset)" if offset is None else offset)
        else:
            log.warning("consumer %s: %s-%d is fenced by a newer owner; its offset is not committed",
                        self._consumer_id, *key)

    def _read_offset(self, key: TopicPartition) -> int | None:
        try:
            node = self._layout.read_fenced_offset(self._group, *key)
        except MetaqError:
            return None
        return None if node is None else node.offset

    def commit(self, infos: Iterable[PartitionTopicInfo] | None = None, *, include_revoked: bool = False) -> None:
        """Commit consumed offsets of owned partitions; partitions whose fence was lost are revoked."""
        # The auto-commit thread and the rebalance thread both commit. Reading the offsets and writing them
        # must be one step: otherwise offsets read by one thread before the other's newer commit could be
        # written after it, with a still valid version, moving the committed offset backwards.
        with self._commit_lock:
            self._commit(infos, include_revoked)

    def _commit(self, infos: Iterable[PartitionTopicInfo] | None, include_revoked: bool) -> None:
        chosen = list(self.registry.values()) if infos is None else list(infos)
        offsets = {info.key: info.get_consumed_offset() for info in chosen if include_revoked or not info.revoked}
        started = time.monotonic()
        try:
            result = self._store.commit(offsets)
        except MetaqError:
            if self._metrics is not None:
                self._metrics.committed(time.monotonic() - started, ok=False)
            raise
        if self._metrics is not None:
            self._metrics.committed(time.monotonic() - started, ok=True, fenced=len(result.lost))
        if result.lost:
            for key in sorted(result.lost):
                info = self.registry.get(key)
                if info is not None:
                    info.revoke()
                self._explain_changed_node(key, None if info is None else self._read_offset(key))
            log.info("consumer %s: taking %s again; rebalancing", self._consumer_id, sorted(result.lost))
            self.trigger()
