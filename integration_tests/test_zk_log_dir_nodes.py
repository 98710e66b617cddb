"""Failed log directories' nodes against a real ZooKeeper (docs/log-dirs.md): Kafka's log dir event
notification, byte for byte, and the broker's offline partitions."""

from __future__ import annotations

from kazoo.client import KazooClient

from zk_layout import ZkLayout


def test_log_dir_event_is_kafkas_node_and_offline_replicas_are_replaced(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.announce_log_dir_failure(3, [("t", 1), ("t", 0)])
    [name] = zk.get_children("/log_dir_event_notification")
    assert name.startswith("log_dir_event_") and len(name) == len("log_dir_event_") + 10
    assert zk.get(f"/log_dir_event_notification/{name}")[0] == b'{"version":1,"broker":3,"event":1}'
    assert zk_layout.log_dir_events() == {name: 3}
    assert zk_layout.offline_replicas([3, 4]) == {3: {("t", 0), ("t", 1)}}

    zk.create("/log_dir_event_notification/log_dir_event_9999999999", b"not json")
    assert zk_layout.log_dir_events()["log_dir_event_9999999999"] == -1  # malformed: consumed all the same
    assert zk_layout.delete_log_dir_event(name) and not zk_layout.delete_log_dir_event(name)

    zk_layout.set_offline_replicas(3, [("u", 2)])
    assert zk_layout.offline_replicas([3]) == {3: {("u", 2)}}
    zk_layout.set_offline_replicas(3, [])  # a restart with every directory online
    assert zk_layout.offline_replicas([3]) == {}
    assert zk.exists("/metaq/offline_replicas/3") is None
