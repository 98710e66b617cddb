"""The cluster as the Spark driver sees it: topics and leaders from ZooKeeper (or the brokers' Metadata), log
offsets from the leaders.

    cluster = Cluster.for_read(options)              # ZooKeeper (or Metadata) is asked on first use
    parts = cluster.partitions(cluster.topics(options.subscription))
    cluster.log_offsets(parts, LATEST)               # {("clicks", 0): 120, ...} by ListOffsets
                                                     # (read_committed: the last stable offset)
    cluster.commit("etl", {("clicks", 0): 120})      # never moves a group's offset backwards
    cluster.close()

ZooKeeper is read through :class:`zk_layout.ZkLayout`; with the option ``bootstrap.servers`` instead, topics,
partitions and leaders come from Metadata answers (:class:`metaq.client.metadata.MetadataLayout`, as the
broker-coordinated consumer without ZooKeeper) and no ZooKeeper is reached. The brokers are reached through
:class:`metaq.client.ClusterClient`. The group's offsets live in ZooKeeper, or with ``group.coordination=kafka``
in ``__consumer_offsets`` (OffsetFetch / OffsetCommit over the offsets channel, as the ops tools use it:
:class:`metaq.client.group_offsets.KafkaGroupOffsets`), where ``metaq groups describe`` and Kafka's tools see
them. Topics, partitions and leaders are cached for ``metadata.max.age.ms`` because a streaming query asks
for the latest offsets up to a hundred times a second while idle; a failed ListOffsets drops the cache at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from metaq.client.cluster import ClusterClient, Leader
from metaq.client.group_offsets import LIVE_GROUP_ERRORS, KafkaGroupOffsets, error_name
from metaq.client.metadata import MetadataLayout
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK
from metaq.errors import (
    BrokerConnectionError,
    ConfigError,
    GroupActiveError,
    MalformedNodeError,
    MetaqError,
    UnknownTopicError,
    ZooKeeperUnavailableError,
    for_code,
)
from metaq.retry import spark_list_offsets
from metaq.spark.offset_ranges import Offsets, TopicPartition
from metaq.spark.options import ReadOptions, Subscription
from metaq.zkclient import connect
from metaq.zksecurity import ZooKeeperSecurity
from zk_layout import ZkLayout

if TYPE_CHECKING:  # for the annotation only: importing this module needs no more than it did
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

_LIST_OFFSETS_POLICY = spark_list_offsets()


@dataclass
class _Topology:
    """One reading of the subscribed part of ZooKeeper."""

    read_at: float
    topics: list[str]
    partitions: dict[str, list[int]] = field(default_factory=dict)
    leaders: dict[TopicPartition, Leader | None] = field(default_factory=dict)


class Cluster:
    """Topics, leaders and offsets; see the module docstring. Not thread-safe: one per reader."""

    def __init__(self, zookeeper_connect: str | None = None, *, bootstrap_servers: str | None = None,
                 client_id: str = "metaq-spark", request_timeout_ms: int = 30000,
                 session_timeout_ms: int = 10000, connection_timeout_ms: int = 10000,
                 metadata_max_age_ms: int = 1000, zk_security: ZooKeeperSecurity | None = None,
                 security: SecurityConfig | None = None, broker_version_fallback: str = DEFAULT_FALLBACK,
                 isolation_level: int = 0, group_coordination: str = "zookeeper") -> None:
        if bool(zookeeper_connect) == bool(bootstrap_servers):
            raise ConfigError("option 'zookeeper.connect' or 'bootstrap.servers': exactly one is required")
        self.zookeeper_connect = zookeeper_connect
        self.bootstrap_servers = bootstrap_servers
        self._group_coordination = group_coordination  # where the group's offsets are: zookeeper or kafka
        self._fallback = broker_version_fallback
        self._isolation_level = isolation_level  # 1: the latest offset is the last stable offset
        self._zk_security = zk_security
        self._security = security or SecurityConfig()
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._session_timeout_ms = session_timeout_ms
        self._connection_timeout_ms = connection_timeout_ms
        self._max_age_ms = metadata_max_age_ms
        self._max_age_s = metadata_max_age_ms / 1000.0
        self._zk: KazooClient | None = None
        self._layout: ZkLayout | MetadataLayout | None = None
        self._zk_layout: ZkLayout | None = None
        self._client: ClusterClient | None = None
        self._topology: _Topology | None = None
        self._subscription: Subscription | None = None
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        self._kafka_offsets: KafkaGroupOffsets | None = None

    @classmethod
    def for_read(cls, options: ReadOptions) -> Cluster:
        return cls(options.zookeeper_connect, bootstrap_servers=options.bootstrap_servers,
                   client_id=options.client_id,
                   request_timeout_ms=options.request_timeout_ms, session_timeout_ms=options.zk_session_timeout_ms,
                   connection_timeout_ms=options.zk_connection_timeout_ms,
                   metadata_max_age_ms=options.metadata_max_age_ms, zk_security=options.zk_security,
                   security=options.security, broker_version_fallback=options.broker_version_fallback,
                   isolation_level=options.isolation, group_coordination=options.group_coordination)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- where the cluster is: ZooKeeper or Metadata ------------------------------------------------------

    @property
    def layout(self) -> ZkLayout | MetadataLayout:
        """Where topics and leaders are read, asked on first use (so that creating a reader stays cheap)."""
        if self._layout is None:
            self._layout = self._metadata_layout() if self.bootstrap_servers else self.zookeeper
        return self._layout

    @property
    def where(self) -> str:
        """The cluster as the options name it, for messages."""
        if self.bootstrap_servers:
            return f"the brokers at {self.bootstrap_servers} (option 'bootstrap.servers')"
        return f"ZooKeeper at {self.zookeeper_connect}"

    def _metadata_layout(self) -> MetadataLayout:
        """``bootstrap.servers``: one Metadata answer is reused for ``metadata.max.age.ms`` at most."""
        assert self.bootstrap_servers is not None
        return MetadataLayout.connect(self.bootstrap_servers, self._settings(), option="option 'bootstrap.servers':",
                                      min_refresh_s=self._max_age_s)

    @property
    def zookeeper(self) -> ZkLayout:
        """The ZooKeeper layout, connecting on first use; options without ``zookeeper.connect`` have no group
        offsets there (ReadOptions refuses ``group.coordination=zookeeper`` with ``bootstrap.servers``)."""
        if self._zk_layout is None:
            if not self.zookeeper_connect:
                raise ConfigError("option 'zookeeper.connect': a value is required for the group's offsets in "
                                  "ZooKeeper (or set group.coordination=kafka)")
            try:
                self._zk = connect(self.zookeeper_connect, session_timeout_ms=self._session_timeout_ms,
                                   connection_timeout_ms=self._connection_timeout_ms, security=self._zk_security)
            except ZooKeeperUnavailableError as e:
                raise ZooKeeperUnavailableError(f"metaq: {e} (option 'zookeeper.connect' is "
                                                f"{self.zookeeper_connect!r})") from e
            self._zk_layout = ZkLayout(self._zk)
        return self._zk_layout

    def _settings(self) -> ConnectionSettings:
        return ConnectionSettings(client_id=self._client_id, request_timeout_ms=self._request_timeout_ms,
                                  security=self._security, broker_version_fallback=self._fallback)

    @property
    def client(self) -> ClusterClient:
        """The cluster client over :attr:`layout` (connections to leaders are opened on first use)."""
        if self._client is None:
            self._client = ClusterClient(self.layout, self._settings(), metadata_max_age_ms=self._max_age_ms)
        return self._client

    def topics(self, subscription: Subscription, *, strict: bool = True) -> list[str]:
        """The subscribed topics that exist. ``strict``: a named topic that does not exist is an error."""
        topology = self._read_topology(subscription)
        if strict and subscription.pattern is None:
            missing = [t for t in subscription.topics if t not in topology.topics]
            if missing:
                raise UnknownTopicError(
                    f"topic {', '.join(map(repr, missing))} (option 'subscribe') does not exist in {self.where}")
        return list(topology.topics)

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        topology = self._require_topology()
        return [(t, p) for t in topics for p in topology.partitions.get(t, [])]

    def leader(self, key: TopicPartition) -> Leader | None:
        return self._require_topology().leaders.get(key)

    def invalidate(self) -> None:
        """Forget topics and leaders: the next call reads ZooKeeper (or Metadata) again."""
        if self._topology is not None:
            self._topology.read_at = float("-inf")
        if isinstance(self._layout, MetadataLayout):
            self._layout.invalidate()
        if self._client is not None:
            self._client.invalidate()

    def _require_topology(self) -> _Topology:
        if self._topology is None:
            raise MetaqError("metaq: topics() must be called before partitions or leaders are asked for")
        return self._topology

    def _read_topology(self, subscription: Subscription) -> _Topology:
        cached = self._topology
        if cached is not None and self._subscription == subscription and \
                time.monotonic() - cached.read_at < self._max_age_s:
            return cached
        try:
            self._topology = self._load_topology(subscription)
        except (ZooKeeperUnavailableError, BrokerConnectionError) as e:
            if cached is None or self._subscription != subscription:
                raise
            log.warning("metaq: %s unavailable, using topics and leaders read %.0f s ago: %s", self.where,
                        time.monotonic() - cached.read_at, e)
            return cached
        self._subscription = subscription
        return self._topology

    def _load_topology(self, subscription: Subscription) -> _Topology:
        client = self.client
        topology = _Topology(time.monotonic(), subscription.select(self.layout.topics()))  # the layout the client reads
        for topic in topology.topics:
            try:
                info = client.topic(topic)
            except UnknownTopicError:  # deleted between listing and reading
                continue
            topology.partitions[topic] = list(info.partitions)
            for partition in info.partitions:
                topology.leaders[(topic, partition)] = info.leaders.get(partition)
        topology.topics = [t for t in topology.topics if t in topology.partitions]
        return topology

    # -- offsets in the logs -------------------------------------------------------------------------

    def log_offsets(self, keys: Iterable[TopicPartition], which: int) -> Offsets:
        """Earliest (-2) or latest (-1) offset of each partition, from its leader. Partitions without a
        reachable leader after a failover's time (metaq.retry.SPARK_FAILOVER_S) raise :class:`MetaqError`
        naming them."""
        pending = sorted(set(keys))
        result: Offsets = {}
        attempt = 0
        started = time.monotonic()
        while True:
            attempt += 1
            failures = self._list_offsets_once(pending, which, result)
            pending = sorted(failures)
            if not pending:
                return result
            log.info("metaq: ListOffsets failed for %s (attempt %d): %s", pending, attempt,
                     "; ".join(sorted(set(failures.values()))))
            self.invalidate()
            if self._subscription is not None:
                self._read_topology(self._subscription)
            if _LIST_OFFSETS_POLICY.exhausted(attempt, time.monotonic() - started):
                break
            time.sleep(_LIST_OFFSETS_POLICY.delay(attempt))
        raise MetaqError(f"metaq: cannot list offsets of {', '.join(f'{t}-{p}' for t, p in pending)}: "
                         f"{'; '.join(sorted(set(failures.values())))}")

    def _list_offsets_once(self, keys: list[TopicPartition], which: int, out: Offsets) -> dict[TopicPartition, str]:
        """One ListOffsets per leader; returns the partitions that failed, with why."""
        leaders = self._topology.leaders if self._topology is not None else {}
        failures: dict[TopicPartition, str] = {}
        for key, answer in self.client.list_offsets(keys, which, leaders=leaders,
                                                    isolation_level=self._isolation_level).items():
            if answer.offset is None:
                failures[key] = answer.error or "no answer"
            else:
                out[key] = answer.offset
        return failures

    # -- the group's offsets in ZooKeeper or in __consumer_offsets ----------------------------------------

    @property
    def kafka_offsets(self) -> KafkaGroupOffsets:
        """The group's offsets in ``__consumer_offsets`` (group.coordination=kafka); a channel per call, to the
        coordinator a broker of :attr:`layout` names."""
        if self._kafka_offsets is None:
            self._kafka_offsets = KafkaGroupOffsets(self.layout, timeout_ms=self._request_timeout_ms,
                                                    client_id=self._client_id, security=self._security)
        return self._kafka_offsets

    def committed(self, group: str, keys: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: none; Kafka 0.8 also writes -1 for none). A node that does
        not parse raises :class:`MalformedNodeError` naming its path."""
        if self._group_coordination == "kafka":
            stored = self.kafka_offsets.fetch(group)
            return {key: stored.get(key) for key in keys}
        result: dict[TopicPartition, int | None] = {}
        for topic, partition in keys:
            offset = self.zookeeper.read_offset(group, topic, partition)
            result[(topic, partition)] = offset if offset is not None and offset >= 0 else None
        return result

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> Offsets:
        """Write each offset to the group's ZooKeeper node (or ``__consumer_offsets``) unless it already holds
        as much or more. Unchanged offsets are not rewritten (Kafka 0.8 does the same, KAFKA-987). Returns
        what was written."""
        pending = {key: offset for key, offset in offsets.items()
                   if offset >= 0 and self._committed.get((group, key)) != offset}
        written = self._commit_kafka(group, pending) if self._group_coordination == "kafka" else \
            self._commit_zookeeper(group, pending)
        if written:
            log.info("metaq: committed offsets of group %s: %s", group, _describe(written))
        return written

    def _commit_zookeeper(self, group: str, offsets: Mapping[TopicPartition, int]) -> Offsets:
        written: Offsets = {}
        for key in sorted(offsets):
            offset = offsets[key]
            current = self._current(group, key)
            if current is not None and current >= offset:
                self._committed[(group, key)] = offset
                continue
            self.zookeeper.write_offset(group, key[0], key[1], offset)
            self._committed[(group, key)] = offset
            written[key] = offset
        return written

    def _commit_kafka(self, group: str, offsets: Mapping[TopicPartition, int]) -> Offsets:
        """OffsetFetch, then one OffsetCommit of the offsets ahead of what the group holds, as a standalone
        consumer (generation -1, no member id). Kafka accepts that only while the group has no members
        (docs/broker-coordinated-consumer.md, "The Spark source"): a live group of the
        same id refuses it, reported as :class:`GroupActiveError`."""
        if not offsets:
            return {}
        current = self.kafka_offsets.fetch(group)
        ahead = {key: offset for key, offset in offsets.items() if current.get(key, -1) < offset}
        for key, offset in offsets.items():
            if key not in ahead:
                self._committed[(group, key)] = offset
        codes = self.kafka_offsets.commit(group, ahead)
        refused = {key: code for key, code in codes.items() if code}
        if set(refused.values()) & LIVE_GROUP_ERRORS:
            raise GroupActiveError(
                f"metaq: group {group!r} has active broker-coordinated members: Kafka refused the Spark "
                f"source's commit ({error_name(min(refused.values()))}), which it accepts from outside the group "
                f"protocol (generation -1, no member id) only while the group is empty; give the query a "
                f"group.id of its own")
        if refused:
            code = min(refused.values())
            bad = ", ".join(f"{t}-{p}" for t, p in sorted(k for k, c in refused.items() if c == code))
            raise for_code(code)(f"metaq: committing offsets of group {group!r} for {bad}: {error_name(code)}")
        for key, offset in ahead.items():
            self._committed[(group, key)] = offset
        return dict(sorted(ahead.items()))

    def _current(self, group: str, key: TopicPartition) -> int | None:
        try:
            offset = self.zookeeper.read_offset(group, key[0], key[1])
        except MalformedNodeError as e:
            log.warning("metaq: overwriting a committed offset that does not parse: %s", e)
            return None
        return offset if offset is not None and offset >= 0 else None

    def close(self) -> None:
        """Close broker connections and the ZooKeeper session; safe to call more than once."""
        if self._client is not None:
            self._client.close()
            self._client = None
        client, self._zk, self._layout, self._zk_layout = self._zk, None, None, None
        if client is not None:
            with contextlib.suppress(Exception):  # best effort: the session expires on its own anyway
                client.stop()
                client.close()


def _describe(offsets: Mapping[TopicPartition, int]) -> str:
    return ", ".join(f"{t}-{p}={o}" for (t, p), o in sorted(offsets.items()))

