"""Producer configuration, with Kafka's producer property names::

    ProducerConfig.from_properties({"zookeeper.connect": "127.0.0.1:2181/metaq", "acks": "all", "linger.ms": "10"})
"""

from __future__ import annotations

from dataclasses import dataclass

from metaq.client.security import SecurityConfig
from metaq.client.versions import DEFAULT_FALLBACK, fallback_release
from metaq.config import Properties, non_negative, one_of, positive, prop
from metaq.errors import ConfigError
from metaq.protocol.compression import CODECS
from metaq.zksecurity import ZooKeeperClientConfig

ACKS_ALL = -1
MAX_IDEMPOTENT_IN_FLIGHT = 5  # the broker remembers a producer's last 5 batches per partition
PARTITIONERS = ("default", "round_robin", "random")
COMPRESSION_TYPES = tuple(CODECS)  # none, gzip, snappy, lz4, zstd


def _acks(value: int) -> str | None:
    return None if value in (-1, 0, 1) else "must be one of -1 (all), 0, 1"


def _is_all(acks: object) -> bool:
    return isinstance(acks, str) and acks.strip().lower() == "all"


@dataclass(frozen=True)
class ProducerConfig(ZooKeeperClientConfig, SecurityConfig):
    """The producer's options; the security ones are :class:`SecurityConfig`'s."""

    zookeeper_connect: str | None = prop(
        "zookeeper.connect", None, doc="host:port[,host:port...][/chroot] of the ZooKeeper that holds metadata")
    client_id: str = prop("client.id", "metaq-producer", doc="sent to brokers in every request header")
    acks: int = prop("acks", ACKS_ALL, check=_acks,
                     doc="0: no response; 1: the leader wrote it; -1/all (the default, as Kafka's since 3.0): "
                         "the in-sync replicas have it")
    enable_idempotence: bool | None = prop(
        "enable.idempotence", None,
        doc="true: the broker deduplicates resent batches and refuses out-of-order ones (a producer id and "
            "per-partition sequence numbers, KIP-98); needs acks=all, retries > 0 and at most 5 in flight. "
            "Unset (the default): on unless those settings say otherwise, as Kafka's producer 3.x")
    linger_ms: int = prop("linger.ms", 5, check=non_negative, doc="how long a batch waits for more records")
    batch_size: int = prop("batch.size", 262144, check=positive,
                           doc="bytes per partition batch; larger than Kafka's 16384 because per-batch work "
                               "is costly in Python")
    buffer_memory: int = prop("buffer.memory", 33554432, check=positive,
                              doc="bytes of unsent records before send() blocks")
    max_block_ms: int = prop("max.block.ms", 60000, check=non_negative,
                             doc="how long send() waits for buffer space or topic metadata")
    max_request_size: int = prop("max.request.size", 1048576, check=positive,
                                 doc="largest produce request, and so the largest record")
    max_in_flight: int = prop("max.in.flight.requests.per.connection", 5, check=positive,
                              doc="pipelined produce requests per broker; order per partition is kept anyway")
    retries: int = prop("retries", 5, check=non_negative, doc="resends of a batch after a retriable error")
    retry_backoff_ms: int = prop("retry.backoff.ms", 100, check=non_negative,
                                 doc="first wait before a retry; doubles per attempt up to retry.backoff.max.ms")
    retry_backoff_max_ms: int = prop("retry.backoff.max.ms", 1000, check=non_negative)
    request_timeout_ms: int = prop("request.timeout.ms", 30000, check=positive)
    connect_timeout_ms: int = prop("socket.connection.setup.timeout.ms", 10000, check=positive)
    partitioner: str = prop("partitioner", "default", check=one_of(*PARTITIONERS),
                            doc="default: murmur2 of the key (as Kafka's Java client), round robin for null keys")
    compression_type: str = prop("compression.type", "none", check=one_of(*COMPRESSION_TYPES),
                                 doc="none, gzip, snappy, lz4 or zstd (cramjam); a batch that does not shrink "
                                     "is sent uncompressed")
    zookeeper_session_timeout_ms: int = prop("zookeeper.session.timeout.ms", 6000, check=positive)
    zookeeper_connection_timeout_ms: int = prop("zookeeper.connection.timeout.ms", 6000, check=positive)
    broker_version_fallback: str = prop(
        "broker.version.fallback", DEFAULT_FALLBACK, check=fallback_release,
        doc="the Kafka release whose API versions a broker without ApiVersions (0.8/0.9) is taken to speak "
            "(librdkafka's property); with 0.8.x/0.9.x the producer sends Produce v0/v1 and message set v0 "
            "(docs/legacy-wire.md)")
    metadata_max_age_ms: int = prop("metadata.max.age.ms", 300000, check=positive,
                                    doc="re-read a topic's partitions and leaders from ZooKeeper this often")

    @classmethod
    def from_properties(cls, values: Properties | None = None, **overrides: object) -> ProducerConfig:
        """As :meth:`Config.from_properties`, also accepting ``acks=all``."""
        values = dict(values or {})
        if _is_all(values.get("acks")):
            values["acks"] = ACKS_ALL
        if _is_all(overrides.get("acks")):
            overrides["acks"] = ACKS_ALL
        return super().from_properties(values, **overrides)

    @property
    def idempotent(self) -> bool:
        """Whether the producer is idempotent: ``enable.idempotence``, or if unset whether the settings allow
        it (Kafka's ProducerConfig.postProcessAndValidateIdempotenceConfigs)."""
        if self.enable_idempotence is not None:
            return self.enable_idempotence
        return not self._idempotence_conflicts()

    def _idempotence_conflicts(self) -> list[str]:
        conflicts = []
        if self.acks != ACKS_ALL:
            conflicts.append("acks must be all (-1)")
        if self.retries == 0:
            conflicts.append("retries must be > 0")
        if self.max_in_flight > MAX_IDEMPOTENT_IN_FLIGHT:
            conflicts.append(f"max.in.flight.requests.per.connection must be <= {MAX_IDEMPOTENT_IN_FLIGHT}")
        return conflicts

    def _check_values(self) -> None:
        super()._check_values()
        if self.enable_idempotence and (conflicts := self._idempotence_conflicts()):
            raise ConfigError(f"config 'enable.idempotence': true needs {', '.join(conflicts)}")
        if self.batch_size > self.max_request_size:
            raise ConfigError(f"config 'batch.size': {self.batch_size} must be <= max.request.size "
                              f"({self.max_request_size})")
        if self.max_request_size > self.buffer_memory:
            raise ConfigError(f"config 'max.request.size': {self.max_request_size} must be <= buffer.memory "
                              f"({self.buffer_memory})")

    def require_zookeeper(self) -> str:
        """zookeeper.connect, which a producer needs unless metadata is injected."""
        if not self.zookeeper_connect:
            raise ConfigError("config 'zookeeper.connect': a value is required")
        return self.zookeeper_connect
