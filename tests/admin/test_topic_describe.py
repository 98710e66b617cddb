"""``topics describe``: replication factor, and the --under-min-isr / --unavailable filters counted as
kafka-topics counts them (TopicCommand's under-min-isr: no leader or ISR below min.insync.replicas)."""

from __future__ import annotations

from metaq.admin.topics import OFFLINE, OK, UNDER_REPLICATED, PartitionDetail, TopicDetail
from metaq.cli.topics import Cleaning, filter_partitions, render


def _partition(p: int, leader: int | None, isr: tuple[int, ...], status: str) -> PartitionDetail:
    return PartitionDetail(p, leader, (0, 1, 2), isr, 0, 10, status=status)


TOPIC = TopicDetail("clicks", [_partition(0, 0, (0, 1, 2), OK), _partition(1, 0, (0,), UNDER_REPLICATED),
                               _partition(2, None, (), OFFLINE)], {"min.insync.replicas": "2"})
HEALTHY = TopicDetail("views", [_partition(0, 1, (1, 2, 0), OK)], {})


def test_replication_factor_and_min_isr_are_shown() -> None:
    text = render([TOPIC])
    assert "Topic clicks: 3 partitions, replication factor 3, config min.insync.replicas=2" in text
    assert TOPIC.to_json()["replication_factor"] == 3


def test_compacted_topics_show_their_policy_and_dirty_ratio() -> None:
    cleaning = Cleaning({"clicks": "compact,delete", "views": "delete"}, {("clicks", 0): 0.25})
    text = render([TOPIC, HEALTHY], cleaning)
    assert "min.insync.replicas=2, cleanup.policy compact,delete\n" in text
    clicks, views = text.split("\n\n")
    assert "DIRTY-RATIO" in clicks and "0.25" in clicks and "DIRTY-RATIO" not in views
    assert "cleanup.policy delete" in views


def test_under_min_isr_keeps_partitions_below_min_isr_or_without_leader() -> None:
    kept = filter_partitions([TOPIC, HEALTHY], under_min_isr=True)
    assert [(d.topic, [p.partition for p in d.partitions]) for d in kept] == [("clicks", [1, 2])]
    assert "Topic clicks: 3 partitions, replication factor 3" in render(kept)


def test_min_isr_defaults_to_one() -> None:
    topic = TopicDetail("t", [_partition(0, 0, (0,), UNDER_REPLICATED)], {})
    assert filter_partitions([topic], under_min_isr=True) == []


def test_unavailable_keeps_partitions_without_a_live_leader() -> None:
    kept = filter_partitions([TOPIC, HEALTHY], unavailable=True)
    assert [(d.topic, [p.partition for p in d.partitions]) for d in kept] == [("clicks", [2])]
    assert filter_partitions([HEALTHY], unavailable=True) == []
    assert filter_partitions([TOPIC, HEALTHY]) == [TOPIC, HEALTHY]
