"""A rebalance among members whose nodes were written by hand or by a hostile client, on a real ZooKeeper:
a persistent fake member, a whitelist regex RE2 rejects, an offset node that is no offset. (The catastrophic
regex is tested in a child process, tests/zk_layout/test_formats_hostile.py: a regression holds the GIL for
hours, which no in-process timeout can interrupt.)"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from integration_tests.rebalance_fakes import FakeFetcher, FakeSubscription
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.zk_member_state import STABLE
from zk_layout import WHITE_LIST, BrokerInfo, PartitionState, TopicCount, ZkLayout, paths

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)


def _group(layout: ZkLayout, partitions: int = 3) -> tuple[ZKRebalancerListener, FakeFetcher]:
    layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    layout.create_topic("t", {p: [0] for p in range(partitions)}, {p: STATE for p in range(partitions)})
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "unused:2181",
                                             "rebalance.backoff.ms": 200, "auto.commit.enable": False,
                                             "auto.offset.reset": "smallest"})
    layout.register_consumer("g", "c1", TopicCount(subscription={"t": 1}))
    fetcher = FakeFetcher()
    store = ZooKeeperOffsetStore(layout, "g", auto_offset_reset=config.auto_offset_reset)
    return ZKRebalancerListener(config, layout, "c1", FakeSubscription(), fetcher, store), fetcher


def test_persistent_fake_member_is_ignored_with_a_warning(
        zk_layout: ZkLayout, zk: KazooClient, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka 0.8 would give the fake member (it sorts first and asks for 100,000 streams) every partition;
    nothing would read them. metaq members assign among ephemeral members only."""
    listener, fetcher = _group(zk_layout)
    fake = paths.consumer_id_path("g", "a-fake")
    zk.create(fake, TopicCount({"t": 100000}).encode(), makepath=True)
    caplog.set_level(logging.WARNING, logger="metaq.consumer.zk_group_view")
    listener.synced_rebalance()
    listener.synced_rebalance()  # warned once per node, not at every rebalance
    assert listener.state == STABLE
    assert fetcher.started == [("t", 0), ("t", 1), ("t", 2)]
    assert zk_layout.owners("g") == {("t", p): "c1-0" for p in range(3)}
    warnings = [r.getMessage() for r in caplog.records if "persistent" in r.getMessage()]
    assert len(warnings) == 1 and zk_layout.full_path(fake) in warnings[0], warnings


def test_peer_filter_rejected_by_re2_is_ignored_naming_the_node(
        zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient], caplog: pytest.LogCaptureFixture) -> None:
    listener, fetcher = _group(zk_layout, partitions=2)
    ZkLayout(make_zk_client()).register_consumer("g", "c2", TopicCount({"(t)\\1": 1}, WHITE_LIST))
    caplog.set_level(logging.WARNING, logger="metaq.consumer.zk_group_view")
    listener.synced_rebalance()
    assert fetcher.started == [("t", 0), ("t", 1)]
    node = zk_layout.full_path(paths.consumer_id_path("g", "c2"))
    assert any(node in r.getMessage() and "not a valid regex" in r.getMessage() for r in caplog.records)


def test_offset_node_that_is_no_offset_warns_and_resets(
        zk_layout: ZkLayout, zk: KazooClient, caplog: pytest.LogCaptureFixture) -> None:
    listener, _ = _group(zk_layout, partitions=2)
    zk.create(paths.offset_path("g", "t", 0), b"-5", makepath=True)
    zk_layout.write_offset("g", "t", 1, 9)
    caplog.set_level(logging.WARNING, logger="metaq.consumer.offset_store")
    listener.synced_rebalance()
    assert listener.state == STABLE
    assert listener.registry[("t", 0)].fetched_offset == -1  # resolved by auto.offset.reset
    assert listener.registry[("t", 1)].fetched_offset == 9
    node = zk_layout.full_path(paths.offset_path("g", "t", 0))
    messages = [r.getMessage() for r in caplog.records]
    assert any(node in m and "negative offset -5" in m and "auto.offset.reset=smallest" in m for m in messages), \
        messages
