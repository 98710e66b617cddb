"""The cluster as the brokers describe it: Metadata requests instead of ZooKeeper reads.

    layout = MetadataLayout.connect("broker1:9092,broker2:9092", ConnectionSettings(), option="bootstrap.servers")
    ClusterClient(layout, settings)          # leaders and partition counts from Metadata answers

Kafka's clients find brokers, partitions and leaders with Metadata requests (``bootstrap.servers``), not in
ZooKeeper. :class:`MetadataLayout` answers the read-only part of :class:`zk_layout.ZkLayout` that
:class:`metaq.client.ClusterClient`, the consumer's group member and the offsets channel use (``brokers``,
``broker``, ``topic_assignment``, ``partition_state(s)``, ``topic_partition_ids``, ``topics``) from one Metadata
answer about every topic. An answer is reused for ``min_refresh_s`` at most: the callers ask again exactly when
they need fresher metadata (the client's topic cache after ``metadata.max.age.ms`` or a NOT_LEADER_OR_FOLLOWER /
UNKNOWN_TOPIC_OR_PARTITION answer, the leader finder every ``refresh.leader.backoff.ms``, the group leader
before computing an assignment and every ``metadata.max.age.ms`` to notice a topic that grew), as Kafka's
``Metadata.requestUpdate`` does. The request goes to a broker of the last answer first, then to the bootstrap
addresses (Kafka's ``NetworkClient.leastLoadedNode`` also prefers known nodes); the first that answers wins.
A broker before Kafka 0.10 (no ApiVersions: the ranges ``broker.version.fallback`` names) is asked Metadata v0,
whose "every topic" is an empty list rather than v1's null, and whose answer has no controller id
(docs/legacy-wire.md, "Talking to old brokers").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka.protocol.metadata import MetadataRequest

from metaq.client.request_codec import build_request
from metaq.client.settings import ConnectionSettings
from metaq.errors import BrokerConnectionError, ConfigError, MetaqError
from metaq.protocol.apis import ApiKey
from metaq.protocol.messages import ApiResponse, RequestFields
from zk_layout import BrokerInfo, PartitionState, TopicAssignment

log = logging.getLogger(__name__)

__all__ = ["MAX_METADATA_VERSION", "MetadataLayout", "MetadataSnapshot", "all_topics_request", "metadata_version",
           "parse_addresses", "parse_metadata"]

MAX_METADATA_VERSION = 8  # the last non-flexible version (metaq.protocol.apis)


@dataclass(frozen=True)
class MetadataSnapshot:
    """One Metadata answer: live brokers, and per topic its replicas and each partition's leader and ISR."""

    brokers: dict[int, BrokerInfo]
    assignments: dict[str, TopicAssignment]
    states: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    controller_id: int = -1  # where topic admin requests go (Metadata v1+)


def metadata_version(broker_versions: dict[int, tuple[int, int]]) -> int:
    """The Metadata version to ask ``broker_versions``' broker: its highest up to MAX_METADATA_VERSION, and v0
    for a broker that speaks only v0 (Kafka 0.8/0.9, API ranges from ``broker.version.fallback``)."""
    offered = broker_versions.get(ApiKey.METADATA, (0, 0))
    return max(0, min(offered[1], MAX_METADATA_VERSION))


def all_topics_request(version: int) -> RequestFields:
    """The fields of a Metadata request for every topic. In v0 that is an empty topic list (Kafka 0.8's
    TopicMetadataRequest: "no topics" means all), from v1 on a null one (an empty list means none, KIP-4);
    from v4 on, asking must not create a topic."""
    if version == 0:
        return {"topics": []}
    fields: dict[str, list[str] | bool | None] = {"topics": None}
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    return fields


def parse_metadata(answer: ApiResponse, security_protocol: str) -> MetadataSnapshot:
    """A MetadataResponse as the ZooKeeper nodes it mirrors (``/brokers/ids``, ``/brokers/topics``, states).
    A v0 answer (Kafka 0.8/0.9) has no controller (-1 here), no racks and no leader epochs (-1)."""
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, (f"{security_protocol}://{b.host}:{b.port}",), 0)
               for b in answer.brokers}
    assignments, states = {}, {}
    for topic in answer.topics:
        if topic.error_code:
            continue
        assignments[topic.name] = TopicAssignment({p.partition_index: tuple(p.replica_nodes)
                                                   for p in topic.partitions})
        for p in topic.partitions:
            states[(topic.name, p.partition_index)] = PartitionState(
                p.leader_id, max(getattr(p, "leader_epoch", -1), -1), tuple(p.isr_nodes), -1)
    return MetadataSnapshot(brokers, assignments, states, int(getattr(answer, "controller_id", -1)))


def parse_addresses(text: str, option: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]``; a ConfigError naming ``option`` otherwise."""
    addresses = [_address(a, option) for a in text.split(",") if a.strip()]
    if not addresses:
        raise ConfigError(f"{option} {text!r}: expected HOST:PORT[,HOST:PORT...]")
    return addresses


def _address(text: str, option: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{option} {text.strip()!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class MetadataLayout:
    """See the module docstring. Thread-safe: one Metadata request at a time, the others wait for its answer."""

    def __init__(self, bootstrap: str, settings: ConnectionSettings, *, option: str = "bootstrap.servers",
                 min_refresh_s: float = 1.0) -> None:
        self.bootstrap = bootstrap
        self.option = option
        self._addresses = parse_addresses(bootstrap, option)
        self._settings = settings
        self._min_refresh_s = min_refresh_s
        self._lock = threading.Lock()
        self._metadata: MetadataSnapshot | None = None
        self._read_at = 0.0

    @classmethod
    def connect(cls, bootstrap: str, settings: ConnectionSettings, *, option: str = "bootstrap.servers",
                min_refresh_s: float = 1.0) -> MetadataLayout:
        """Asks for the metadata at once, so that an unreachable cluster is the first error, naming the option."""
        layout = cls(bootstrap, settings, option=option, min_refresh_s=min_refresh_s)
        layout.metadata()
        return layout

    def metadata(self) -> MetadataSnapshot:
        """The last answer, or a new one if it is older than ``min_refresh_s``."""
        with self._lock:
            if self._metadata is None or time.monotonic() - self._read_at > self._min_refresh_s:
                self._metadata = self._ask()
                self._read_at = time.monotonic()
            return self._metadata

    def refresh(self) -> MetadataSnapshot:
        """A new answer now (after a change this client made: a topic created, grown or deleted)."""
        with self._lock:
            self._metadata = self._ask()
            self._read_at = time.monotonic()
            return self._metadata

    def invalidate(self) -> None:
        """The next read asks again, however recent the last answer (a request failed on what it said)."""
        with self._lock:
            self._read_at = float("-inf")

    @property
    def settings(self) -> ConnectionSettings:
        return self._settings

    def _candidates(self) -> list[tuple[str, int]]:
        known = [(b.host, b.port) for b in self._metadata.brokers.values()
                 if b.host is not None] if self._metadata else []
        return known + [a for a in self._addresses if a not in known]

    def _ask(self) -> MetadataSnapshot:
        errors = []
        for host, port in self._candidates():
            conn = self._settings.new_connection(host, port)
            try:
                conn.connect()
                version = metadata_version(conn.broker_versions)
                answer = conn.send(MetadataRequest, build_request(MetadataRequest, version,
                                                                  all_topics_request(version)))
                return parse_metadata(answer, self._settings.security_protocol)
            except MetaqError as e:
                errors.append(f"{host}:{port}: {e}")
            finally:
                conn.close()
        raise BrokerConnectionError(f"{self.option} {self.bootstrap}: no broker answered Metadata "
                                    f"({'; '.join(errors)})")

    # -- the ZkLayout reads, answered from Metadata ----------------------------------------------------

    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self.metadata().brokers)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self.metadata().brokers.get(broker_id)

    def broker_ids(self) -> list[int]:
        return sorted(self.metadata().brokers)

    def topics(self) -> list[str]:
        return sorted(self.metadata().assignments)

    def topic_assignment(self, topic: str) -> TopicAssignment | None:
        return self.metadata().assignments.get(topic)

    def topic_partition_ids(self, topics: Iterable[str]) -> dict[str, tuple[int, ...] | None]:
        assignments = self.metadata().assignments
        return {topic: tuple(sorted(a.partitions)) if (a := assignments.get(topic)) is not None else None
                for topic in topics}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.metadata().states.get((topic, partition))

    def partition_states(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState | None]:
        states = self.metadata().states
        return {key: states.get(key) for key in partitions}
