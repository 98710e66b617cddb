"""The broker's view of the cluster, read from ZooKeeper: live brokers, topics, partition leaders.

A watcher thread reloads a whole immutable :class:`ClusterSnapshot` whenever a watched node changes
(bursts of events coalesce into one reload) and publishes it by a single reference assignment, so the
event loop reads it without locks. Watches are one-shot; every reload sets them again, and a reload
also follows each reconnection so watches lost with an expired session come back.

Nodes are written by anyone with access to ZooKeeper, so one that cannot be served (it does not decode, or
holds an id outside Kafka's int32) is left out of the snapshot and the rest stays current: a bad node
must neither freeze the view (new topics invisible) nor make every Metadata response unencodable. Each
such node is logged when it first appears or changes, not at every reload.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metaq.errors import ConfigError, MalformedNodeError, MetaqError
from metaq.retry import zookeeper_follower
from zk_layout import BrokerInfo, ZkLayout, parse_endpoint, paths
from zk_layout.topic_formats import INTERNAL_TOPICS

log = logging.getLogger(__name__)

SAFETY_RELOAD_S = 30.0  # reload even without events, in case a watch was missed


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterSnapshot:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionMeta]] = field(default_factory=dict)
    cluster_id: str | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)  # topics created with an id (node version 3)
    # broker id -> listener name -> (host, port): each client gets the endpoints of the listener it used
    endpoints: dict[int, dict[str, tuple[str, int]]] = field(default_factory=dict)

    def address(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """(host, port) of broker ``broker_id`` on ``listener``; None if it has no such listener."""
        return self.endpoints.get(broker_id, {}).get(listener)
    controller: int | None = None  # the broker in /controller

    @property
    def controller_id(self) -> int:
        """The elected controller; between elections the lowest live broker id, as a stable answer."""
        if self.controller is not None and self.controller in self.brokers:
            return self.controller
        return min(self.brokers) if self.brokers else -1

    def has_leaders(self, topic: str) -> bool:
        """Whether ``topic`` is known and every partition has a leader: the controller creates a new topic's
        partition states, so a creator waits for this (as Kafka's ``DelayedCreatePartitions``)."""
        parts = self.topics.get(topic)
        return parts is not None and bool(parts) and all(meta.leader >= 0 for meta in parts.values())

    def partition(self, topic: str, partition: int) -> PartitionMeta | None:
        parts = self.topics.get(topic)
        return parts.get(partition) if parts else None


def _endpoints(info: BrokerInfo) -> dict[str, tuple[str, int]]:
    """Listener name -> (host, port) of a registration; a 0.8-era node's host/port count as PLAINTEXT."""
    result: dict[str, tuple[str, int]] = {}
    for endpoint in info.endpoints:
        parsed = parse_endpoint(endpoint)
        if parsed is not None and parsed.port <= 65535:
            result.setdefault(parsed.listener, (parsed.host, parsed.port))
    if not result and info.host is not None and 0 <= info.port <= 65535:
        result["PLAINTEXT"] = (info.host, info.port)
    return result


class MetadataWatcher:
    """Keeps ``snapshot`` current. Thread: ``metaq-broker-metadata``.

    ``before_publish`` runs on that thread with each new snapshot before requests can see it (a new topic's
    config is loaded there, so no request creates its log with the broker's defaults); ``on_change`` after."""

    def __init__(self, layout: ZkLayout, on_change: Callable[[ClusterSnapshot], None] | None = None,
                 before_publish: Callable[[ClusterSnapshot], None] | None = None) -> None:
        self._layout = layout
        self._on_change = on_change
        self._before_publish = before_publish
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self._retry = zookeeper_follower("metadata")
        self._reloaded = threading.Condition()
        self.snapshot = ClusterSnapshot()
        self.skipped: dict[str, str] = {}  # node path -> why it is left out of the snapshot (as last logged)
        self._thread = threading.Thread(target=self._run, name="metaq-broker-metadata", daemon=True)

    def start(self) -> None:
        self.reload()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._dirty.set()
        self._thread.join(timeout=5)  # bounded: a reload blocked on ZooKeeper must not hang shutdown

    def request_reload(self, *_: Any) -> None:
        """Watch callback and external trigger; never blocks (kazoo callbacks must not)."""
        self._dirty.set()

    def wait_for(self, predicate: Callable[[ClusterSnapshot], bool], timeout: float) -> bool:
        """Block until the snapshot satisfies ``predicate`` (for tests and auto-creation)."""
        with self._reloaded:
            return self._reloaded.wait_for(lambda: predicate(self.snapshot), timeout=timeout)

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._dirty.wait(timeout=SAFETY_RELOAD_S)  # timeout: periodic safety reload
            if self._stopped.is_set():
                return
            self._dirty.clear()
            try:
                self.reload()
            except MetaqError as e:  # zk_layout translates every kazoo error into ZooKeeperError
                log.warning("metadata reload from ZooKeeper failed (will retry): %s", e)
                self._stopped.wait(self._retry.delay(1))  # back off before retrying
                self._dirty.set()

    def reload(self) -> None:
        watch = self.request_reload
        skipped: dict[str, str] = {}
        brokers = self._brokers(skipped)
        topics: dict[str, dict[int, PartitionMeta]] = {}
        topic_ids: dict[str, str] = {}
        # a marker naming an internal topic is never obeyed (the brokers remove it): the topic stays served
        deleting = set(self._layout.topics_marked_for_deletion(watch=watch)) - INTERNAL_TOPICS
        for topic in self._layout.topics(watch=watch):
            if topic in deleting:
                continue  # being deleted (/admin/delete_topics): clients must stop using it everywhere at once
            try:
                parts = self._topic(topic, skipped, topic_ids)
            except MalformedNodeError as e:
                skipped[e.path] = str(e)
                continue
            except ConfigError as e:  # a child whose name is no topic name
                path = self._layout.full_path(f"{paths.BROKER_TOPICS}/{topic}")
                skipped[path] = f"{path}: {e}"
                continue
            if parts is not None:
                topics[topic] = parts
        try:
            cluster_id = self._layout.cluster_id()
        except MalformedNodeError as e:
            skipped[e.path] = str(e)
            cluster_id = None
        try:
            holder = self._layout.controller(watch=watch)
        except MalformedNodeError as e:
            skipped[e.path] = str(e)
            holder = None
        self._report(skipped)
        snapshot = ClusterSnapshot(brokers=brokers, topics=topics, cluster_id=cluster_id, topic_ids=topic_ids,
                                   endpoints={b: _endpoints(info) for b, info in brokers.items()},
                                   controller=holder.broker_id if holder is not None else None)
        if self._before_publish is not None:
            self._before_publish(snapshot)
        with self._reloaded:
            self.snapshot = snapshot
            self._reloaded.notify_all()
        if self._on_change is not None:
            self._on_change(snapshot)

    def _brokers(self, skipped: dict[str, str]) -> dict[int, BrokerInfo]:
        """The registrations clients can use: decodable, with an int32 id and an endpoint (or, for a 0.8-era
        node, a PLAINTEXT host and port)."""
        malformed: list[MalformedNodeError] = []
        brokers = self._layout.brokers(watch=self.request_reload, skipped=malformed)
        skipped.update((e.path, str(e)) for e in malformed)
        for broker_id, info in list(brokers.items()):
            if not _endpoints(info):
                path = self._layout.full_path(paths.broker_path(broker_id))
                skipped[path] = f"broker {broker_id} at {path} has no endpoint clients could use"
                del brokers[broker_id]
        return brokers

    def _topic(
        self, topic: str, skipped: dict[str, str], topic_ids: dict[str, str]
    ) -> dict[int, PartitionMeta] | None:
        """A topic's partitions (None if it went away); its id goes to ``topic_ids``. A partition whose state
        node does not decode has no leader (clients are told LEADER_NOT_AVAILABLE for it alone)."""
        watch = self.request_reload
        assignment = self._layout.topic_assignment(topic, watch=watch)
        if assignment is None:
            return None
        if assignment.topic_id is not None:
            topic_ids[topic] = assignment.topic_id
        parts: dict[int, PartitionMeta] = {}
        for partition, replicas in assignment.partitions.items():
            try:
                state = self._layout.partition_state(topic, partition, watch=watch)
            except MalformedNodeError as e:
                skipped[e.path] = str(e)
                state = None
            parts[partition] = PartitionMeta(
                leader=state.leader if state else -1,
                leader_epoch=state.leader_epoch if state else -1,
                replicas=tuple(replicas),
                isr=tuple(state.isr) if state else (),
            )
        return parts

    def _report(self, skipped: dict[str, str]) -> None:
        """Log each skipped node once per change (the periodic reload must not repeat it)."""
        for path, reason in sorted(skipped.items()):
            if self.skipped.get(path) != reason:
                log.warning("metadata: leaving out a node clients cannot be served: %s", reason)
        for path in sorted(self.skipped.keys() - skipped.keys()):
            log.info("metadata: %s is no longer left out (fixed or deleted)", path)
        self.skipped = skipped
