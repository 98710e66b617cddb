"""A burst of membership changes is one rebalance per member (metaq.rebalance.coalesce.ms), and the
coalesced rebalance still converges on the range assignment of the final group."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from integration_tests.rebalance_fakes import STATE, FakeFetcher, FakeSubscription
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_member_state import STABLE
from metaq.testing.wait import wait_until
from zk_layout import BrokerInfo, TopicCount, ZkLayout

PARTITIONS = 12
JOINERS = 5


def _first_member(layout: ZkLayout, partitions: int, *, backoff_ms: int,
                  coalesce_ms: int) -> tuple[ZKRebalancerListener, FakeFetcher]:
    """Broker 0, topic t of ``partitions`` and member c0 of group g: registered, not rebalanced yet."""
    layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    layout.create_topic("t", {p: [0] for p in range(partitions)}, {p: STATE for p in range(partitions)})
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "unused:2181",
                                             "rebalance.backoff.ms": backoff_ms, "auto.commit.enable": False,
                                             "metaq.rebalance.coalesce.ms": coalesce_ms})
    layout.register_consumer("g", "c0", TopicCount(subscription={"t": 1}))
    fetcher = FakeFetcher()
    return ZKRebalancerListener(config, layout, "c0", FakeSubscription(), fetcher, ZooKeeperOffsetStore(layout, "g")), \
        fetcher


def test_a_burst_of_joins_is_one_rebalance_and_converges(zk_layout: ZkLayout) -> None:
    listener, fetcher = _first_member(zk_layout, PARTITIONS, backoff_ms=10000, coalesce_ms=1500)
    listener.synced_rebalance()
    assert fetcher.started == [("t", p) for p in range(PARTITIONS)]
    listener.start()
    try:
        before = listener.generation
        for i in range(1, JOINERS + 1):  # joins spread over ~1 s: without coalescing, one rebalance each
            zk_layout.register_consumer("g", f"c{i}", TopicCount(subscription={"t": 1}))
            time.sleep(0.2)
        # c0 sorts first among the 6 thread ids: range assignment gives it partitions 0 and 1
        wait_until(lambda: fetcher.started == [("t", 0), ("t", 1)] and listener.state == STABLE, 30,
                   "c0 to take its share of the final group")
        assert zk_layout.owners("g") == {("t", 0): "c0-0", ("t", 1): "c0-0"}
        assert listener.generation - before <= 2, listener.generation - before  # not one per join
    finally:
        listener.shutdown(commit=False)


def test_partitions_added_to_a_subscribed_topic_are_taken_also_after_rebalances_that_read_no_topic(
        zk_layout: ZkLayout) -> None:
    """A rebalance re-reads a topic's node only after its watch fired (the partitions are cached while it is
    armed): partitions added before and after a rebalance that used the cache are both noticed, so the
    watch stays armed across it."""
    listener, fetcher = _first_member(zk_layout, 2, backoff_ms=2000, coalesce_ms=50)
    listener.synced_rebalance()
    listener.start()
    try:
        assert fetcher.started == [("t", 0), ("t", 1)]
        zk_layout.add_partitions("t", {p: [0] for p in range(3)}, {p: STATE for p in range(3)})
        wait_until(lambda: fetcher.started == [("t", p) for p in range(3)] and listener.state == STABLE, 30,
                   "c0 to take the partition added")
        before = listener.generation
        zk_layout.register_consumer("g", "c1", TopicCount(subscription={"t": 1}))  # c0-0 < c1-0: 0 and 1
        wait_until(lambda: fetcher.started == [("t", 0), ("t", 1)] and listener.generation > before, 30,
                   "c0 to rebalance with the joiner")
        zk_layout.add_partitions("t", {p: [0] for p in range(6)}, {p: STATE for p in range(6)})
        wait_until(lambda: fetcher.started == [("t", p) for p in range(3)] and listener.state == STABLE, 30,
                   "c0 to take its half of the partitions added after a rebalance that used its cached topic")
    finally:
        listener.shutdown(commit=False)


def test_the_rebalance_uses_the_member_list_the_quiet_wait_ended_on(zk_layout: ZkLayout) -> None:
    """No second read of the member list right after the coalescing wait read it (its watch still armed);
    a list that changed meanwhile is read again."""
    listener, _ = _first_member(zk_layout, 2, backoff_ms=2000, coalesce_ms=50)
    reads: list[list[str]] = []
    consumer_ids = zk_layout.consumer_ids

    def counted(group: str, watch: Any = None) -> list[str]:
        reads.append(ids := consumer_ids(group, watch=watch))
        return ids

    zk_layout.consumer_ids = counted  # type: ignore[method-assign]
    try:
        listener.wait_for_quiet_group()
        listener.synced_rebalance()
        assert reads == [["c0"]]  # one read in all
        assert zk_layout.owners("g") == {("t", 0): "c0-0", ("t", 1): "c0-0"}
        listener.wait_for_quiet_group()
        zk_layout.register_consumer("g", "c1", TopicCount(subscription={"t": 1}))
        wait_until(lambda: listener._watch_events > 0, 10, "the members watch to fire")
        listener.synced_rebalance()
        assert reads[-1] == ["c0", "c1"]  # read again: it changed after the wait
        assert zk_layout.owners("g") == {("t", 0): "c0-0"}
    finally:
        listener.shutdown(commit=False)


def test_a_join_the_rebalance_under_way_read_costs_no_second_rebalance(
        zk_layout: ZkLayout, caplog: pytest.LogCaptureFixture) -> None:
    """A member joining while another one rebalances fires the latter's members watch, often before that
    rebalance reads the member list: it then took the joiner into account already, and a second rebalance
    would only release and claim every partition again (three members started together left one doing so
    seconds after the group looked stable)."""
    listener, fetcher = _first_member(zk_layout, 2, backoff_ms=2000, coalesce_ms=50)
    listener.synced_rebalance()  # alone: both partitions, and the members watch armed
    zk_layout.register_consumer("g", "c1", TopicCount(subscription={"t": 1}))
    wait_until(lambda: listener._watch_events > 0, 10, "the members watch to fire")
    listener.synced_rebalance()  # the rebalance under way: it reads the member list after the join
    assert fetcher.started == [("t", 0)]
    generation = listener.generation
    with caplog.at_level(logging.DEBUG, logger="metaq.consumer.rebalance"):
        listener.start()  # the executor finds the watch event pending
        try:
            wait_until(lambda: listener.generation != generation or "read by the last rebalance" in caplog.text, 30,
                       "the executor to handle the watch event")
            assert listener.generation == generation, "a second rebalance for a join the first one had read"
            assert zk_layout.owners("g") == {("t", 0): "c0-0"}
        finally:
            listener.shutdown(commit=False)
