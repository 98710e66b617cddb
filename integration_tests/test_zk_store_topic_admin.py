"""ZkLayout's topic admin writes, in Kafka's formats, against a real ZooKeeper: partitions added in one
conditional transaction, topic configs announced under /config/changes, the /admin/delete_topics flow."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from metaq.errors import StaleVersionError
from zk_layout import ConfigChange, PartitionState, ZkLayout, paths

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)


def test_add_partitions_keeps_the_old_ones(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.create_topic("grow", {0: [0]}, {0: STATE})
    created = zk_layout.topic_assignment("grow")
    zk_layout.add_partitions("grow", {0: [0], 1: [1], 2: [0]}, {1: STATE, 2: STATE})
    grown = zk_layout.topic_assignment("grow")
    assert created is not None and grown is not None
    assert grown.partitions == {0: (0,), 1: (1,), 2: (0,)}
    assert (grown.version, grown.topic_id) == (3, created.topic_id)  # the topic keeps its id
    assert zk_layout.partition_state("grow", 2) == STATE
    assert zk_layout.remaining_partition_nodes("grow") == [0, 1, 2]


def test_add_partitions_is_conditional(zk_layout: ZkLayout, zk: KazooClient, monkeypatch: pytest.MonkeyPatch) -> None:
    zk_layout.create_topic("race", {0: [0]}, {0: STATE})
    real_read = zk_layout._read

    def read_then_change(path: str, watch: object = None) -> object:
        node = real_read(path)
        if path == paths.topic_path("race"):
            zk.set(path, node[0])  # another writer bumps the version after our read
        return node

    monkeypatch.setattr(zk_layout, "_read", read_then_change)
    with pytest.raises(StaleVersionError):
        zk_layout.add_partitions("race", {0: [0], 1: [0]}, {1: STATE})
    monkeypatch.undo()
    assert zk_layout.remaining_partition_nodes("race") == [0]  # nothing of the failed transaction


def test_set_topic_config_announces_the_change(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.create_topic("conf", {0: [0]}, {0: STATE})
    zk_layout.set_topic_config("conf", {"retention.ms": "1000"})
    zk_layout.set_topic_config("conf", {"retention.ms": "2000", "segment.bytes": "4096"})
    assert zk.get(paths.topic_config_path("conf"))[0] == (
        b'{"version":1,"config":{"retention.ms":"2000","segment.bytes":"4096"}}')
    names = zk_layout.config_changes()
    assert names == ["config_change_0000000000", "config_change_0000000001"]
    assert zk.get(f"{paths.CONFIG_CHANGES}/{names[1]}")[0] == b'{"version":2,"entity_path":"topics/conf"}'
    change = zk_layout.config_change(names[1])
    assert change is not None and change[0] == ConfigChange("topics/conf") and change[0].topic == "conf"
    assert ConfigChange("clients/x").topic is None
    assert zk_layout.delete_config_change(names[0])
    assert zk_layout.config_change(names[0]) is None


def test_deletion_marker_and_cleanup(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.create_topic("gone", {0: [0], 1: [1]}, {0: STATE, 1: STATE})
    zk_layout.mark_topic_for_deletion("gone")
    zk_layout.mark_topic_for_deletion("gone")  # idempotent
    assert zk_layout.topics_marked_for_deletion() == ["gone"]
    zk_layout.delete_partition_nodes("gone", [0])
    assert zk_layout.remaining_partition_nodes("gone") == [1]
    zk_layout.delete_partition_nodes("gone", [1])
    zk_layout.finish_topic_deletion("gone")
    for path in (paths.topic_path("gone"), paths.topic_config_path("gone"), paths.delete_topic_marker_path("gone")):
        assert zk.exists(path) is None
    zk_layout.finish_topic_deletion("gone")  # idempotent
