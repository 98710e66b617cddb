"""ClusterMetadata over an in-memory layout (over the real ZkLayout: integration_tests/test_producer_metadata_zk.py)."""

from __future__ import annotations

import pytest

from metaq.errors import UnknownTopicError, ZooKeeperUnavailableError
from metaq.producer.metadata import ClusterMetadata, Leader
from metaq.testing.wait import wait_until
from tests.producer.producer_fakes import Assignment, FakeLayout


@pytest.fixture
def lay() -> FakeLayout:
    lay = FakeLayout()
    lay.add_broker(0, 9092, "h0")
    lay.add_broker(1, 9093, "h1")
    lay.add_topic("t", 3, leader=1)
    return lay


def test_partitions_and_leaders(lay):
    md = ClusterMetadata(lay)
    assert md.partitions_for("t") == [0, 1, 2]
    assert md.leader_for("t", 2) == Leader("h1", 9093, 1)
    assert md.leader_for("t", 7) is None
    assert md.leader_for("nope", 0) is None


def test_unknown_topic(lay):
    with pytest.raises(UnknownTopicError, match="'nope'"):
        ClusterMetadata(lay).topic("nope")


def test_partitions_without_a_live_leader_are_not_available(lay):
    lay.move_leader("t", 0, 5)  # broker 5 is not registered
    lay.move_leader("t", 1, -1)  # no leader
    info = ClusterMetadata(lay).topic("t")
    assert info.partitions == (0, 1, 2) and info.available == (2,)


def test_missing_state_node_assumes_the_first_live_replica(lay):
    lay.assignments["u"] = Assignment({0: (7, 0), 1: (7,)})
    info = ClusterMetadata(lay).topic("u")
    assert info.leaders == {0: Leader("h0", 9092, 0)}


def test_reads_are_cached_until_invalidated_or_old(lay):
    md = ClusterMetadata(lay, max_age_ms=1000)
    md.topic("t")
    md.topic("t")
    assert lay.reads == 1
    md.invalidate("t")
    md.topic("t")
    assert lay.reads == 2
    wait_until(lambda: md.topic("t") is not None and lay.reads > 2, 10, "a read once the cache is older than max age")
    assert lay.reads == 3


def test_refresh_sees_changes_and_deletion(lay):
    md = ClusterMetadata(lay)
    md.topic("t")
    lay.move_leader("t", 0, 0)
    assert md.leader_for("t", 0) == Leader("h1", 9093, 1)  # cached
    md.refresh("t")
    assert md.leader_for("t", 0) == Leader("h0", 9092, 0)
    del lay.assignments["t"]
    assert md.refresh("t") is None
    with pytest.raises(UnknownTopicError):
        md.topic("t")


def test_zookeeper_failure_keeps_known_topics(lay):
    md = ClusterMetadata(lay)
    md.topic("t")
    md.invalidate("t")
    lay.down = True
    assert md.topic("t").partitions == (0, 1, 2)
    with pytest.raises(ZooKeeperUnavailableError):
        md.topic("other")


def test_close_runs_on_close_once(lay):
    calls = []
    md = ClusterMetadata(lay, on_close=lambda: calls.append(1))
    md.close()
    md.close()
    assert calls == [1]
