"""The brokers' log directories, asked with DescribeLogDirs and changed with AlterReplicaLogDirs (what
``kafka-log-dirs`` and the ``log_dirs`` of a ``kafka-reassign-partitions`` plan do; docs/log-dirs.md).

    layout = BootstrapLayout.connect("broker1:9092")
    for broker in describe_log_dirs(layout, SecurityConfig()):
        print(broker.broker_id, [(d.path, d.error) for d in broker.dirs])
    move_replica(layout, SecurityConfig(), "orders", 0, broker_id=1, log_dir="/data2/kafka")
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from kafka.protocol.admin import AlterReplicaLogDirsRequest, DescribeLogDirsRequest
from kafka.protocol.api_message import ApiMessage

from metaq.admin.bootstrap import BootstrapLayout
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.errors import ConfigError, ErrorCode, MetaqError, for_code
from metaq.json_types import JsonObject
from metaq.protocol.messages import ApiResponse, ApiStruct, RequestFields

__all__ = ["BrokerLogDirs", "LogDirInfo", "ReplicaInfo", "describe_log_dirs", "move_replica"]


@dataclass(frozen=True)
class ReplicaInfo:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirInfo:
    path: str
    error: str | None
    """None for an online directory, else Kafka's error name (KAFKA_STORAGE_ERROR: offline)."""
    replicas: list[ReplicaInfo] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True)
class BrokerLogDirs:
    broker_id: int
    dirs: list[LogDirInfo]

    def to_json(self) -> JsonObject:
        """Kafka's ``kafka-log-dirs --describe`` document shape for one broker."""
        return {"broker": self.broker_id, "logDirs": [
            {"logDir": d.path, "error": d.error, "totalBytes": d.total_bytes, "usableBytes": d.usable_bytes,
             "partitions": [{"partition": f"{r.topic}-{r.partition}", "size": r.size, "offsetLag": r.offset_lag,
                             "isFuture": r.is_future} for r in d.replicas]}
            for d in self.dirs]}


def _settings(security: SecurityConfig, timeout_ms: int) -> ConnectionSettings:
    return ConnectionSettings(client_id="metaq-admin", request_timeout_ms=timeout_ms,
                              connect_timeout_ms=timeout_ms, security=security)


def _ask(layout: BootstrapLayout, security: SecurityConfig, broker_id: int, request_class: type[ApiMessage],
         fields: RequestFields, timeout_ms: int) -> ApiResponse:
    broker = layout.brokers().get(broker_id)
    if broker is None or broker.host is None:
        raise ConfigError(f"broker {broker_id} is not live (live: {sorted(layout.brokers())})")
    conn = _settings(security, timeout_ms).new_connection(broker.host, broker.port)
    try:
        conn.connect()
        return conn.send(request_class, fields)
    finally:
        conn.close()


def _dir_info(result: ApiStruct) -> LogDirInfo:
    replicas = [ReplicaInfo(topic.name, p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
                for topic in result.topics for p in topic.partitions]
    return LogDirInfo(result.log_dir, None if result.error_code == 0 else for_code(result.error_code).message,
                      sorted(replicas, key=lambda r: (r.topic, r.partition)),
                      getattr(result, "total_bytes", -1), getattr(result, "usable_bytes", -1))


def describe_log_dirs(layout: BootstrapLayout, security: SecurityConfig, *, brokers: Collection[int] | None = None,
                      topics: Collection[str] | None = None, timeout_ms: int = 10000) -> list[BrokerLogDirs]:
    """Every live broker's (or those of ``brokers``) log directories, with the partitions of ``topics``
    (all when None)."""
    wanted = sorted(layout.brokers()) if brokers is None else sorted(brokers)
    request_topics = None
    if topics is not None:
        assignments = {t: layout.topic_assignment(t) for t in topics}
        request_topics = [{"topic": t, "partitions": sorted(a.partitions)} for t, a in assignments.items()
                          if a is not None]
    result = []
    for broker_id in wanted:
        answer = _ask(layout, security, broker_id, DescribeLogDirsRequest, {"topics": request_topics}, timeout_ms)
        if getattr(answer, "error_code", 0):
            raise for_code(answer.error_code)(f"DescribeLogDirs refused by broker {broker_id}")
        result.append(BrokerLogDirs(broker_id, sorted((_dir_info(r) for r in answer.results), key=lambda d: d.path)))
    return result


def move_replica(layout: BootstrapLayout, security: SecurityConfig, topic: str, partition: int, *,
                 broker_id: int, log_dir: str, timeout_ms: int = 10000) -> None:
    """Start moving the broker's replica of ``topic``-``partition`` to ``log_dir`` (AlterReplicaLogDirs); the
    broker copies it and swaps it in while it is written. MetaqError with Kafka's error name if refused."""
    fields = {"dirs": [{"path": log_dir, "topics": [{"name": topic, "partitions": [partition]}]}]}
    answer = _ask(layout, security, broker_id, AlterReplicaLogDirsRequest, fields, timeout_ms)
    for result in answer.results:
        for p in result.partitions:
            if p.error_code != ErrorCode.NONE:
                error = for_code(p.error_code)
                raise MetaqError(f"broker {broker_id} refused to move {topic}-{partition} to {log_dir}: "
                                 f"{error.message}")
