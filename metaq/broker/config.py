"""BrokerConfig: a Kafka-style ``server.properties`` for metaq's broker.

    config = BrokerConfig.from_file("server.properties")
    config = BrokerConfig.from_properties({"broker.id": 1, "zookeeper.connect": "127.0.0.1:2181",
                                           "log.dirs": "/tmp/metaq-logs"})

Unknown keys are errors. A few Kafka keys that tune machinery metaq does not have (thread pools, replica
fetchers) are accepted for drop-in compatibility with existing files and logged as having no effect.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from metaq.broker.log.config import LogConfig
from metaq.config import Config, ConfigError, non_negative, positive, prop
from metaq.metrics.off import check_metrics
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
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "queued.max.requests",
        "zookeeper.set.acl",
    }
)


def _broker_id(value: int) -> str | None:
    """Clients read broker ids as int32: a larger id would make every Metadata response unencodable."""
    return None if 0 <= value <= INT32_MAX else f"must be in 0..{INT32_MAX}"


def _listener(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        if parts.scheme.upper() != "PLAINTEXT" or parts.port is None:
            return "must be PLAINTEXT://host:port"
    except ValueError as e:
        return f"is not a listener URL ({e})"
    return None


def _unbounded_or_positive(value: int) -> str | None:
    return None if value == -1 or value > 0 else "must be -1 (unbounded) or > 0"


@dataclass(frozen=True)
class BrokerConfig(Config):
    broker_id: int = prop("broker.id", 0, check=_broker_id)
    listeners: str = prop("listeners", "PLAINTEXT://127.0.0.1:9092", check=_listener)
    advertised_listeners: str | None = prop("advertised.listeners", None, check=_listener)
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
    offsets_retention_minutes: int = prop("offsets.retention.minutes", 10080, check=positive)
    offsets_retention_check_interval_ms: int = prop("offsets.retention.check.interval.ms", 600000, check=positive)
    offset_metadata_max_bytes: int = prop("offset.metadata.max.bytes", 4096, check=non_negative)
    offsets_commit_required_acks: int = prop("offsets.commit.required.acks", -1)
    group_min_session_timeout_ms: int = prop("group.min.session.timeout.ms", 6000, check=positive)
    group_max_session_timeout_ms: int = prop("group.max.session.timeout.ms", 1800000, check=positive)
    # Kafka waits 3000 ms before a new group's first rebalance; metaq completes it as soon as the members
    # that asked have joined, so the default is 0 (set it to batch up a herd of members starting together)
    group_initial_rebalance_delay_ms: int = prop("group.initial.rebalance.delay.ms", 0, check=non_negative)
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
    fetch_max_bytes: int = prop("fetch.max.bytes", 52428800, check=positive)
    replica_fetch_response_max_bytes: int = prop("replica.fetch.response.max.bytes", 10485760, check=positive)
    log_segment_bytes: int = prop("log.segment.bytes", 1073741824, check=positive)
    log_roll_hours: int = prop("log.roll.hours", 168, check=positive)
    log_roll_ms: int | None = prop("log.roll.ms", None)
    log_retention_hours: int = prop("log.retention.hours", 168)
    log_retention_minutes: int | None = prop("log.retention.minutes", None)
    log_retention_ms: int | None = prop("log.retention.ms", None)
    log_retention_bytes: int = prop("log.retention.bytes", -1)
    log_retention_check_interval_ms: int = prop("log.retention.check.interval.ms", 300000, check=positive)
    log_segment_delete_delay_ms: int = prop("log.segment.delete.delay.ms", 60000, check=non_negative)
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
    def from_properties(cls, values: Mapping[str, Any] | None = None, **overrides: Any) -> Self:
        values = dict(values or {})
        for key in sorted(INERT_KEYS & values.keys()):
            log.info("broker config %r has no effect in metaq; ignored", key)
            del values[key]
        config = super().from_properties(values, **overrides)
        if not config.zookeeper_connect:
            raise ConfigError("config 'zookeeper.connect': a value is required")
        check_metrics(config.metrics_enabled, config.metrics_port)
        return config

    @property
    def listener(self) -> tuple[str, int]:
        """(host, port) to bind."""
        parts = urlsplit(self.listeners)
        return parts.hostname or "0.0.0.0", int(parts.port or 9092)

    @property
    def advertised(self) -> tuple[str, int]:
        """(host, port) written to ZooKeeper and answered in Metadata."""
        parts = urlsplit(self.advertised_listeners or self.listeners)
        host = parts.hostname or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return host, int(parts.port or 9092)

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
        )
