"""A broker-coordinated member's incremental rebalancing (``cooperative-sticky``, KIP-429): it keeps delivering
what it owns while the group rebalances, revokes only what moves and takes only what is added. Part of
:class:`~metaq.consumer.coordination.GroupMember`; the assignor is metaq.consumer.cooperative.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from metaq.consumer.cooperative import AssignmentChange
from metaq.consumer.group_commits import GroupCommits
from metaq.consumer.group_join import JoinExchange
from metaq.consumer.group_member_state import STABLE, Generation, _grouped
from metaq.consumer.ids import make_thread_ids
from metaq.consumer.membership import RebalanceListener
from metaq.consumer.offset_store import TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import MetaqError

log = logging.getLogger(__name__)


class CooperativeSide(JoinExchange, GroupCommits):
    """KIP-429's join preparation and join completion, for :class:`~metaq.consumer.coordination.GroupMember`."""

    _fetcher: Any
    _listener: RebalanceListener | None

    @abstractmethod
    def _safe_hook(self, hook: Callable[..., Any], *args: Any) -> None: ...

    def _prepare_cooperative_join(self) -> None:
        """KIP-429's onJoinPrepare: keep fetching and delivering what is owned (only a subscription change
        revokes before joining, and metaq's subscriptions are fixed); commit it while the generation is ours."""
        if self._config.auto_commit_enable and self.registry:
            try:
                self.commit()
            except MetaqError as e:
                log.warning("consumer %s: commit before rejoining failed: %s", self._consumer_id, e)
        subscribed = set(self._topics())
        gone = {key: info for key, info in self.registry.items() if key[0] not in subscribed}
        if gone:  # a wildcard filter that no longer matches a topic: revoke its partitions before joining
            for info in gone.values():
                info.revoke()
            if self._config.auto_commit_enable:
                try:
                    self.commit(gone.values(), include_revoked=True)
                except MetaqError as e:
                    log.warning("consumer %s: commit of unsubscribed partitions failed: %s", self._consumer_id, e)
            if self._listener is not None:
                self._safe_hook(self._listener.before_release, _grouped(gone))
            self.registry = {key: info for key, info in self.registry.items() if key not in gone}

    def _take_incremental(self, generation: Generation, partitions: list[TopicPartition]) -> None:
        """``ConsumerCoordinator.onJoinComplete`` with the cooperative protocol: keep what is assigned again,
        revoke (commit, then ``before_release``) only what is not and rejoin so that it can move, start the
        added partitions (``assigned`` names only them)."""
        change = AssignmentChange.of((k for k, i in self.registry.items() if not i.revoked), partitions)
        offsets = self._fetch_offsets(sorted(change.added))  # first: if it fails, nothing has changed yet
        for info in self.registry.values():
            info.generation = generation.generation_id  # kept and revoked partitions commit in this generation
        revoked = [self.registry[key] for key in sorted(change.revoked)]
        for info in revoked:
            info.revoke()
        if revoked and self._config.auto_commit_enable:
            try:
                self.commit(revoked, include_revoked=True)
            except MetaqError as e:
                log.warning("consumer %s: commit of revoked partitions failed: %s", self._consumer_id, e)
        kept = {key: info for key, info in self.registry.items() if key in change.kept}
        added = self._new_infos(sorted(change.added), offsets, kept)
        self._committed = {key: o for key, o in self._committed.items() if key in kept}
        self._committed.update({key: o for key, o in offsets.items() if key in added})
        self.registry = {**kept, **added}
        self._set_state(STABLE)
        if self._listener is not None and revoked:
            self._safe_hook(self._listener.before_release, _grouped(info.key for info in revoked))
        if self._listener is not None and added:
            view: dict[str, dict[int, str]] = {}
            for (topic, partition), info in added.items():
                view.setdefault(topic, {})[partition] = info.thread_id
            self._safe_hook(self._listener.assigned, self._consumer_id, view)
        if revoked:  # the second round gives them to their new owners
            self.request_rejoin(f"revoked {sorted(change.revoked)}; rejoining so that they can move")
        self._fetcher.start_connections(added.values())
        log.info("consumer %s (member %s) owns %s (generation %d): kept %d, added %s, revoked %s",
                 self._consumer_id, generation.member_id, sorted(self.registry), generation.generation_id,
                 len(kept), sorted(change.added), sorted(change.revoked))

    def _new_infos(self, partitions: list[TopicPartition], offsets: Mapping[TopicPartition, int],
                   kept: Mapping[TopicPartition, PartitionTopicInfo]) -> dict[TopicPartition, PartitionTopicInfo]:
        """Added partitions, each to the topic's stream with the fewest of its partitions so far."""
        counts = self._stream_counts()
        load: dict[str, int] = {}
        for info in kept.values():
            load[info.thread_id] = load.get(info.thread_id, 0) + 1
        infos: dict[TopicPartition, PartitionTopicInfo] = {}
        for topic, partition in partitions:
            threads = make_thread_ids(self._consumer_id, counts[topic])
            tid = min(threads, key=lambda t: (load.get(t, 0), threads.index(t)))
            load[tid] = load.get(tid, 0) + 1
            start = offsets.get((topic, partition), -1)
            infos[(topic, partition)] = PartitionTopicInfo(
                topic, partition, self._subscription.queue_for(topic, tid), start, start,
                self.generation_info.generation_id, tid)
        return infos
