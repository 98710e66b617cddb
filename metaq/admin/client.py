"""The entry point of the ops API: one ZooKeeper session plus connections to partition leaders.

    with Admin.connect("127.0.0.1:2181/kafka") as admin:          # or Admin.connect(config="consumer.properties")
        for row in admin.describe_group("etl").partitions:
            print(row.topic, row.partition, row.lag, row.owner, row.status)
        plan = admin.plan_reset("etl", {"clicks": None}, ResetSpec.latest())
        admin.apply_plan(plan)                                    # GroupActiveError while members are live

Every method is a thin call into the module that holds the logic (:mod:`metaq.admin.groups`, ``owners``,
``offsets``, ``transfer``, ``topics``), which scripts may also use directly with their own
:class:`~zk_layout.ZkLayout`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from metaq.client.security import SecurityConfig
from metaq.config import load_properties
from metaq.errors import ConfigError, GroupNotFoundError
from zk_layout import ZkLayout

if TYPE_CHECKING:
    # Imported where used: the modules behind the methods bring in kafka-python's protocol, the consumer and
    # the clients (a second of CPU), which a command that reads only ZooKeeper (``topics list``) never needs.
    from kazoo.client import KazooClient

    from metaq.admin.broker_groups import CoordinatorGroups
    from metaq.admin.group_deletion import GroupDeletion, OffsetDeleteResult
    from metaq.admin.group_listing import GroupListing, GroupSummary
    from metaq.admin.groups import GroupDescription
    from metaq.admin.log_offsets import LogOffsets, TopicPartition
    from metaq.admin.offset_reset import OffsetChange, OffsetPlan, Progress, ResetSpec
    from metaq.admin.owners import OwnersReport
    from metaq.admin.topics import PartitionHealth, TopicDetail, TopicSummary
    from metaq.admin.transfer import OffsetRecord
    from metaq.client.group_offsets import GroupOffsetsStore
    from metaq.zksecurity import ZooKeeperSecurity

DEFAULT_TIMEOUT_MS = 6000


def resolve_connect(zookeeper: str | None = None, config: str | Path | None = None) -> tuple[str, int | None]:
    """The connect string (``zookeeper`` wins over the file's ``zookeeper.connect``) and the file's
    ``zookeeper.connection.timeout.ms``, if it sets one. ConfigError when neither names ZooKeeper."""
    props = load_properties(config) if config is not None else {}
    connect_string = zookeeper or props.get("zookeeper.connect")
    if not connect_string:
        where = f"config file {config} has no zookeeper.connect" if config is not None else "no ZooKeeper given"
        raise ConfigError(f"{where}; use --zookeeper HOST:PORT[/chroot] or --config FILE")
    raw_timeout = props.get("zookeeper.connection.timeout.ms")
    try:
        timeout = int(raw_timeout) if raw_timeout else None
    except ValueError as e:
        raise ConfigError(f"config 'zookeeper.connection.timeout.ms': {raw_timeout!r} is not a valid int") from e
    return connect_string, timeout


class Admin:
    """See the module docstring. ``log_offsets``, ``kafka`` (the groups' offsets in ``__consumer_offsets``) and
    ``coordinators`` (the groups the brokers' coordinators know) are seams for tests (in-memory fakes)."""

    def __init__(self, layout: ZkLayout, log_offsets: LogOffsets | None = None, *,
                 client: KazooClient | None = None, kafka: GroupOffsetsStore | None = None,
                 coordinators: CoordinatorGroups | None = None, security: SecurityConfig | None = None) -> None:
        self.layout = layout
        self.security = security or SecurityConfig()  # how the brokers are reached (--command-config)
        self._log_offsets = log_offsets  # the seams: made on first use when not given (see TYPE_CHECKING)
        self._kafka = kafka
        self._coordinators = coordinators
        self._client = client  # closed by close() when we started it

    @property
    def log_offsets(self) -> LogOffsets:
        if self._log_offsets is None:
            from metaq.admin.log_offsets import BrokerLogOffsets

            self._log_offsets = BrokerLogOffsets(self.layout, security=self.security)
        return self._log_offsets

    @property
    def kafka(self) -> GroupOffsetsStore:
        if self._kafka is None:
            from metaq.client.group_offsets import KafkaGroupOffsets

            self._kafka = KafkaGroupOffsets(self.layout, security=self.security)
        return self._kafka

    @property
    def coordinators(self) -> CoordinatorGroups:
        if self._coordinators is None:
            from metaq.admin.broker_groups import BrokerGroups

            self._coordinators = BrokerGroups(self.layout, security=self.security)
        return self._coordinators

    @classmethod
    def connect(cls, zookeeper: str | None = None, *, config: str | Path | None = None,
                timeout_ms: int | None = None, security: SecurityConfig | None = None,
                zk_security: ZooKeeperSecurity | None = None) -> Admin:
        """Start a ZooKeeper session; ZooKeeperUnavailableError with the address when none can be made.
        ``security``: the TLS/SASL options of broker connections (e.g. from ``--command-config``);
        ``zk_security`` defaults to the ``zookeeper.auth``/``zookeeper.ssl.*``/``zookeeper.set.acl`` keys of
        ``config``."""
        connect_string, file_timeout = resolve_connect(zookeeper, config)
        timeout = timeout_ms or file_timeout or DEFAULT_TIMEOUT_MS
        from metaq.zkclient import connect as zk_connect
        from metaq.zksecurity import security_from_properties

        if zk_security is None and config is not None:
            zk_security = security_from_properties(load_properties(config))
        client = zk_connect(connect_string, connection_timeout_ms=timeout, session_timeout_ms=max(timeout, 6000),
                            security=zk_security)
        return cls(ZkLayout(client), client=client, security=security)

    def close(self) -> None:
        close = getattr(self._log_offsets, "close", None)
        if close is not None:
            close()
        if self._client is not None:
            with contextlib.suppress(Exception):  # best effort: the session ends with its timeout anyway
                self._client.stop()
                self._client.close()
            self._client = None

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- groups and owners ----------------------------------------------------------------------------

    def list_groups(self) -> list[GroupSummary]:
        return self.group_listing().groups

    def group_listing(self) -> GroupListing:
        """ZooKeeper's groups and the coordinators' (protocol) groups, with notes about brokers not asked."""
        from metaq.admin.group_listing import group_listing

        return group_listing(self.layout, self.coordinators, self.kafka)

    def describe_group(self, group: str, *, topics: Iterable[str] | None = None,
                       stall_after_ms: int | None = None) -> GroupDescription:
        """``stall_after_ms``: default :data:`metaq.admin.groups.DEFAULT_STALL_AFTER_MS`."""
        from metaq.admin.groups import DEFAULT_STALL_AFTER_MS, describe_group

        stall = DEFAULT_STALL_AFTER_MS if stall_after_ms is None else stall_after_ms
        return describe_group(self.layout, self.log_offsets, group, topics=topics, stall_after_ms=stall,
                              kafka=self.kafka, coordinators=self.coordinators)

    def owners(self, group: str) -> OwnersReport:
        """Owner nodes exist only for ZooKeeper groups: for a group only the brokers' coordinators know, the
        error says so and where its assignment is shown, rather than that the group does not exist."""
        from metaq.admin.owners import owners_report

        try:
            return owners_report(self.layout, group)
        except GroupNotFoundError:
            if group in self.coordinators.list().groups:
                raise GroupNotFoundError(
                    f"group {group!r} is coordinated by a broker (a protocol group): it has no owner nodes in "
                    f"ZooKeeper; `metaq groups describe {group}` shows its members and assignment") from None
            raise

    def delete_group(self, group: str) -> GroupDeletion:
        from metaq.admin.group_deletion import delete_group

        return delete_group(self.layout, group, self.coordinators)

    def delete_offsets(self, group: str, selection: Mapping[str, list[int] | None], *,
                       force: bool = False) -> list[OffsetDeleteResult]:
        """``selection``: topic -> partitions (None: every partition of the topic)."""
        from metaq.admin.group_deletion import delete_offsets
        from metaq.admin.offset_reset import selected_partitions

        return delete_offsets(self.layout, group, selected_partitions(self.layout, selection), self.coordinators,
                              force=force)

    def delete_orphans(self, report: OwnersReport) -> list[tuple[str, int]]:
        from metaq.admin.owners import delete_orphans

        return delete_orphans(self.layout, report)

    # -- offsets --------------------------------------------------------------------------------------

    def plan_reset(self, group: str, selection: Mapping[str, list[int] | None], spec: ResetSpec, *,
                   create_group: bool = False, all_topics: bool = False,
                   requested: Mapping[TopicPartition, int] | None = None) -> OffsetPlan:
        """``requested``: partition -> offset, a plan read from a file (see :func:`plan_reset`)."""
        from metaq.admin.offset_reset import plan_reset

        return plan_reset(self.layout, self.log_offsets, group, selection, spec, create_group=create_group,
                          kafka=self.kafka, all_topics=all_topics, requested=requested)

    def apply_plan(self, plan: OffsetPlan, *, force: bool = False, progress: Progress | None = None,
                   kafka_groups: list[str] | None = None) -> list[OffsetChange]:
        """Also commits to ``__consumer_offsets`` for groups that have offsets there (listed in ``kafka_groups``)."""
        from metaq.admin.offset_reset import apply_plan

        return apply_plan(self.layout, plan, force=force, progress=progress, kafka=self.kafka,
                          kafka_groups=kafka_groups)

    def export_offsets(self, groups: Iterable[str] | None = None,
                       progress: Progress | None = None) -> list[OffsetRecord]:
        """Every kind of group: offsets in ZooKeeper and in ``__consumer_offsets`` (see :func:`export_offsets`)."""
        from metaq.admin.transfer import export_offsets

        listed = self.coordinators.list().groups if groups is None else {}
        return export_offsets(self.layout, groups, progress, kafka=self.kafka, kafka_groups=listed)

    def plan_import(self, records: Iterable[OffsetRecord], progress: Progress | None = None) -> OffsetPlan:
        from metaq.admin.transfer import plan_import

        return plan_import(self.layout, records, self.log_offsets, progress, kafka=self.kafka)

    # -- topics ---------------------------------------------------------------------------------------

    def list_topics(self) -> list[TopicSummary]:
        from metaq.admin.topics import list_topics

        return list_topics(self.layout)

    def elect_preferred_leaders(self, topics: Iterable[str] = (), *,
                                wait_s: float = 30.0) -> dict[tuple[str, int], int]:
        from metaq.admin.topics import elect_preferred_leaders

        return elect_preferred_leaders(self.layout, topics, wait_s=wait_s)

    def unhealthy_partitions(self) -> list[PartitionHealth]:
        from metaq.admin.topics import unhealthy_partitions

        return unhealthy_partitions(self.layout)

    def describe_topic(self, topic: str) -> TopicDetail:
        from metaq.admin.topics import describe_topic

        return describe_topic(self.layout, self.log_offsets, topic)

    def delete_topics(self, topics: Iterable[str], *, wait_s: float = 0.0) -> list[str]:
        from metaq.admin.topics import delete_topics

        return delete_topics(self.layout, topics, wait_s=wait_s)

    def alter_topic_config(self, topic: str, updates: Mapping[str, str],
                           removals: Iterable[str] = ()) -> dict[str, str]:
        from metaq.admin.topics import alter_topic_config

        return alter_topic_config(self.layout, topic, updates, removals)
