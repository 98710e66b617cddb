"""The broker's metadata watcher against nodes it cannot serve, on a real ZooKeeper: they are left out (and
logged once), and the rest of the view stays current."""

from __future__ import annotations

import json
import logging

import pytest
from kazoo.client import KazooClient

from metaq.broker.metadata import ClusterSnapshot, MetadataWatcher
from zk_layout import BrokerInfo, PartitionState, ZkLayout

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)
BROKER_JSON = json.dumps({"version": 5, "host": "127.0.0.1", "port": 9092,
                          "endpoints": ["PLAINTEXT://127.0.0.1:9092"]}).encode()


def _bad_nodes(zk: KazooClient) -> list[str]:
    zk.create("/brokers/ids/4294967296", BROKER_JSON, makepath=True)
    zk.create("/brokers/ids/7", b"\xff\xfe", makepath=True)
    zk.create("/brokers/topics/garbage", b"{", makepath=True)
    zk.create("/brokers/topics/huge", b'{"version":1,"partitions":{"4294967296":[0]}}', makepath=True)
    zk.create("/brokers/topics/bad name!", b'{"version":1,"partitions":{"0":[0]}}', makepath=True)
    return ["/brokers/ids/4294967296", "/brokers/ids/7", "/brokers/topics/garbage", "/brokers/topics/huge",
            "/brokers/topics/bad name!"]


def test_bad_nodes_are_left_out_and_new_topics_still_appear(
        zk_layout: ZkLayout, zk: KazooClient, caplog: pytest.LogCaptureFixture) -> None:
    zk_layout.ensure_persistent_paths()
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    zk_layout.create_topic("before", {0: [0]}, {0: STATE})
    bad = _bad_nodes(zk)
    watcher = MetadataWatcher(zk_layout)
    caplog.set_level(logging.WARNING, logger="metaq.broker.metadata")
    watcher.start()
    try:
        assert set(watcher.snapshot.brokers) == {0}
        assert set(watcher.snapshot.topics) == {"before"}
        assert sorted(watcher.skipped) == sorted(zk_layout.full_path(p) for p in bad)
        zk_layout.create_topic("after", {0: [0], 1: [0]}, {0: STATE, 1: STATE})  # must not stay invisible
        assert watcher.wait_for(lambda s: "after" in s.topics, timeout=20)
        assert watcher.snapshot.partition("after", 1) is not None
        for _ in range(3):
            watcher.reload()  # the periodic safety reload: nothing new to say
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        for path in bad:
            assert sum(zk_layout.full_path(path) in w for w in warnings) == 1, (path, warnings)
        zk.set("/brokers/topics/garbage", b'{"version":1,"partitions":{"0":[0]}}')  # repaired
        assert watcher.wait_for(lambda s: "garbage" in s.topics, timeout=20)
        assert zk_layout.full_path("/brokers/topics/garbage") not in watcher.skipped
    finally:
        watcher.stop()


def test_malformed_partition_state_costs_only_that_partition_its_leader(
        zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    zk_layout.create_topic("t", {0: [0], 1: [0]}, {0: STATE, 1: STATE})
    zk.set("/brokers/topics/t/partitions/1/state", b'{"leader":1099511627776}')
    watcher = MetadataWatcher(zk_layout)
    watcher.start()
    try:
        assert watcher.snapshot.partition("t", 0).leader == 0  # type: ignore[union-attr]
        assert watcher.snapshot.partition("t", 1).leader == -1  # type: ignore[union-attr]
        assert list(watcher.skipped) == [zk_layout.full_path("/brokers/topics/t/partitions/1/state")]
    finally:
        watcher.stop()


def test_before_publish_runs_before_requests_can_see_a_new_topic(zk_layout: ZkLayout) -> None:
    """The broker loads a new topic's config in ``before_publish``: when it runs, the published snapshot must
    not have the topic yet (a produce to a just-created compacted topic was taken with the default policy)."""
    zk_layout.ensure_persistent_paths()
    zk_layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    seen_published: dict[str, bool] = {}
    watcher: MetadataWatcher

    def before_publish(snapshot: ClusterSnapshot) -> None:
        for topic in snapshot.topics:
            seen_published.setdefault(topic, topic in watcher.snapshot.topics)

    watcher = MetadataWatcher(zk_layout, before_publish=before_publish)
    watcher.start()
    try:
        zk_layout.create_topic("fresh", {0: [0]}, {0: STATE})
        assert watcher.wait_for(lambda s: "fresh" in s.topics, timeout=20)
        assert seen_published == {"fresh": False}
    finally:
        watcher.stop()
