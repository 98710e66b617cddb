"""ConsumerConfig: Kafka 0.8's consumer properties and defaults, plus MetaQ's retry-then-skip knobs.

    config = ConsumerConfig.from_properties({"group.id": "etl", "zookeeper.connect": "127.0.0.1:2181"})
    config = ConsumerConfig.from_file("consumer.properties")

Unknown keys and invalid values raise ConfigError naming the key (with a close match if there is one).

Offsets storage: ``offsets.storage=zookeeper`` (default) or ``kafka`` (``__consumer_offsets`` through the
group's coordinator, see metaq.consumer.kafka_offsets). With ``kafka`` every commit is still written to
ZooKeeper first, because the version-checked ZooKeeper write is what stops a member that lost a partition
from committing it, and reads take ``max(zookeeper, kafka)``: ``dual.commit.enabled`` defaults to true and
``dual.commit.enabled=false`` with ``offsets.storage=kafka`` is rejected (a ConfigError) rather than
silently ignored. ``metaq.offsets.fetch.timeout.ms`` bounds how long claiming partitions waits for the
coordinator (the rebalance attempt then fails and is retried).

Group coordination: ``group.coordination=zookeeper`` (default, Kafka 0.8's algorithm) or ``kafka`` (Kafka's
group protocol through the broker's group coordinator: ``session.timeout.ms``, ``heartbeat.interval.ms``,
``max.poll.interval.ms``, ``group.instance.id``; see metaq.consumer.coordination). With ``kafka`` the offsets
are committed to the coordinator with the member's generation (``offsets.storage`` does not apply), and
``bootstrap.servers`` may stand in for ``zookeeper.connect``: partition leaders and counts then come from
Metadata requests (metaq.client.metadata), refreshed every ``metadata.max.age.ms`` and after errors. With
``zookeeper.connect`` given, ZooKeeper names the leaders as in ZooKeeper mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from metaq.client.security import SecurityConfig
from metaq.client.versions import fallback_release
from metaq.config import Properties, non_negative, one_of, positive, prop
from metaq.errors import ConfigError
from metaq.metrics.off import check_metrics
from metaq.zksecurity import ZooKeeperClientConfig
from zk_layout import validate_group


def _valid_chars(value: str) -> str | None:
    try:
        validate_group(value)
    except ConfigError as e:
        return str(e)
    return None


_OFFSET_RESET_ALIASES = {"earliest": "smallest", "latest": "largest"}


def _check_group_protocol(config: ConsumerConfig) -> None:
    """What ``group.coordination=kafka`` needs beyond each option's own check."""
    if config.heartbeat_interval_ms >= config.session_timeout_ms:
        raise ConfigError(f"config 'heartbeat.interval.ms': {config.heartbeat_interval_ms} must be lower than "
                          f"'session.timeout.ms' ({config.session_timeout_ms})")


def _check_cluster(config: ConsumerConfig) -> None:
    """Where the cluster is: ZooKeeper, or (broker-coordinated only) the brokers' Metadata."""
    if config.zookeeper_connect:
        return
    if config.group_coordination != "kafka":
        raise ConfigError("config 'zookeeper.connect': a value is required (only group.coordination=kafka can "
                          "use 'bootstrap.servers' instead)")
    if not config.bootstrap_servers:
        raise ConfigError("config 'bootstrap.servers': a value is required with group.coordination=kafka when "
                          "'zookeeper.connect' is not set (one of the two names the cluster)")
    from metaq.client.metadata import parse_addresses

    parse_addresses(config.bootstrap_servers, "config 'bootstrap.servers':")


def _lease_fraction(value: float) -> str | None:
    if not 0.0 <= value < 1.0:
        return "must be >= 0 and < 1 (a fraction of the session timeout; 0 turns the lease off)"
    return None


@dataclass(frozen=True)
class ConsumerConfig(ZooKeeperClientConfig, SecurityConfig):
    """The consumer's options; the security ones (``security.protocol``, ``ssl.*``, ``sasl.*``) are
    :class:`SecurityConfig`'s and apply to every broker connection (fetchers, offsets channel)."""

    # Kafka 0.8 ZookeeperConsumerConnector (ConsumerConfig.scala, ZKConfig)
    group_id: str = prop("group.id", "", check=_valid_chars)
    zookeeper_connect: str = prop("zookeeper.connect", "")
    bootstrap_servers: str = prop("bootstrap.servers", "",
                                  doc="group.coordination=kafka without zookeeper.connect: HOST:PORT[,...] of "
                                      "brokers asked for Metadata (partition leaders and counts)")
    metadata_max_age_ms: int = prop("metadata.max.age.ms", 300000, check=positive,
                                    doc="topic metadata is read again after this long (a topic that gained "
                                        "partitions makes the group leader rejoin)")
    zookeeper_session_timeout_ms: int = prop("zookeeper.session.timeout.ms", 6000, check=positive)
    zookeeper_connection_timeout_ms: int | None = prop("zookeeper.connection.timeout.ms", None)
    zookeeper_sync_time_ms: int = prop("zookeeper.sync.time.ms", 2000, check=positive)
    consumer_id: str | None = prop("consumer.id", None)
    client_id: str | None = prop("client.id", None, check=_valid_chars)
    socket_timeout_ms: int = prop("socket.timeout.ms", 30000, check=positive)
    socket_receive_buffer_bytes: int = prop("socket.receive.buffer.bytes", 65536, check=positive)
    fetch_message_max_bytes: int = prop("fetch.message.max.bytes", 1048576, check=positive)
    fetch_max_bytes: int = prop("fetch.max.bytes", 52428800, check=positive)
    # librdkafka's: the release a broker without ApiVersions (Kafka 0.8/0.9) is taken for
    broker_version_fallback: str = prop("broker.version.fallback", "0.10.0", check=fallback_release)
    num_consumer_fetchers: int = prop("num.consumer.fetchers", 1, check=positive)
    auto_commit_enable: bool = prop("auto.commit.enable", True)
    auto_commit_interval_ms: int = prop("auto.commit.interval.ms", 60000, check=positive)
    queued_max_message_chunks: int = prop("queued.max.message.chunks", 2, check=positive)
    rebalance_max_retries: int = prop("rebalance.max.retries", 4, check=positive)
    rebalance_backoff_ms: int | None = prop("rebalance.backoff.ms", None)
    refresh_leader_backoff_ms: int = prop("refresh.leader.backoff.ms", 200, check=non_negative)
    fetch_min_bytes: int = prop("fetch.min.bytes", 1, check=positive)
    fetch_wait_max_ms: int = prop("fetch.wait.max.ms", 100, check=non_negative)
    auto_offset_reset: str = prop("auto.offset.reset", "largest",
                                  check=one_of("smallest", "largest", "earliest", "latest"),
                                  doc="smallest|largest (0.8 names); earliest|latest are accepted as aliases")
    consumer_timeout_ms: int = prop("consumer.timeout.ms", -1)
    isolation_level: str = prop("isolation.level", "read_uncommitted",
                                check=one_of("read_uncommitted", "read_committed"),
                                doc="read_committed: only committed transactions' records, up to the last "
                                    "stable offset (docs/transactions.md)")
    exclude_internal_topics: bool = prop("exclude.internal.topics", True)
    partition_assignment_strategy: str = prop(
        "partition.assignment.strategy", "range",
        check=one_of("range", "roundrobin", "cooperative-sticky", "metaq-consistent-hash"),
        doc="range|roundrobin; with group.coordination=kafka also cooperative-sticky (incremental rebalancing) "
            "and metaq-consistent-hash (docs/broker-coordinated-consumer.md)")
    partition_assignment_roundrobin_hash: str = prop(
        "partition.assignment.roundrobin.hash", "0.8", check=one_of("0.8", "1.1"),
        doc="the Kafka release whose TopicAndPartition name orders roundrobin's partitions: 0.8 ([topic,p], "
            "Kafka 0.8-0.10's Scala consumers) or 1.1 (topic-p, Kafka 1.1's); set it to the Scala members' "
            "release in a mixed group")
    offsets_storage: str = prop("offsets.storage", "zookeeper", check=one_of("zookeeper", "kafka"))
    # who coordinates the group: ZooKeeper (Kafka 0.8's algorithm) or the broker's group coordinator (Kafka's
    # group protocol, metaq.consumer.coordination; docs/broker-coordinated-consumer.md)
    group_coordination: str = prop("group.coordination", "zookeeper", check=one_of("zookeeper", "kafka"),
                                   doc="zookeeper (default) or kafka (JoinGroup/SyncGroup/Heartbeat)")
    # Kafka's group protocol (group.coordination=kafka only), with the Java consumer's defaults
    session_timeout_ms: int = prop("session.timeout.ms", 45000, check=positive)
    heartbeat_interval_ms: int = prop("heartbeat.interval.ms", 3000, check=positive)
    max_poll_interval_ms: int = prop("max.poll.interval.ms", 300000, check=positive)
    group_instance_id: str | None = prop("group.instance.id", None, check=_valid_chars)
    dual_commit_enabled: bool | None = prop("dual.commit.enabled", None)
    offsets_channel_backoff_ms: int = prop("offsets.channel.backoff.ms", 1000, check=positive)
    offsets_channel_socket_timeout_ms: int = prop("offsets.channel.socket.timeout.ms", 10000, check=positive)
    offsets_commit_max_retries: int = prop("offsets.commit.max.retries", 5, check=non_negative)
    offsets_fetch_timeout_ms: int = prop("metaq.offsets.fetch.timeout.ms", 30000, check=positive)
    metrics_enabled: bool = prop("metrics.enabled", True,
                                 doc="false: no metrics at all (nothing registered, no per-chunk counting)")
    metrics_port: int | None = prop("metrics.port", None, check=non_negative,
                                    doc="serve Prometheus metrics on this port (0: any free port; unset: off)")
    metrics_host: str = prop("metrics.host", "0.0.0.0", doc="address the metrics endpoint listens on")
    # MetaQ consumer knobs (retry-then-skip and the local recover store)
    max_fetch_retries: int = prop("metaq.max.fetch.retries", 5, check=non_negative)
    recover_dir: str | None = prop("metaq.recover.dir", None)
    recover_interval_ms: int = prop("metaq.recover.interval.ms", 300000, check=positive)
    recover_max_attempts: int = prop("metaq.recover.max.attempts", 20, check=positive)
    # how often each member re-checks that ZooKeeper's owner nodes match the assignment (0 = never)
    self_check_interval_ms: int = prop("metaq.self.check.interval.ms", 30000, check=non_negative)
    # a watch-triggered rebalance waits until the group has been quiet this long (a burst of joins or leaves
    # is one rebalance, not one per member), at most rebalance.backoff.ms in all; 0 = at once, as Kafka 0.8
    rebalance_coalesce_ms: int = prop("metaq.rebalance.coalesce.ms", 200, check=non_negative)
    # delivery only while the session is proven alive: for this fraction of the negotiated session timeout
    # after the last answered ZooKeeper request was sent (metaq.zklease; 0 = off, SUSPENDED only)
    session_lease_fraction: float = prop("metaq.session.lease.fraction", 2 / 3, check=_lease_fraction)

    def __post_init__(self) -> None:
        """The newer clients' names (what the Spark source and librdkafka use) mean 0.8's smallest/largest."""
        alias = _OFFSET_RESET_ALIASES.get(self.auto_offset_reset)
        if alias is not None:
            object.__setattr__(self, "auto_offset_reset", alias)

    @classmethod
    def from_properties(cls, values: Properties | None = None, **overrides: object) -> Self:
        config = super().from_properties(values, **overrides)
        if not config.group_id:
            raise ConfigError("config 'group.id': a value is required")
        _check_cluster(config)
        if config.socket_timeout_ms < config.fetch_wait_max_ms:
            raise ConfigError(
                f"config 'socket.timeout.ms': {config.socket_timeout_ms} must be >= 'fetch.wait.max.ms' "
                f"({config.fetch_wait_max_ms})"
            )
        check_metrics(config.metrics_enabled, config.metrics_port)
        if config.group_coordination == "kafka":
            _check_group_protocol(config)
        elif config.partition_assignment_strategy not in ("range", "roundrobin"):
            raise ConfigError(f"config 'partition.assignment.strategy': {config.partition_assignment_strategy} "
                              "needs group.coordination=kafka (ZooKeeper members know range and roundrobin)")
        if config.offsets_storage == "kafka" and config.dual_commit_enabled is False:
            raise ConfigError(
                "config 'dual.commit.enabled': false is not supported with offsets.storage=kafka; metaq always "
                "commits to ZooKeeper too, because its version-checked write is what keeps a member that lost a "
                "partition from committing it (remove the setting or set it to true)"
            )
        return config

    @property
    def connection_timeout_ms(self) -> int:
        return self.zookeeper_connection_timeout_ms or self.zookeeper_session_timeout_ms

    @property
    def backoff_ms(self) -> int:
        """rebalance.backoff.ms, defaulting to zookeeper.sync.time.ms as in Kafka 0.8."""
        return self.rebalance_backoff_ms if self.rebalance_backoff_ms is not None else self.zookeeper_sync_time_ms

    @property
    def effective_client_id(self) -> str:
        return self.client_id or self.group_id

    @property
    def dual_commit(self) -> bool:
        if self.dual_commit_enabled is not None:
            return self.dual_commit_enabled
        return self.offsets_storage == "kafka"
