"""The controller's nodes against a real ZooKeeper: election through the ephemeral /controller, the epoch
in /controller_epoch, state writes fenced by that epoch (a zombie controller's write is refused whole), and
ISR change notifications in Kafka's format."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from metaq.errors import ControllerMovedError, StaleVersionError
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import expire_session
from zk_layout import PartitionState, ZkLayout

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0, 1), controller_epoch=1)


def test_one_controller_at_a_time_and_a_new_epoch_per_win(make_zk_client: Callable[..., KazooClient]) -> None:
    a, b = ZkLayout(make_zk_client()), ZkLayout(make_zk_client())
    won = a.try_become_controller(0)
    assert won is not None and won.epoch == 1
    assert b.try_become_controller(1) is None
    again = a.try_become_controller(0)  # our own session's node (a retried create): still ours, a new epoch
    assert again is not None and again.epoch == 2
    holder = b.controller()
    assert holder is not None and holder.broker_id == 0
    assert a.client.get("/controller")[0].startswith(b'{"version":1,"brokerid":0,"timestamp":"')
    a.resign_controller()
    second = b.try_become_controller(1)
    assert second is not None and second.epoch == 3 == a.controller_epoch()


def test_a_zombie_controllers_state_write_is_refused(make_zk_client: Callable[..., KazooClient]) -> None:
    zombie_client = make_zk_client()
    zombie, fresh = ZkLayout(zombie_client), ZkLayout(make_zk_client())
    fresh.create_topic("fenced", {0: [0, 1]}, {0: STATE})
    old = zombie.try_become_controller(0)
    assert old is not None
    expire_session(zombie_client)  # a long GC pause: /controller goes with the session
    wait_until(lambda: fresh.controller() is None, 10, "the zombie's /controller to go")
    new = fresh.try_become_controller(1)
    assert new is not None and new.epoch == old.epoch + 1
    wait_until(lambda: zombie_client.connected, 10, "the zombie to reconnect")
    versioned = zombie.partition_state_versioned("fenced", 0)
    assert versioned is not None
    moved = PartitionState(leader=1, leader_epoch=1, isr=(1,), controller_epoch=old.epoch)
    with pytest.raises(ControllerMovedError):
        zombie.set_partition_state_fenced(old, "fenced", 0, moved, versioned[1])
    assert fresh.partition_state("fenced", 0) == STATE  # nothing written
    written = PartitionState(leader=1, leader_epoch=1, isr=(1,), controller_epoch=new.epoch)
    fresh.set_partition_state_fenced(new, "fenced", 0, written, versioned[1])
    assert fresh.partition_state("fenced", 0) == written
    with pytest.raises(StaleVersionError):  # a state read before another writer's change
        fresh.set_partition_state_fenced(new, "fenced", 0, STATE, versioned[1])


def test_isr_change_notifications_in_kafkas_format(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.announce_isr_change([("t", 1), ("a", 0)])
    zk_layout.announce_isr_change([("t", 2)])
    changes = zk_layout.isr_changes()
    assert list(changes.values()) == [[("a", 0), ("t", 1)], [("t", 2)]]
    first = sorted(changes)[0]
    assert first.startswith("isr_change_") and first[len("isr_change_"):].isdigit()
    assert zk.get(f"/isr_change_notification/{first}")[0] == (
        b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"t","partition":1}]}')
    assert all(zk_layout.delete_isr_change(name) for name in changes)
    assert zk_layout.isr_changes() == {}


def test_a_new_partitions_state_is_created_by_the_controller_fenced(make_zk_client: Callable[..., KazooClient]
                                                                   ) -> None:
    """Topic creation writes no state (as Kafka's AdminZkClient); the controller creates it, its parents whether
    or not the creator made them, and a zombie controller's create is refused."""
    zombie_client = make_zk_client()
    zombie, fresh = ZkLayout(zombie_client), ZkLayout(make_zk_client())
    fresh.create_topic("new", {0: [0, 1], 1: [1, 0]}, {})
    assert fresh.partition_states([("new", 0), ("new", 1)]) == {("new", 0): None, ("new", 1): None}
    fresh.client.delete("/brokers/topics/new/partitions", recursive=True)  # as Kafka's TopicCommand leaves it
    old = zombie.try_become_controller(0)
    assert old is not None
    expire_session(zombie_client)
    wait_until(lambda: fresh.controller() is None, 10, "the zombie's /controller to go")
    new = fresh.try_become_controller(1)
    assert new is not None
    wait_until(lambda: zombie_client.connected, 10, "the zombie to reconnect")
    with pytest.raises(ControllerMovedError):
        zombie.create_partition_state_fenced(old, "new", 0, STATE)
    assert fresh.partition_state("new", 0) is None
    fresh.create_partition_state_fenced(new, "new", 0, STATE)
    assert fresh.partition_state("new", 0) == STATE
    with pytest.raises(StaleVersionError):  # created meanwhile (by another pass): decide again
        fresh.create_partition_state_fenced(new, "new", 0, STATE)
