"""The controller's pure reassignment decisions (metaq/broker/replication/reassignment.py) and the request
node codec (zk_layout/reassignment.py); the real sequence against brokers is in
integration_tests/test_partition_reassignment.py."""

from __future__ import annotations

import pytest

from metaq.broker.replication.election import elect
from metaq.broker.replication.reassignment import (
    CATCHING_UP,
    COMPLETED,
    COMPLETING,
    REQUESTED,
    Reassignment,
    ReplicaAssignment,
    completion_state,
    target_in_sync,
)
from metaq.errors import MalformedNodeError
from zk_layout import PartitionState
from zk_layout.reassignment import decode_reassignment_request, encode_reassignment_request


def state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


def test_reassign_to_lists_target_first_and_names_adding_and_removing() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to((2, 3))
    assert moving == ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    # the origin in RS order: as Kafka notes (updateCurrentReassignment), the original order is not kept
    assert moving.origin == (2, 1) and moving.target == (2, 3) and moving.reassigning


def test_a_new_target_replaces_the_one_in_progress_from_the_same_origin() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert moving.reassign_to((3, 4)) == ReplicaAssignment((3, 4, 2, 1), adding=(3, 4), removing=(2, 1))


def test_cancel_goes_back_to_the_original_replicas() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert moving.cancelled() == ReplicaAssignment((2, 1))
    assert not moving.cancelled().reassigning


def test_raising_the_replication_factor_only_adds() -> None:
    assert ReplicaAssignment((1,)).reassign_to((1, 2, 3)) == ReplicaAssignment((1, 2, 3), adding=(2, 3))


def test_reassigning_to_the_current_replicas_is_nothing_to_do() -> None:
    assert not ReplicaAssignment((1, 2)).reassign_to((1, 2)).reassigning


def test_complete_only_once_every_target_replica_is_in_the_isr() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert not target_in_sync(moving, state(1, (1, 2)))
    assert not target_in_sync(moving, None)
    assert target_in_sync(moving, state(1, (1, 2, 3)))


def test_a_leaving_leader_hands_over_to_the_first_live_target_replica_in_the_isr() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    new = completion_state(moving, state(1, (1, 2, 3)), {1, 2, 3}, controller_epoch=7)
    assert new == PartitionState(leader=2, leader_epoch=6, isr=(2, 3), controller_epoch=7)
    # target order decides: 2 is dead, 3 leads
    new = completion_state(moving, state(1, (1, 2, 3)), {1, 3}, controller_epoch=7)
    assert new is not None and new.leader == 3 and new.isr == (2, 3)


def test_a_staying_leader_keeps_its_epoch_and_the_isr_loses_the_removed_replicas() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    new = completion_state(moving, state(2, (1, 2, 3)), {1, 2, 3}, controller_epoch=7)
    assert new == PartitionState(leader=2, leader_epoch=5, isr=(2, 3), controller_epoch=7)
    assert completion_state(moving, state(2, (2, 3)), {1, 2, 3}, controller_epoch=7) is None  # already right


def test_no_target_replica_can_lead_waits() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert completion_state(moving, state(1, (1, 2, 3)), {1}, controller_epoch=7) is None


def test_the_state_machine_refuses_skipping_a_phase() -> None:
    reassignment = Reassignment("t", 0, ReplicaAssignment((1, 2)))
    assert reassignment.state == REQUESTED
    with pytest.raises(RuntimeError, match="illegal"):
        reassignment.transition(COMPLETED)
    moving = ReplicaAssignment((1, 2)).reassign_to((2, 3))
    reassignment.transition(CATCHING_UP, moving)
    reassignment.transition(CATCHING_UP, moving.reassign_to((3, 4)))  # replaced by a new request
    reassignment.transition(COMPLETING)
    reassignment.transition(COMPLETED, ReplicaAssignment((3, 4)))
    assert reassignment.assignment == ReplicaAssignment((3, 4))
    with pytest.raises(RuntimeError):
        reassignment.transition(CATCHING_UP)


def test_election_treats_a_broker_removed_from_the_replicas_as_gone() -> None:
    # cancelled while the leader was one of the added replicas: it no longer leads, nor stays in the ISR
    new = elect(state(3, (1, 2, 3)), (1, 2), {1, 2, 3}, controller_epoch=7)
    assert new is not None and new.leader == 1 and new.isr == (1, 2) and new.leader_epoch == 6
    # a removed follower left in the ISR (it rejoined just before the assignment shrank) is dropped
    new = elect(state(2, (2, 3, 1)), (2, 3), {1, 2, 3}, controller_epoch=7)
    assert new is not None and new.leader == 2 and new.isr == (2, 3) and new.leader_epoch == 5


def test_request_node_round_trips_in_kafka_format() -> None:
    raw = encode_reassignment_request({("t", 1): (2, 3), ("t", 0): (3, 2)})
    assert raw == (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,2]},'
                   b'{"topic":"t","partition":1,"replicas":[2,3]}]}')
    # what kafka-reassign-partitions --zookeeper writes (log_dirs included)
    kafka = (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],'
             b'"log_dirs":["any","any"]}]}')
    assert decode_reassignment_request("/admin/reassign_partitions", kafka) == {("t", 0): (2, 3)}
    with pytest.raises(MalformedNodeError):
        decode_reassignment_request("/admin/reassign_partitions", b'{"partitions":[{"topic":"t"}]}')
