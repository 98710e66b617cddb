"""The cluster as the brokers describe it (``--bootstrap-server``), for ops commands where ZooKeeper is not reachable.

    layout = BootstrapLayout.connect("broker1:9092", SecurityConfig())
    with Admin(as_layout(layout)) as admin:       # topics, broker groups, offsets lookup and resets
        admin.list_topics()

Kafka's tools moved from ``--zookeeper`` to ``--bootstrap-server``: the brokers answer Metadata (topics, partitions,
replicas, ISR, live brokers), and groups live in their coordinators. :class:`BootstrapLayout` answers the read-only
part of :class:`~zk_layout.ZkLayout` that the topic and broker-group commands use from one Metadata answer (asked
again when older than a second, so that a leader change seen by a retry is picked up). It knows no ZooKeeper
groups: they exist only in ZooKeeper, so the group reads answer "none" and the group commands show the brokers'
groups alone. Anything else (owners, ZooKeeper writes, topic changes) raises a ConfigError naming ``--zookeeper``,
the option the command needs instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from kafka.protocol.metadata import MetadataRequest

from metaq.client.connection import build_request
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.errors import BrokerConnectionError, ConfigError, MetaqError
from metaq.protocol.apis import ApiKey
from zk_layout import BrokerInfo, PartitionState, TopicAssignment, ZkLayout

MAX_METADATA_VERSION = 8  # the last non-flexible version (metaq.protocol.apis)
REFRESH_AFTER_S = 1.0
OPTION = "--bootstrap-server"


@dataclass(frozen=True)
class ClusterMetadata:
    """One Metadata answer: live brokers, and per topic its replicas and each partition's leader and ISR."""

    brokers: dict[int, BrokerInfo]
    assignments: dict[str, TopicAssignment]
    states: dict[tuple[str, int], PartitionState] = field(default_factory=dict)


def parse_metadata(answer: Any, security_protocol: str) -> ClusterMetadata:
    """A MetadataResponse as the ZooKeeper nodes it mirrors (``/brokers/ids``, ``/brokers/topics``, states)."""
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
    return ClusterMetadata(brokers, assignments, states)


class BootstrapLayout:
    """See the module docstring. Every method here is one :class:`~zk_layout.ZkLayout` method's answer."""

    def __init__(self, bootstrap: str, settings: ConnectionSettings) -> None:
        self.bootstrap = bootstrap
        self._settings = settings
        self._metadata: ClusterMetadata | None = None
        self._read_at = 0.0

    @classmethod
    def connect(cls, bootstrap: str, security: SecurityConfig | None = None, *,
                timeout_ms: int = 10000) -> BootstrapLayout:
        """Checks ``bootstrap`` (HOST:PORT[,HOST:PORT]) and asks for the metadata at once, so that an unreachable
        broker is the command's first error, naming the option."""
        addresses = [_address(a) for a in bootstrap.split(",") if a.strip()]
        if not addresses:
            raise ConfigError(f"{OPTION} {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]")
        settings = ConnectionSettings(client_id="metaq-admin", request_timeout_ms=timeout_ms,
                                      connect_timeout_ms=timeout_ms, security=security or SecurityConfig())
        layout = cls(bootstrap, settings)
        layout.metadata()
        return layout

    def metadata(self) -> ClusterMetadata:
        if self._metadata is None or time.monotonic() - self._read_at > REFRESH_AFTER_S:
            self._metadata = self._ask()
            self._read_at = time.monotonic()
        return self._metadata

    def _ask(self) -> ClusterMetadata:
        errors = []
        for host, port in (_address(a) for a in self.bootstrap.split(",") if a.strip()):
            conn = self._settings.new_connection(host, port)
            try:
                conn.connect()
                offered = conn.broker_versions.get(ApiKey.METADATA, (0, 0))
                version = max(1, min(offered[1], MAX_METADATA_VERSION))
                fields: dict[str, Any] = {"topics": None}
                if version >= 4:
                    fields["allow_auto_topic_creation"] = False
                answer = conn.send(MetadataRequest, build_request(MetadataRequest, version, fields))
                return parse_metadata(answer, self._settings.security_protocol)
            except MetaqError as e:
                errors.append(f"{host}:{port}: {e}")
            finally:
                conn.close()
        raise BrokerConnectionError(f"{OPTION} {self.bootstrap}: no broker answered Metadata ({'; '.join(errors)})")

    # -- what the brokers know ---------------------------------------------------------------------------

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

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.metadata().states.get((topic, partition))

    def partition_states(self, partitions: Any) -> dict[tuple[str, int], PartitionState | None]:
        states = self.metadata().states
        return {key: states.get(key) for key in partitions}

    def topic_config(self, topic: str) -> None:
        """Configs are not in Metadata (kafka-configs asks DescribeConfigs): none shown in this mode."""
        return None

    def topics_marked_for_deletion(self) -> list[str]:
        return []

    def full_path(self, path: str) -> str:
        return path

    # -- ZooKeeper groups: none here -------------------------------------------------------------------

    def groups(self) -> list[str]:
        return []

    def group_exists(self, group: str) -> bool:
        return False

    def consumer_ids(self, group: str) -> list[str]:
        return []

    def consumer_nodes(self, group: str) -> dict[str, Any]:
        return {}

    def offset_nodes(self, group: str) -> dict[tuple[str, int], Any]:
        return {}

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        return {}

    def read_offset(self, group: str, topic: str, partition: int) -> int | None:
        return None

    def owners(self, group: str) -> dict[tuple[str, int], str]:
        return {}

    def write_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """A reset's ZooKeeper copy: there is none to write. A broker group's new offsets were committed at its
        coordinator first (:func:`metaq.admin.offset_reset.apply_plan`), which is where such a group keeps them."""

    def __getattr__(self, name: str) -> Any:
        """Whatever needs ZooKeeper: an error naming the option to use, never an AttributeError."""
        if name.startswith("_"):
            raise AttributeError(name)
        raise ConfigError(f"this command needs ZooKeeper ({name.replace('_', ' ')}): give --zookeeper or --config "
                          f"instead of {OPTION}")


def as_layout(layout: BootstrapLayout) -> ZkLayout:
    """The stand-in where the admin functions take a ZkLayout (they use only the methods above)."""
    return cast(ZkLayout, layout)


def _address(text: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{OPTION} {text.strip()!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)
