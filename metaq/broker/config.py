"""BrokerConfig: a Kafka-style ``server.properties`` for metaq's broker.

    config = BrokerConfig.from_file("server.properties")
    config = BrokerConfig.from_properties({"broker.id": 1, "zookeeper.connect": "127.0.0.1:2181",
                                           "log.dirs": "/tmp/metaq-logs"})

Unknown keys are errors. A few Kafka keys that tune machinery metaq does not have (thread pools, replica
fetchers) are accepted for drop-in compatibility with existing files and logged as having no effect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from metaq.broker.auth.listeners import (
    SECURITY_PROTOCOLS,
    Listener,
    advertised_endpoints,
    parse_listeners,
    parse_protocol_map,
)
from metaq.broker.auth.tls import CLIENT_AUTH, TlsSettings
from metaq.broker.log.cleaner.config import CleanerConfig
from metaq.broker.log.cleaner.throttle import UNTHROTTLED
from metaq.broker.log.config import CREATE_TIME, TIMESTAMP_TYPES, LogConfig
from metaq.broker.security.authorizer import check_authorizer_class, check_super_users
from metaq.client.security import ENDPOINT_IDENTIFICATION, SecurityConfig
from metaq.config import Properties, Secret, non_negative, one_of, positive, prop
from metaq.errors import ConfigError
from metaq.metrics.off import check_metrics
from metaq.zksecurity import ZooKeeperClientConfig
from zk_layout.paths import INT32_MAX

log = logging.getLogger(__name__)

NEVER = 9223372036854775807
HOUR_MS = 3600 * 1000

# Kafka keys with no meaning for metaq's broker: accepted, logged, ignored.
INERT_KEYS = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "num.replica.fetchers",
        "transaction.state.log.min.isr",
        "queued.max.requests",
    }
)


def _dedupe_buffer(value: int) -> str | None:
    # One offset map entry is 24 bytes (a 16-byte key hash and an 8-byte offset), as Kafka's SkimpyOffsetMap.
    return None if value >= 1024 else "must be at least 1024"


def _positive_rate(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def _broker_id(value: int) -> str | None:
    """Clients read broker ids as int32: a larger id would make every Metadata response unencodable."""
    return None if 0 <= value <= INT32_MAX else f"must be in 0..{INT32_MAX}"


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanisms(value: tuple[str, ...]) -> str | None:
    unknown = [m for m in value if m not in SASL_MECHANISMS]
    return f"has unsupported mechanisms {unknown} (metaq serves {', '.join(SASL_MECHANISMS)})" if unknown else None


def _unbounded_or_positive(value: int) -> str | None:
    return None if value == -1 or value > 0 else "must be -1 (unbounded) or > 0"


@dataclass(frozen=True)
class BrokerConfig(ZooKeeperClientConfig):
    """A broker's settings: one field per ``server.properties`` key (Kafka's names and defaults; an unknown key is an
    error), and the values derived from them (listeners, TLS settings, data directories, the log config). A table of
    properties: it owns values only, frozen once read."""

    broker_id: int = prop("broker.id", 0, check=_broker_id)
    listeners: str = prop("listeners", "PLAINTEXT://127.0.0.1:9092")
    advertised_listeners: str | None = prop("advertised.listeners", None)
    listener_security_protocol_map: str = prop(
        "listener.security.protocol.map", "", doc="NAME:PROTOCOL,...; empty: each protocol names its own listener")
    inter_broker_listener_name: str | None = prop("inter.broker.listener.name", None)
    security_inter_broker_protocol: str | None = prop("security.inter.broker.protocol", None,
                                                      check=one_of(*SECURITY_PROTOCOLS))
    ssl_certificate_location: str | None = prop("ssl.certificate.location", None, doc="server certificate (PEM)")
    ssl_key_location: str | None = prop("ssl.key.location", None, doc="server private key (PEM)")
    ssl_key_password: Secret | None = prop("ssl.key.password", None, doc="password of an encrypted ssl.key.location")
    ssl_ca_location: str | None = prop("ssl.ca.location", None, doc="CA certificates (PEM) for client certificates")
    ssl_truststore_location: str | None = prop("ssl.truststore.location", None,
                                               doc="same as ssl.ca.location (PEM only)")
    ssl_client_auth: str = prop("ssl.client.auth", "none", check=one_of(*CLIENT_AUTH))
    ssl_enabled_protocols: tuple[str, ...] = prop("ssl.enabled.protocols", ("TLSv1.2", "TLSv1.3"))
    sasl_enabled_mechanisms: tuple[str, ...] = prop("sasl.enabled.mechanisms", ("SCRAM-SHA-256", "SCRAM-SHA-512"),
                                                    check=_mechanisms)
    sasl_plain_users_file: str | None = prop(
        "sasl.plain.users.file", None, doc="users of SASL/PLAIN: one 'user:password' a line (docs/security.md)")
    # the replica fetchers' side of the inter-broker listener (docs/security.md, "Inter-broker traffic")
    sasl_mechanism_inter_broker_protocol: str = prop(
        "sasl.mechanism.inter.broker.protocol", "PLAIN", check=one_of(*SASL_MECHANISMS),
        doc="SASL mechanism of replica fetchers when the inter-broker listener uses SASL")
    inter_broker_sasl_username: str | None = prop(
        "inter.broker.sasl.username", None, doc="SASL user replica fetchers log in as (a super user under ACLs)")
    inter_broker_sasl_password: Secret | None = prop("inter.broker.sasl.password", None,
                                                     doc="password of inter.broker.sasl.username")
    ssl_endpoint_identification_algorithm: str = prop(
        "ssl.endpoint.identification.algorithm", "https", check=one_of(*ENDPOINT_IDENTIFICATION, ""),
        doc="replica fetchers: https checks a leader's certificate names its host; none (or empty) does not")
    broker_rack: str | None = prop("broker.rack", None)
    log_dirs: tuple[str, ...] = prop("log.dirs", ())
    log_dir: str = prop("log.dir", "/tmp/metaq-logs")
    zookeeper_connect: str = prop("zookeeper.connect", "")
    zookeeper_session_timeout_ms: int = prop("zookeeper.session.timeout.ms", 18000, check=positive)
    zookeeper_connection_timeout_ms: int | None = prop("zookeeper.connection.timeout.ms", None)
    num_partitions: int = prop("num.partitions", 1, check=positive)
    default_replication_factor: int = prop("default.replication.factor", 1, check=positive)
    # replication (docs/architecture.md, "Replication")
    min_insync_replicas: int = prop("min.insync.replicas", 1, check=positive)
    unclean_leader_election_enable: bool = prop("unclean.leader.election.enable", False)
    replica_lag_time_max_ms: int = prop("replica.lag.time.max.ms", 30000, check=positive)
    replica_fetch_wait_max_ms: int = prop("replica.fetch.wait.max.ms", 500, check=positive)
    replica_fetch_max_bytes: int = prop("replica.fetch.max.bytes", 1048576, check=positive)
    replica_fetch_backoff_ms: int = prop("replica.fetch.backoff.ms", 1000, check=positive)
    controlled_shutdown_enable: bool = prop("controlled.shutdown.enable", True)
    auto_leader_rebalance_enable: bool = prop("auto.leader.rebalance.enable", True)
    leader_imbalance_check_interval_seconds: int = prop("leader.imbalance.check.interval.seconds", 300,
                                                        check=positive)
    leader_imbalance_per_broker_percentage: int = prop("leader.imbalance.per.broker.percentage", 10,
                                                       check=non_negative)
    replica_high_watermark_checkpoint_interval_ms: int = prop(
        "replica.high.watermark.checkpoint.interval.ms", 5000, check=positive)
    auto_create_topics_enable: bool = prop("auto.create.topics.enable", True)
    offsets_topic_num_partitions: int = prop("offsets.topic.num.partitions", 50, check=positive)
    # Kafka's default; capped at the live brokers when __consumer_offsets is created (Kafka before 0.11 did
    # the same; 0.11+ refuses instead), so that a one-broker cluster keeps working without setting it
    offsets_topic_replication_factor: int = prop("offsets.topic.replication.factor", 3, check=positive)
    # the segment size __consumer_offsets is created with (a topic config: docs/compaction.md, "Internal topics")
    offsets_topic_segment_bytes: int = prop("offsets.topic.segment.bytes", 104857600, check=positive)
    offsets_retention_minutes: int = prop("offsets.retention.minutes", 10080, check=positive)
    offsets_retention_check_interval_ms: int = prop("offsets.retention.check.interval.ms", 600000, check=positive)
    offset_metadata_max_bytes: int = prop("offset.metadata.max.bytes", 4096, check=non_negative)
    offsets_commit_required_acks: int = prop("offsets.commit.required.acks", -1)
    group_min_session_timeout_ms: int = prop("group.min.session.timeout.ms", 6000, check=positive)
    group_max_session_timeout_ms: int = prop("group.max.session.timeout.ms", 1800000, check=positive)
    # Kafka waits 3000 ms before a new group's first rebalance; metaq completes it as soon as the members
    # that asked have joined, so the default is 0 (set it to batch up a herd of members starting together)
    group_initial_rebalance_delay_ms: int = prop("group.initial.rebalance.delay.ms", 0, check=non_negative)
    # bounds on what one request may make the cluster hold (docs/wire-protocol.md, "Bounds on hostile input");
    # metaq names where Kafka (ZooKeeper mode) has no such bound. 10,000: KRaft's per-operation record limit
    # (QuorumController.MAX_RECORDS_PER_USER_OP), answered there with POLICY_VIOLATION as here.
    max_partitions_per_request: int = prop(
        "metaq.max.partitions.per.request", 10000, check=positive,
        doc="partitions one CreateTopics or CreatePartitions request may add (POLICY_VIOLATION beyond)")
    max_partitions: int = prop("metaq.max.partitions", 100000, check=positive,
                               doc="partitions in the whole cluster at most (POLICY_VIOLATION beyond)")
    group_max_member_metadata_bytes: int = prop(
        "metaq.group.max.member.metadata.bytes", 1048576, check=positive,
        doc="JoinGroup protocol names and metadata of one member at most (INVALID_REQUEST beyond)")
    group_max_metadata_bytes: int = prop(
        "metaq.group.max.metadata.bytes", 8388608, check=positive,
        doc="JoinGroup protocol metadata of all of a group's members at most (GROUP_MAX_SIZE_REACHED beyond)")
    max_request_entries: int = prop(
        "metaq.max.request.entries", 20000, check=positive,
        doc="groups or partitions one DescribeGroups, OffsetFetch, OffsetCommit, ListOffsets, DeleteRecords, ..."
            " request may name (the connection is closed beyond)")
    message_max_bytes: int = prop("message.max.bytes", 1048588, check=positive)
    socket_request_max_bytes: int = prop("socket.request.max.bytes", 104857600, check=positive)
    socket_send_buffer_bytes: int = prop("socket.send.buffer.bytes", 102400)
    socket_receive_buffer_bytes: int = prop("socket.receive.buffer.bytes", 102400)
    # metaq's own key (Kafka has none): a client that sent a frame's size must send its body within this
    # time, so a slow or stalled sender cannot pin a connection and a partial frame forever (30 s: a Kafka
    # client gives up on a request after request.timeout.ms, 30 s by default, anyway)
    socket_request_body_timeout_ms: int = prop("socket.request.body.timeout.ms", 30000, check=positive)
    queued_max_request_bytes: int = prop("queued.max.request.bytes", -1, check=_unbounded_or_positive)
    max_connections: int = prop("max.connections", 2147483647, check=positive)
    max_connections_per_ip: int = prop("max.connections.per.ip", 2147483647, check=positive)
    connections_max_idle_ms: int = prop("connections.max.idle.ms", 600000, check=positive)
    authorizer_class_name: str = prop("authorizer.class.name", "", check=check_authorizer_class,
                                      doc="kafka.security.authorizer.AclAuthorizer: enforce ACLs (empty: none)")
    super_users: str = prop("super.users", "", check=check_super_users,
                            doc="principals that pass every ACL check, e.g. User:admin;User:broker")
    allow_everyone_if_no_acl_found: bool = prop("allow.everyone.if.no.acl.found", False,
                                                doc="allow what no ACL of the resource mentions")
    fetch_max_bytes: int = prop("fetch.max.bytes", 52428800, check=positive)
    # client quotas and replication throttles (docs/quotas.md): the rates' sample windows, Kafka's defaults
    quota_window_num: int = prop("quota.window.num", 11, check=positive)
    quota_window_size_seconds: int = prop("quota.window.size.seconds", 1, check=positive)
    replication_quota_window_num: int = prop("replication.quota.window.num", 11, check=positive)
    replication_quota_window_size_seconds: int = prop("replication.quota.window.size.seconds", 1, check=positive)
    replica_fetch_response_max_bytes: int = prop("replica.fetch.response.max.bytes", 10485760, check=positive)
    log_segment_bytes: int = prop("log.segment.bytes", 1073741824, check=positive)
    log_roll_hours: int = prop("log.roll.hours", 168, check=positive)
    log_roll_ms: int | None = prop("log.roll.ms", None)
    log_retention_hours: int = prop("log.retention.hours", 168)
    log_retention_minutes: int | None = prop("log.retention.minutes", None)
    log_retention_ms: int | None = prop("log.retention.ms", None)
    log_retention_bytes: int = prop("log.retention.bytes", -1)
    log_retention_check_interval_ms: int = prop("log.retention.check.interval.ms", 300000, check=positive)
    producer_id_expiration_ms: int = prop("producer.id.expiration.ms", 86400000, check=positive)
    producer_id_expiration_check_interval_ms: int = prop("producer.id.expiration.check.interval.ms", 600000,
                                                         check=positive)
    # transactions (docs/transactions.md), Kafka's names and defaults
    transaction_max_timeout_ms: int = prop("transaction.max.timeout.ms", 900000, check=positive)
    transaction_state_log_num_partitions: int = prop("transaction.state.log.num.partitions", 50, check=positive)
    transaction_state_log_replication_factor: int = prop("transaction.state.log.replication.factor", 3,
                                                         check=positive)
    transaction_state_log_segment_bytes: int = prop("transaction.state.log.segment.bytes", 104857600,
                                                    check=positive)
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = prop(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000, check=positive)
    transactional_id_expiration_ms: int = prop("transactional.id.expiration.ms", 604800000, check=positive)
    log_segment_delete_delay_ms: int = prop("log.segment.delete.delay.ms", 60000, check=non_negative)
    log_cleanup_policy: tuple[str, ...] = prop("log.cleanup.policy", ("delete",))
    log_message_timestamp_type: str = prop("log.message.timestamp.type", CREATE_TIME,
                                           check=one_of(*TIMESTAMP_TYPES),
                                           doc="topics' default message.timestamp.type (docs/legacy-wire.md)")
    log_cleaner_min_cleanable_ratio: float = prop("log.cleaner.min.cleanable.ratio", 0.5)
    log_cleaner_min_compaction_lag_ms: int = prop("log.cleaner.min.compaction.lag.ms", 0)
    log_cleaner_max_compaction_lag_ms: int = prop("log.cleaner.max.compaction.lag.ms", NEVER)
    log_cleaner_delete_retention_ms: int = prop("log.cleaner.delete.retention.ms", 86400000)
    log_cleaner_enable: bool = prop("log.cleaner.enable", True, doc="run the log cleaner (compacted topics)")
    log_cleaner_threads: int = prop("log.cleaner.threads", 1, check=positive)
    log_cleaner_dedupe_buffer_size: int = prop("log.cleaner.dedupe.buffer.size", 134217728, check=_dedupe_buffer,
                                               doc="bytes of key->offset map shared by the cleaner threads")
    log_cleaner_backoff_ms: int = prop("log.cleaner.backoff.ms", 15000, check=positive,
                                       doc="how long a cleaner thread sleeps when no log needs cleaning")
    log_cleaner_io_max_bytes_per_second: float = prop("log.cleaner.io.max.bytes.per.second", UNTHROTTLED,
                                                      check=_positive_rate,
                                                      doc="read+write bytes/s of all cleaner threads together")
    log_index_interval_bytes: int = prop("log.index.interval.bytes", 4096, check=positive)
    log_index_size_max_bytes: int = prop("log.index.size.max.bytes", 10485760, check=positive)
    log_flush_interval_messages: int = prop("log.flush.interval.messages", NEVER, check=positive)
    log_flush_interval_ms: int | None = prop("log.flush.interval.ms", None)
    log_flush_scheduler_interval_ms: int = prop("log.flush.scheduler.interval.ms", 1000, check=positive)
    log_flush_offset_checkpoint_interval_ms: int = prop(
        "log.flush.offset.checkpoint.interval.ms", 60000, check=positive
    )
    metrics_enabled: bool = prop("metrics.enabled", True,
                                 doc="false: no metrics at all (nothing registered, no per-request counting)")
    metrics_port: int | None = prop("metrics.port", None, check=non_negative,
                                    doc="serve Prometheus metrics on this port (0: any free port; unset: off)")
    metrics_host: str = prop("metrics.host", "0.0.0.0", doc="address the metrics endpoint listens on")

    @classmethod
    def from_properties(cls, values: Properties | None = None, **overrides: object) -> Self:
        values = dict(values or {})
        for key in sorted(INERT_KEYS & values.keys()):
            log.info("broker config %r has no effect in metaq; ignored", key)
            del values[key]
        config = super().from_properties(values, **overrides)
        if not config.zookeeper_connect:
            raise ConfigError("config 'zookeeper.connect': a value is required")
        check_metrics(config.metrics_enabled, config.metrics_port)
        config._check_listeners()
        return config

    def _check_listeners(self) -> None:
        listeners = self.listener_list
        advertised_endpoints(listeners, self.advertised_list, {})
        names = {listener.name for listener in listeners}
        inter = self.inter_broker_listener
        if inter is not None and inter not in names:
            raise ConfigError(f"config 'inter.broker.listener.name': {inter} is not one of 'listeners'"
                              f" ({', '.join(sorted(names))})")
        if self.inter_broker_listener_name and self.security_inter_broker_protocol:
            raise ConfigError("config 'inter.broker.listener.name' and 'security.inter.broker.protocol': set only one")
        ca, truststore = self.ssl_ca_location, self.ssl_truststore_location
        if ca and truststore and ca != truststore:
            raise ConfigError("config 'ssl.ca.location' and 'ssl.truststore.location': set only one")
        sasl = any(listener.sasl for listener in listeners)
        if sasl and "PLAIN" in self.sasl_enabled_mechanisms and not self.sasl_plain_users_file:
            raise ConfigError("config 'sasl.enabled.mechanisms' has PLAIN: 'sasl.plain.users.file' is required")
        self.inter_broker_security()  # a SASL inter-broker listener without credentials fails here, not later

    def inter_broker_listener_of(self) -> Listener:
        """The listener replica fetchers connect to on other brokers (:attr:`inter_broker_listener`)."""
        listeners = self.listener_list
        name = self.inter_broker_listener
        return next((listener for listener in listeners if listener.name == name), listeners[0])

    def inter_broker_security(self) -> SecurityConfig:
        """The client security options of replica fetchers: the inter-broker listener's protocol, TLS with
        this broker's own CA, certificate and key (its certificate is the client certificate when the
        leader asks for one, so it must allow clientAuth), SASL as ``inter.broker.sasl.username``."""
        listener = self.inter_broker_listener_of()
        tls, sasl = listener.tls, listener.sasl
        if sasl:
            for key, value in (("inter.broker.sasl.username", self.inter_broker_sasl_username),
                               ("inter.broker.sasl.password", self.inter_broker_sasl_password)):
                if not value:
                    raise ConfigError(f"config {key!r}: a value is required: the inter-broker listener "
                                      f"{listener.name} is {listener.protocol}")
            if self.sasl_mechanism_inter_broker_protocol not in self.sasl_enabled_mechanisms:
                raise ConfigError(f"config 'sasl.mechanism.inter.broker.protocol': "
                                  f"{self.sasl_mechanism_inter_broker_protocol} is not in 'sasl.enabled.mechanisms'")
        ca = self.ssl_ca_location or self.ssl_truststore_location
        return SecurityConfig(
            security_protocol=listener.protocol,
            ssl_ca_location=ca if tls else None,
            ssl_certificate_location=self.ssl_certificate_location if tls else None,
            ssl_key_location=self.ssl_key_location if tls else None,
            ssl_key_password=self.ssl_key_password if tls else None,
            ssl_endpoint_identification_algorithm=self.ssl_endpoint_identification_algorithm or "none",
            sasl_mechanism=self.sasl_mechanism_inter_broker_protocol,
            sasl_username=self.inter_broker_sasl_username if sasl else None,
            sasl_password=self.inter_broker_sasl_password if sasl else None)

    @property
    def protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.listener_security_protocol_map)

    @property
    def listener_list(self) -> tuple[Listener, ...]:
        """Every listener to bind (``listeners``)."""
        return parse_listeners("listeners", self.listeners, self.protocol_map)

    @property
    def advertised_list(self) -> tuple[Listener, ...] | None:
        """``advertised.listeners``, or None when unset."""
        if not self.advertised_listeners:
            return None
        return parse_listeners("advertised.listeners", self.advertised_listeners, self.protocol_map)

    @property
    def inter_broker_listener(self) -> str | None:
        """The listener name brokers use among themselves (``inter.broker.listener.name``, or the listener
        named after ``security.inter.broker.protocol``); None: the first listener."""
        return self.inter_broker_listener_name or self.security_inter_broker_protocol

    @property
    def tls_settings(self) -> TlsSettings:
        password = self.ssl_key_password.reveal() if self.ssl_key_password else None
        return TlsSettings(self.ssl_certificate_location, self.ssl_key_location, password,
                           self.ssl_ca_location or self.ssl_truststore_location, self.ssl_client_auth,
                           self.ssl_enabled_protocols)

    @property
    def data_dirs(self) -> list[Path]:
        return [Path(d) for d in (self.log_dirs or (self.log_dir,))]

    @property
    def retention_ms(self) -> int:
        if self.log_retention_ms is not None:
            return self.log_retention_ms
        if self.log_retention_minutes is not None:
            return self.log_retention_minutes * 60000
        return self.log_retention_hours * HOUR_MS if self.log_retention_hours >= 0 else -1

    @property
    def session_timeout_ms(self) -> int:
        return self.zookeeper_session_timeout_ms

    @property
    def connection_timeout_ms(self) -> int:
        return self.zookeeper_connection_timeout_ms or self.zookeeper_session_timeout_ms

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=self.log_segment_bytes,
            segment_ms=self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * HOUR_MS,
            retention_bytes=self.log_retention_bytes,
            retention_ms=self.retention_ms,
            index_interval_bytes=self.log_index_interval_bytes,
            index_max_bytes=self.log_index_size_max_bytes,
            flush_interval_messages=self.log_flush_interval_messages,
            flush_interval_ms=self.log_flush_interval_ms,
            segment_delete_delay_ms=self.log_segment_delete_delay_ms,
            max_message_bytes=self.message_max_bytes,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            cleanup_policy=self.log_cleanup_policy,
            min_cleanable_dirty_ratio=self.log_cleaner_min_cleanable_ratio,
            min_compaction_lag_ms=self.log_cleaner_min_compaction_lag_ms,
            max_compaction_lag_ms=self.log_cleaner_max_compaction_lag_ms,
            delete_retention_ms=self.log_cleaner_delete_retention_ms,
            timestamp_type=self.log_message_timestamp_type,
        )

    def cleaner_config(self) -> CleanerConfig:
        return CleanerConfig(
            enable=self.log_cleaner_enable,
            threads=self.log_cleaner_threads,
            dedupe_buffer_size=self.log_cleaner_dedupe_buffer_size,
            backoff_ms=self.log_cleaner_backoff_ms,
            io_max_bytes_per_second=self.log_cleaner_io_max_bytes_per_second,
        )
