"""A ZooKeeper-coordinated member's owner nodes: claimed all or none in one transaction, and after a conflict the
wait (watched, bounded by rebalance.backoff.ms) for the owners in the way to release them. Part of
:class:`~metaq.consumer.rebalance.ZKRebalancerListener`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from metaq.consumer.offset_store import TopicPartition
from metaq.consumer.zk_member_state import EXECUTOR_TICK_S
from metaq.errors import MetaqError
from zk_layout import ZkLayout

log = logging.getLogger(__name__)


class OwnerNodes:
    """Claiming and releasing owner nodes, for :class:`~metaq.consumer.rebalance.ZKRebalancerListener`."""

    _layout: ZkLayout
    _group: str
    _consumer_id: str
    _shutdown: threading.Event
    _conflicts: dict[TopicPartition, str] | None

    def _claim_all(self, mine: Mapping[TopicPartition, str]) -> bool:
        """Create every owner node of ``mine`` or none (one ZooKeeper transaction). On a conflict, the
        partitions still held by others are remembered for :meth:`_backoff` to wait on."""
        in_the_way = self._layout.claim_partitions(self._group, mine)
        if not in_the_way:
            return True
        self._conflicts = {key: owner for key, owner in in_the_way.items() if owner is not None}
        (topic, partition), owner = min(in_the_way.items())
        log.info("consumer %s: %s-%d is still owned by %s (%d of my %d partitions are taken); waiting for them "
                 "to be released", self._consumer_id, topic, partition, owner, len(in_the_way), len(mine))
        return False

    def _backoff(self, seconds: float) -> None:
        """The pause between attempts: rebalance.backoff.ms, as in Kafka 0.8, except after a claim conflict,
        when it ends as soon as every owner node that was in the way has been released (watched, not polled).

        Their owners delete them at the start of their own rebalance, usually milliseconds after ours
        started; sleeping the whole backoff for that is what makes 0.8 rebalances take seconds. The wait
        stays bounded by the backoff, so a member that keeps a partition (its view of the group differs
        from ours) is waited out exactly as before, and the next attempt re-reads the group."""
        conflicts, self._conflicts = self._conflicts, None
        deadline = time.monotonic() + seconds
        if conflicts is None:  # the attempt failed for another reason
            self._shutdown.wait(seconds)
            return
        changed = threading.Event()

        def watch(_event: Any) -> None:
            changed.set()

        while conflicts and not self._shutdown.is_set():
            changed.clear()  # before reading: a release between the read and the wait still wakes us
            try:
                owners = self._layout.owners_of(self._group, conflicts, watch=watch)
            except MetaqError as e:
                log.info("consumer %s: cannot watch the owner nodes in the way: %s", self._consumer_id, e)
                self._shutdown.wait(max(0.0, deadline - time.monotonic()))
                return
            conflicts = {key: owner for key, owner in conflicts.items() if owners.get(key) == owner}
            remaining = deadline - time.monotonic()
            if not conflicts or remaining <= 0:
                return
            changed.wait(min(remaining, EXECUTOR_TICK_S))  # ticks to notice shutdown

    def _release_claims(self, claims: Mapping[TopicPartition, str]) -> None:
        self._layout.release_partitions(self._group, claims)
