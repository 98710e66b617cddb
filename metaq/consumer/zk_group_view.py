"""What a ZooKeeper-coordinated member reads to compute its part of the assignment: the members' registrations
(live, ephemeral ones only; each read once), the subscribed topics' partitions (cached while their watch is armed),
and the assignment over them. Part of :class:`~metaq.consumer.rebalance.ZKRebalancerListener`.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections.abc import Callable
from functools import partial

from kazoo.protocol.states import WatchedEvent

from metaq.consumer.assignors import assign, assign_for
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.ids import make_thread_ids
from metaq.consumer.membership import Subscription
from metaq.consumer.offset_store import TopicPartition
from metaq.errors import MalformedNodeError, MetaqError
from zk_layout import ConsumerNode, TopicCount, ZkLayout, paths

log = logging.getLogger(__name__)


class GroupView:
    """The group as read from ZooKeeper, for :class:`~metaq.consumer.rebalance.ZKRebalancerListener`."""

    _config: ConsumerConfig
    _layout: ZkLayout
    _group: str
    _consumer_id: str
    _subscription: Subscription
    _wakeup: threading.Condition
    _rearm: bool
    _member_nodes: dict[str, ConsumerNode]
    _partition_ids: dict[str, list[int]]
    _quiet_ids: tuple[list[str], int] | None
    _topic_events: int
    _watch_events: int
    _warned_missing: set[str]
    _warned_persistent: set[str]
    generation: int

    @abstractmethod
    def _on_watch(self, event: WatchedEvent | None = None) -> None: ...

    @abstractmethod
    def _on_topic_watch(self, event: WatchedEvent | None = None) -> None: ...

    def _assignment(self) -> tuple[Callable[[], dict[TopicPartition, str]], dict[TopicPartition, str]]:
        """My part of the group's assignment as computed from ZooKeeper now (watches re-armed), and how to
        compute the whole of it (only the ``assigned`` hook wants that: at 10,000 partitions it is most of
        a rebalance's CPU, times every member)."""
        with self._wakeup:
            self._rearm = False  # reading the group sets every watch again
        topic_threads, topic_partitions = self._read_group()
        prefix = self._consumer_id + "-"
        my_threads = {tid for threads in topic_threads.values() for tid in threads
                      if tid.startswith(prefix) and tid[len(prefix):].isdigit()}
        strategy, hashed = self._config.partition_assignment_strategy, self._config.partition_assignment_roundrobin_hash
        mine = assign_for(strategy, topic_threads, topic_partitions, my_threads, hashed)
        return partial(assign, strategy, topic_threads, topic_partitions, hashed), mine

    def _read_group(self) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
        """Every member's thread ids per topic I subscribe to, and those topics' partitions."""
        watch = self._on_watch
        all_topics = self._layout.topics(watch=watch if self._needs_topic_watch() else None)
        my_topics = self._subscription.topic_count().streams_per_topic(
            all_topics, exclude_internal=self._config.exclude_internal_topics)
        topic_threads: dict[str, list[str]] = {t: [] for t in my_topics}
        for member, registration in self._registrations().items():
            per_topic = registration.streams_per_topic(
                all_topics, exclude_internal=self._config.exclude_internal_topics)
            for topic, streams in per_topic.items():
                if topic in topic_threads:
                    topic_threads[topic].extend(make_thread_ids(member, streams))
        return topic_threads, self._topic_partitions(list(my_topics))

    def _topic_partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """Each topic's partitions (a missing topic is left out, with a warning). A topic node read before is
        not read again while the data watch set then is armed (no event since): at 1,000 partitions a node
        is some 12 KB, read by every member at every rebalance. Any topic event or connection drop (kazoo
        forgets every watch then) empties the cache; one during a read keeps that read out of it."""
        with self._wakeup:
            cached = {topic: self._partition_ids[topic] for topic in topics if topic in self._partition_ids}
            events = self._topic_events
        unread = [topic for topic in topics if topic not in cached]
        read = self._layout.topic_partition_ids(unread, watch=self._on_topic_watch) if unread else {}
        fresh = {topic: list(ids) for topic, ids in read.items() if ids is not None}
        with self._wakeup:
            if self._topic_events == events:
                self._partition_ids.update(fresh)
        for topic, found in read.items():
            if found is None and topic not in self._warned_missing:
                log.warning("consumer %s: topic %s does not exist yet; waiting for it", self._consumer_id, topic)
                self._warned_missing.add(topic)
        return {topic: ids for topic in topics if (ids := cached.get(topic, fresh.get(topic))) is not None}

    def _needs_topic_watch(self) -> bool:
        """Watch /brokers/topics children for wildcards, and while a static topic does not exist yet."""
        return self._subscription.is_wildcard or bool(self._warned_missing) or self.generation == 0

    def _registrations(self) -> dict[str, TopicCount]:
        """The members the assignment is computed for.

        Left out (with a warning naming the node): a registration that does not decode (including a topic
        filter RE2 rejects), and one held by a *persistent* node. Kafka 0.8 counts the latter too, but a
        persistent node is no live consumer: nothing ever removes it, and whatever streams it asks for (a
        fake member asking for 100,000 takes every partition) would be assigned to nobody who reads. So
        metaq members assign among the ephemeral, i.e. live, members only. A Kafka 0.8 member of the same
        group still counts such a node, so the two disagree until it is deleted: the warning says so."""
        members: dict[str, TopicCount] = {}
        quiet, self._quiet_ids = self._quiet_ids, None
        with self._wakeup:  # the list the coalescing wait just read, if no watch fired since (its watch is armed)
            unchanged = quiet is not None and quiet[1] == self._watch_events
        ids = quiet[0] if quiet is not None and unchanged else self._layout.consumer_ids(self._group,
                                                                                       watch=self._on_watch)
        # A member's registration never changes (one subscription per connector, and consumer ids are unique
        # per process start): read only the members not seen before, pipelined, instead of every member at
        # every rebalance of every member (N x N reads per membership change).
        known = {member: self._member_nodes[member] for member in ids if member in self._member_nodes}
        fresh = self._layout.read_consumer_nodes(self._group, [member for member in ids if member not in known])
        self._member_nodes = {**known, **{m: n for m, n in fresh.items() if not isinstance(n, MalformedNodeError)}}
        for member, node in sorted({**known, **fresh}.items()):
            if isinstance(node, MalformedNodeError):
                log.warning("ignoring member with a malformed registration: %s", node)
                continue
            if not node.ephemeral:
                if member not in self._warned_persistent:
                    self._warned_persistent.add(member)
                    log.warning("consumer %s: ignoring member %s: its node %s is persistent, not ephemeral, so "
                                "it is no live consumer (a fake or left-over registration); delete that node",
                                self._consumer_id, member, self._layout.full_path(
                                    paths.consumer_id_path(self._group, member)))
                continue
            members[member] = node.registration
        if self._consumer_id not in members:
            raise MetaqError(f"consumer {self._consumer_id} is not registered in group {self._group}")
        return members
