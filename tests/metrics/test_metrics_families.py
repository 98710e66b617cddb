"""Metric families: several members (or a broker and members) share one registry, and the exposition is one
family per name that Prometheus' own parser accepts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from metaq.metrics.broker import BrokerMetrics, CleanerState, ClusterState, LogState
from metaq.metrics.consumer import ConsumerMetrics, PartitionPosition


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names)), "a family appears twice"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_two_members_report_lag_and_counters_under_their_own_labels() -> None:
    registry = CollectorRegistry()
    a = ConsumerMetrics("g", "a", registry)
    b = ConsumerMetrics("g", "b", registry)
    a.report_positions(lambda: [PartitionPosition("t", 0, 10, 25), PartitionPosition("t", 1, 5, None)])
    b.report_positions(lambda: [PartitionPosition("t", 2, 7, 7)])
    a.fetched("t", 3, 300)
    a.fetched("t", 2, 200)
    b.committed(0.002, ok=False, fenced=2)
    samples = _samples(registry)
    lag = {labels: value for (name, labels), value in samples.items() if name == "metaq_consumer_lag"}
    assert lag == {(("consumer", "a"), ("group", "g"), ("partition", "0"), ("topic", "t")): 15,
                   (("consumer", "b"), ("group", "g"), ("partition", "2"), ("topic", "t")): 0}
    assert samples[("metaq_consumer_max_lag", (("consumer", "a"), ("group", "g")))] == 15
    assert samples[("metaq_consumer_owned_partitions", (("consumer", "a"), ("group", "g")))] == 2
    assert samples[("metaq_consumer_max_lag", (("consumer", "b"), ("group", "g")))] == 0
    assert samples[("metaq_consumer_messages_total", (("consumer", "a"), ("group", "g"), ("topic", "t")))] == 5
    assert samples[("metaq_consumer_bytes_total", (("consumer", "a"), ("group", "g"), ("topic", "t")))] == 500
    assert samples[("metaq_consumer_fenced_commits_total", (("consumer", "b"), ("group", "g")))] == 2
    assert samples[("metaq_consumer_commit_failures_total", (("consumer", "b"), ("group", "g")))] == 1
    a.close()
    assert ("metaq_consumer_max_lag", (("consumer", "a"), ("group", "g"))) not in _samples(registry)


def test_broker_reports_requests_logs_and_cluster_state() -> None:
    registry = CollectorRegistry()
    broker = BrokerMetrics(registry)
    broker.report_logs(lambda: [LogState("t", 0, 4096, 2, 100)])
    broker.report_cluster(lambda: ClusterState(groups=3, members=5, active_controller=True))
    broker.report_cleaner(lambda: CleanerState(runs=2, records_removed=7, dirty_ratios=(("c", 1, 0.25),)))
    broker.request("PRODUCE", 0.003)
    broker.error("PRODUCE", "CORRUPT_MESSAGE")
    broker.connection_opened()
    samples = _samples(registry)
    assert samples[("metaq_broker_requests_total", (("api", "PRODUCE"),))] == 1
    assert samples[("metaq_broker_request_errors_total", (("api", "PRODUCE"), ("error", "CORRUPT_MESSAGE")))] == 1
    assert samples[("metaq_broker_log_end_offset", (("partition", "0"), ("topic", "t")))] == 100
    assert samples[("metaq_broker_coordinator_members", ())] == 5
    assert samples[("metaq_broker_active_controller", ())] == 1
    assert samples[("metaq_broker_connections", ())] == 1
    assert samples[("metaq_broker_log_cleaner_runs", ())] == 2
    assert samples[("metaq_broker_log_cleaner_records_removed", ())] == 7
    assert samples[("metaq_broker_log_cleaner_dirty_ratio", (("partition", "1"), ("topic", "c")))] == 0.25
