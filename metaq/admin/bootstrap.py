"""The cluster as the brokers describe it (``--bootstrap-server``), for ops commands where ZooKeeper is not reachable.

    layout = BootstrapLayout.connect("broker1:9092", SecurityConfig())
    with Admin(as_layout(layout)) as admin:       # topics, broker groups, offsets lookup and resets
        admin.list_topics()

Kafka's tools moved from ``--zookeeper`` to ``--bootstrap-server``: the brokers answer Metadata (topics, partitions,
replicas, ISR, live brokers), and groups live in their coordinators. :class:`BootstrapLayout` answers the read-only
part of :class:`~zk_layout.ZkLayout` that the topic and broker-group commands use from one Metadata answer (asked
again when older than a second, so that a leader change seen by a retry is picked up; the Metadata reads are
metaq.client.metadata's), and a topic's config overrides with DescribeConfigs. It knows no ZooKeeper groups: they
exist only in ZooKeeper, so the group reads answer "none" and the group commands show the brokers' groups alone.
Topic changes go through the brokers' admin requests instead (metaq.admin.broker_topics). Anything else (owners,
ZooKeeper writes) raises a ConfigError naming ``--zookeeper``, the option the command needs instead.
"""

from __future__ import annotations

from typing import NoReturn, cast

from metaq.client.metadata import MetadataLayout, MetadataSnapshot, parse_metadata
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK
from metaq.errors import ConfigError
from zk_layout import ConsumerNode, OffsetNode, TopicConfig, ZkLayout

REFRESH_AFTER_S = 1.0
OPTION = "--bootstrap-server"
ClusterMetadata = MetadataSnapshot  # the name this module used before the metadata moved to metaq.client

__all__ = ["OPTION", "BootstrapLayout", "ClusterMetadata", "as_layout", "parse_metadata"]


class BootstrapLayout(MetadataLayout):
    """See the module docstring. Every method here is one :class:`~zk_layout.ZkLayout` method's answer (the
    reads of topics and brokers are :class:`~metaq.client.metadata.MetadataLayout`'s)."""

    def __init__(self, bootstrap: str, settings: ConnectionSettings) -> None:
        super().__init__(bootstrap, settings, option=OPTION, min_refresh_s=REFRESH_AFTER_S)

    @classmethod
    def connect(cls, bootstrap: str, security: SecurityConfig | None = None, *,  # type: ignore[override]
                timeout_ms: int = 10000, broker_version_fallback: str = DEFAULT_FALLBACK) -> BootstrapLayout:
        """Checks ``bootstrap`` (HOST:PORT[,HOST:PORT]) and asks for the metadata at once, so that an unreachable
        broker is the command's first error, naming the option. ``broker_version_fallback``: for Kafka 0.8/0.9
        brokers, which are asked Metadata v0 (docs/legacy-wire.md)."""
        settings = ConnectionSettings(client_id="metaq-admin", request_timeout_ms=timeout_ms,
                                      connect_timeout_ms=timeout_ms, security=security or SecurityConfig(),
                                      broker_version_fallback=broker_version_fallback)
        layout = cls(bootstrap, settings)
        layout.metadata()
        return layout

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's overrides: not in Metadata, so asked with DescribeConfigs as kafka-topics --describe does
        (metaq.admin.broker_topics)."""
        from metaq.admin.broker_topics import BrokerTopics

        return TopicConfig(BrokerTopics(self).overrides(topic))

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

    def consumer_nodes(self, group: str) -> dict[str, ConsumerNode]:
        return {}

    def offset_nodes(self, group: str) -> dict[tuple[str, int], OffsetNode]:
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

    def __getattr__(self, name: str) -> NoReturn:
        """Whatever needs ZooKeeper: an error naming the option to use, never an AttributeError."""
        if name.startswith("_"):
            raise AttributeError(name)
        raise ConfigError(f"this command needs ZooKeeper ({name.replace('_', ' ')}): give --zookeeper or --config "
                          f"instead of {OPTION}")


def as_layout(layout: BootstrapLayout) -> ZkLayout:
    """The stand-in where the admin functions take a ZkLayout (they use only the methods above)."""
    return cast(ZkLayout, layout)
