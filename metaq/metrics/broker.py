"""Broker metrics (Kafka's kafka.server / kafka.network / kafka.log MBeans, in Prometheus form).

| name | type | labels |
|---|---|---|
| metaq_broker_requests_total | counter | api |
| metaq_broker_request_errors_total | counter | api, error |
| metaq_broker_request_duration_seconds | histogram | api |
| metaq_broker_bytes_in_total, metaq_broker_bytes_out_total, metaq_broker_messages_in_total | counter | topic |
| metaq_broker_connections | gauge | |
| metaq_broker_log_size_bytes, metaq_broker_log_segments, metaq_broker_log_end_offset | gauge | topic, partition |
| metaq_broker_under_replicated_partitions, metaq_broker_offline_partitions, metaq_broker_active_controller | gauge | |
| metaq_broker_coordinator_groups, metaq_broker_coordinator_members | gauge | |
| metaq_broker_log_cleaner_runs, _bytes_read, _bytes_written, _records_removed, _failures | gauge (since start) | |
| metaq_broker_log_cleaner_dirty_ratio | gauge | topic, partition |
| metaq_broker_log_cleaner_max_compaction_delay_seconds | gauge | |

Request counts and durations are per API (the request's name, e.g. FETCH); errors are Kafka error names in
answers (per partition for Produce and Fetch) and ``PROTOCOL`` for frames that closed their connection. Fetch
``bytes_out`` counts record bytes served, as Kafka's BytesOutPerSec does. Partition state is read from the
logs and the coordinator when Prometheus scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from metaq.metrics.families import StateCollector, shared


@dataclass(frozen=True)
class LogState:
    topic: str
    partition: int
    size_bytes: int
    segments: int
    log_end_offset: int


@dataclass(frozen=True)
class CleanerState:
    """The log cleaner's totals since the start and the last dirty ratio of each compacted log
    (docs/compaction.md)."""

    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    failures: int = 0
    dirty_ratios: tuple[tuple[str, int, float], ...] = ()
    max_compaction_delay_s: float = 0.0
    """Kafka's ``max-compaction-delay-secs``: the longest a compacted log's first dirty segment has waited beyond
    its ``max.compaction.lag.ms``, as of the cleaner's last choice of a log."""


@dataclass(frozen=True)
class ClusterState:
    under_replicated: int = 0
    offline: int = 0
    active_controller: bool = False
    groups: int = 0
    members: int = 0


class _Families:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter("metaq_broker_requests", "Requests handled", ["api"], registry=r)
        self.errors = Counter("metaq_broker_request_errors", "Errors answered or connections closed",
                              ["api", "error"], registry=r)
        self.duration = Histogram("metaq_broker_request_duration_seconds", "Time from a request's frame to its answer",
                                  ["api"], registry=r,
                                  buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))
        self.bytes_in = Counter("metaq_broker_bytes_in", "Record bytes appended", ["topic"], registry=r)
        self.messages_in = Counter("metaq_broker_messages_in", "Records appended", ["topic"], registry=r)
        self.bytes_out = Counter("metaq_broker_bytes_out", "Record bytes served by Fetch", ["topic"], registry=r)
        self.connections = Gauge("metaq_broker_connections", "Open client connections", registry=r)
        self.state = StateCollector({
            "metaq_broker_log_size_bytes": ("Bytes in the partition's log", ["topic", "partition"]),
            "metaq_broker_log_segments": ("Segments in the partition's log", ["topic", "partition"]),
            "metaq_broker_log_end_offset": ("The partition's log end offset", ["topic", "partition"]),
            "metaq_broker_under_replicated_partitions": ("Led partitions whose ISR is smaller than the replicas", []),
            "metaq_broker_offline_partitions": ("Partitions without a live leader", []),
            "metaq_broker_active_controller": ("1 if this broker is the controller", []),
            "metaq_broker_coordinator_groups": ("Groups this broker coordinates", []),
            "metaq_broker_coordinator_members": ("Members of the groups this broker coordinates", []),
            "metaq_broker_log_cleaner_runs": ("Cleanings of compacted logs since the start", []),
            "metaq_broker_log_cleaner_bytes_read": ("Bytes the log cleaner read since the start", []),
            "metaq_broker_log_cleaner_bytes_written": ("Bytes the log cleaner wrote since the start", []),
            "metaq_broker_log_cleaner_records_removed": ("Records the log cleaner removed since the start", []),
            "metaq_broker_log_cleaner_failures": ("Cleanings that failed since the start", []),
            "metaq_broker_log_cleaner_dirty_ratio": ("Dirty share of a compacted log's cleanable bytes",
                                                     ["topic", "partition"]),
            "metaq_broker_log_cleaner_max_compaction_delay_seconds": (
                "Longest wait of a compacted log's dirty records beyond max.compaction.lag.ms", []),
        })
        r.register(self.state)


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._f: _Families = shared(registry, "broker", _Families)
        self._logs: Callable[[], Iterable[LogState]] = lambda: ()
        self._cluster: Callable[[], ClusterState] = ClusterState
        self._cleaner: Callable[[], CleanerState] = CleanerState
        self._token = self._f.state.add(self._sample)
        # labelled children by label: ``labels()`` takes a lock and builds a key on every call, and these are
        # counted on every request (docs/performance.md, "The broker's cost per request")
        self._per_api: dict[str, tuple[Callable[[], None], Callable[[float], None]]] = {}
        self._per_topic_in: dict[str, tuple[Callable[[float], None], Callable[[float], None]]] = {}
        self._per_topic_out: dict[str, Callable[[float], None]] = {}

    def request(self, api: str, seconds: float) -> None:
        children = self._per_api.get(api)
        if children is None:
            children = self._per_api[api] = (self._f.requests.labels(api).inc,
                                             self._f.duration.labels(api).observe)
        children[0]()
        children[1](seconds)

    def error(self, api: str, error: str) -> None:
        self._f.errors.labels(api, error).inc()

    def appended(self, topic: str, records: int, size: int) -> None:
        children = self._per_topic_in.get(topic)
        if children is None:
            children = self._per_topic_in[topic] = (self._f.messages_in.labels(topic).inc,
                                                    self._f.bytes_in.labels(topic).inc)
        children[0](records)
        children[1](size)

    def served(self, topic: str, size: int) -> None:
        inc = self._per_topic_out.get(topic)
        if inc is None:
            inc = self._per_topic_out[topic] = self._f.bytes_out.labels(topic).inc
        inc(size)

    def connection_opened(self) -> None:
        self._f.connections.inc()

    def connection_closed(self) -> None:
        self._f.connections.dec()

    def report_logs(self, logs: Callable[[], Iterable[LogState]]) -> None:
        self._logs = logs

    def report_cluster(self, cluster: Callable[[], ClusterState]) -> None:
        self._cluster = cluster

    def report_cleaner(self, cleaner: Callable[[], CleanerState]) -> None:
        self._cleaner = cleaner

    def close(self) -> None:
        self._f.state.remove(self._token)

    def _sample(self) -> Iterator[tuple[str, list[str], float]]:
        for log in self._logs():
            labels = [log.topic, str(log.partition)]
            yield "metaq_broker_log_size_bytes", labels, log.size_bytes
            yield "metaq_broker_log_segments", labels, log.segments
            yield "metaq_broker_log_end_offset", labels, log.log_end_offset
        cluster = self._cluster()
        yield "metaq_broker_under_replicated_partitions", [], cluster.under_replicated
        yield "metaq_broker_offline_partitions", [], cluster.offline
        yield "metaq_broker_active_controller", [], int(cluster.active_controller)
        yield "metaq_broker_coordinator_groups", [], cluster.groups
        yield "metaq_broker_coordinator_members", [], cluster.members
        cleaner = self._cleaner()
        yield "metaq_broker_log_cleaner_runs", [], cleaner.runs
        yield "metaq_broker_log_cleaner_bytes_read", [], cleaner.bytes_read
        yield "metaq_broker_log_cleaner_bytes_written", [], cleaner.bytes_written
        yield "metaq_broker_log_cleaner_records_removed", [], cleaner.records_removed
        yield "metaq_broker_log_cleaner_failures", [], cleaner.failures
        for topic, partition, ratio in cleaner.dirty_ratios:
            yield "metaq_broker_log_cleaner_dirty_ratio", [topic, str(partition)], ratio
        yield "metaq_broker_log_cleaner_max_compaction_delay_seconds", [], cleaner.max_compaction_delay_s
