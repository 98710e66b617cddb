"""A claim conflict waits for the owner node's release (a watch), not the whole rebalance.backoff.ms."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient

from integration_tests.rebalance_fakes import STATE, FakeFetcher, FakeSubscription
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_member_state import STABLE
from zk_layout import BrokerInfo, TopicCount, ZkLayout

BACKOFF_MS = 8000


def _member(layout: ZkLayout, consumer_id: str) -> tuple[ZKRebalancerListener, FakeFetcher]:
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "unused:2181",
                                             "rebalance.backoff.ms": BACKOFF_MS, "auto.commit.enable": False})
    layout.register_consumer("g", consumer_id, TopicCount(subscription={"t": 1}))
    fetcher = FakeFetcher()
    listener = ZKRebalancerListener(config, layout, consumer_id, FakeSubscription(), fetcher,
                                    ZooKeeperOffsetStore(layout, "g"))
    return listener, fetcher


def test_conflict_ends_when_the_owner_releases(zk_layout: ZkLayout, make_zk_client: Callable[..., Any]) -> None:
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    zk_layout.create_topic("t", {0: [0], 1: [0], 2: [0]}, {p: STATE for p in range(3)})
    previous = ZkLayout(make_zk_client())  # a member that has not released its partitions yet
    assert previous.claim_partition("g", "t", 1, "previous-0")
    assert previous.claim_partition("g", "t", 2, "previous-0")
    listener, fetcher = _member(zk_layout, "c1")
    releaser = threading.Timer(0.5, lambda: previous.release_partitions(
        "g", {("t", 1): "previous-0", ("t", 2): "previous-0"}))
    releaser.start()
    started = time.monotonic()
    listener.synced_rebalance()
    elapsed = time.monotonic() - started
    releaser.join()
    assert listener.state == STABLE
    assert fetcher.started == [("t", 0), ("t", 1), ("t", 2)]
    assert zk_layout.owners("g") == {("t", p): "c1-0" for p in range(3)}
    assert 0.4 < elapsed < BACKOFF_MS / 1000.0 / 2, elapsed  # woken by the release, long before the backoff


def test_conflict_with_a_member_that_keeps_the_partition_waits_the_backoff(
        zk_layout: ZkLayout, make_zk_client: Callable[[], KazooClient]) -> None:
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    zk_layout.create_topic("t", {0: [0]}, {0: STATE})
    other = ZkLayout(make_zk_client())
    assert other.claim_partition("g", "t", 0, "other-0")  # never released
    listener, _ = _member(zk_layout, "c1")
    waited = threading.Event()

    def stop_after_the_first_wait() -> None:
        time.sleep(1.0)
        waited.set()
        listener.stop(timeout=0)  # shutdown ends the backoff early; the rebalance gives up

    threading.Thread(target=stop_after_the_first_wait, daemon=True).start()
    started = time.monotonic()
    listener.synced_rebalance()
    assert waited.is_set() and time.monotonic() - started >= 0.9  # not a busy loop of attempts
    assert zk_layout.owners("g") == {("t", 0): "other-0"}
