"""Consumer metrics: what Kafka 0.8's consumer reported over JMX (messages and bytes per topic, MaxLag,
fetch rates, rebalances), plus metaq's commit fence and recover store.

| name | type | labels |
|---|---|---|
| metaq_consumer_messages_total, metaq_consumer_bytes_total | counter | group, consumer, topic |
| metaq_consumer_fetch_requests_total | counter | group, consumer, broker |
| metaq_consumer_fetch_errors_total | counter | group, consumer, error |
| metaq_consumer_rebalances_total | counter | group, consumer, result (ok, failed) |
| metaq_consumer_rebalance_duration_seconds, metaq_consumer_commit_duration_seconds | histogram | group, consumer |
| metaq_consumer_commit_failures_total, metaq_consumer_fenced_commits_total | counter | group, consumer |
| metaq_consumer_recover_replays_total | counter | group, consumer, topic, result (ok, failed) |
| metaq_consumer_lag | gauge | group, consumer, topic, partition |
| metaq_consumer_max_lag, metaq_consumer_owned_partitions | gauge | group, consumer |
| metaq_consumer_recover_store_messages | gauge | group, consumer, topic |

Messages and bytes count what the fetchers handed to the streams (per chunk). Lag is the partition's log end
offset (the high watermark of the last fetch answer) minus the member's consumed offset. 0.8's MinFetchRate
is ``min by (group, consumer) (rate(metaq_consumer_fetch_requests_total[1m]))``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from metaq.metrics.families import StateCollector, shared

MEMBER = ["group", "consumer"]


@dataclass(frozen=True)
class PartitionPosition:
    topic: str
    partition: int
    consumed_offset: int
    log_end_offset: int | None


Positions = Callable[[], Iterable[PartitionPosition]]
RecoverSizes = Callable[[], Iterable[tuple[str, int]]]


class _Families:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.messages = Counter("metaq_consumer_messages", "Messages fetched for the streams", [*MEMBER, "topic"],
                                registry=r)
        self.bytes = Counter("metaq_consumer_bytes", "Record-batch bytes fetched for the streams",
                             [*MEMBER, "topic"], registry=r)
        self.fetches = Counter("metaq_consumer_fetch_requests", "Fetch requests sent", [*MEMBER, "broker"],
                               registry=r)
        self.fetch_errors = Counter("metaq_consumer_fetch_errors", "Failed fetches (connection or partition error)",
                                    [*MEMBER, "error"], registry=r)
        self.rebalances = Counter("metaq_consumer_rebalances", "Rebalances", [*MEMBER, "result"], registry=r)
        self.rebalance_seconds = Histogram("metaq_consumer_rebalance_duration_seconds", "Rebalance duration",
                                           MEMBER, registry=r,
                                           buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.commit_seconds = Histogram("metaq_consumer_commit_duration_seconds", "Offset commit duration", MEMBER,
                                        registry=r, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))
        self.commit_failures = Counter("metaq_consumer_commit_failures", "Commits that failed", MEMBER, registry=r)
        self.fenced = Counter("metaq_consumer_fenced_commits",
                              "Partitions whose commit was refused by the fence (ownership lost)", MEMBER, registry=r)
        self.replays = Counter("metaq_consumer_recover_replays", "Recover-store redeliveries",
                               [*MEMBER, "topic", "result"], registry=r)
        self.state = StateCollector({
            "metaq_consumer_lag": ("Log end offset minus consumed offset", [*MEMBER, "topic", "partition"]),
            "metaq_consumer_max_lag": ("Largest lag over the owned partitions (0.8's MaxLag)", MEMBER),
            "metaq_consumer_owned_partitions": ("Partitions this member owns", MEMBER),
            "metaq_consumer_recover_store_messages": ("Messages set aside in the recover store", [*MEMBER, "topic"]),
        })
        r.register(self.state)


class ConsumerMetrics:
    """One group member's metrics; cheap calls meant for per-chunk, per-request and per-commit use."""

    def __init__(self, group: str, consumer: str, registry: CollectorRegistry = REGISTRY) -> None:
        self._f: _Families = shared(registry, "consumer", _Families)
        self._member = (group, consumer)
        self._positions: Positions = lambda: ()
        self._recover_sizes: RecoverSizes = lambda: ()
        self._token = self._f.state.add(self._sample)
        self._topic_counters: dict[str, tuple[Counter, Counter]] = {}

    def fetched(self, topic: str, records: int, size: int) -> None:
        counters = self._topic_counters.get(topic)
        if counters is None:
            counters = (self._f.messages.labels(*self._member, topic), self._f.bytes.labels(*self._member, topic))
            self._topic_counters[topic] = counters
        counters[0].inc(records)
        counters[1].inc(size)

    def fetch_request(self, broker_id: int) -> None:
        self._f.fetches.labels(*self._member, str(broker_id)).inc()

    def fetch_error(self, error: str) -> None:
        self._f.fetch_errors.labels(*self._member, error).inc()

    def rebalanced(self, seconds: float, ok: bool) -> None:
        self._f.rebalances.labels(*self._member, "ok" if ok else "failed").inc()
        self._f.rebalance_seconds.labels(*self._member).observe(seconds)

    def committed(self, seconds: float, ok: bool, fenced: int = 0) -> None:
        self._f.commit_seconds.labels(*self._member).observe(seconds)
        if not ok:
            self._f.commit_failures.labels(*self._member).inc()
        if fenced:
            self._f.fenced.labels(*self._member).inc(fenced)

    def replayed(self, topic: str, ok: bool) -> None:
        self._f.replays.labels(*self._member, topic, "ok" if ok else "failed").inc()

    def report_positions(self, positions: Positions) -> None:
        """Where lag and owned partitions come from at scrape time."""
        self._positions = positions

    def report_recover_sizes(self, sizes: RecoverSizes) -> None:
        self._recover_sizes = sizes

    def close(self) -> None:
        """Stop reporting this member's state (its counters stay, as Prometheus expects of counters)."""
        self._f.state.remove(self._token)

    def _sample(self) -> Iterator[tuple[str, list[str], float]]:
        member = list(self._member)
        owned = 0
        max_lag = 0
        for p in self._positions():
            owned += 1
            if p.log_end_offset is None:
                continue
            lag = max(0, p.log_end_offset - p.consumed_offset)
            max_lag = max(max_lag, lag)
            yield "metaq_consumer_lag", [*member, p.topic, str(p.partition)], lag
        yield "metaq_consumer_owned_partitions", member, owned
        yield "metaq_consumer_max_lag", member, max_lag
        for topic, size in self._recover_sizes():
            yield "metaq_consumer_recover_store_messages", [*member, topic], size
