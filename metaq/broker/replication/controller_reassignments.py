"""Partition reassignments as the controller drives them (docs/reassignment.md, the states in :mod:`.reassignment`): a
request in ``/admin/reassign_partitions`` or from AlterPartitionReassignments is written to the topic node as
RS = TRS + ORS with its adding/removing replicas; once every target replica is in the ISR, leadership moves into the
target if it must, the ISR is cut to it, the topic node is written with RS = TRS and the request entry removed.
Part of :class:`~metaq.broker.replication.controller.Controller`.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections.abc import Collection, Mapping, Sequence

from metaq.broker.replication.controller_results import NO_PARTITION, PartitionResult, TopicPartition
from metaq.broker.replication.reassignment import (
    CATCHING_UP,
    COMPLETED,
    COMPLETING,
    Reassignment,
    ReplicaAssignment,
    completion_state,
    replica_assignments,
    target_in_sync,
    with_assignments,
)
from metaq.errors import ErrorCode, MalformedNodeError, StaleVersionError
from zk_layout import PartitionState, ZkLayout
from zk_layout.controller import ControllerEpoch
from zk_layout.topic_formats import TopicAssignment

log = logging.getLogger(__name__)


def _valid_replicas(replicas: Sequence[int]) -> bool:
    return bool(replicas) and len(set(replicas)) == len(replicas) and all(b >= 0 for b in replicas)


def _alter_one(current: ReplicaAssignment | None, target: tuple[int, ...] | None, live: set[int]
               ) -> tuple[PartitionResult, ReplicaAssignment | None]:
    """One partition of AlterPartitionReassignments: its result and the assignment to write (Kafka's
    ``validateReplicas`` and ``maybeBuildReassignment``)."""
    if current is None:
        return NO_PARTITION, None
    if target is None:
        if not current.reassigning:
            return PartitionResult(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None), None
        return PartitionResult(ErrorCode.NONE), current.cancelled()
    if not _valid_replicas(target):
        return PartitionResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Replica list must hold distinct, non-negative broker ids: {list(target)}"), None
    new = current.reassign_to(target)
    if not set(new.adding) <= live:
        return PartitionResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Replica assignment has brokers that are not alive. Replica list: {list(new.adding)}, "
                               f"live broker list: {sorted(live)}"), None
    return PartitionResult(ErrorCode.NONE), new


class ReassignmentDriver:
    """Starts, completes, alters and lists partition reassignments, for :class:`Controller`."""

    _wake: threading.Event
    _layout: ZkLayout
    _reassignments: dict[TopicPartition, Reassignment]

    @abstractmethod
    def _require_fence(self) -> ControllerEpoch: ...

    def _reassign(self, fence: ControllerEpoch, topic: str, assignment: TopicAssignment, version: int,
                  request: tuple[Mapping[TopicPartition, tuple[int, ...]], int | None], live: set[int]
                  ) -> tuple[set[TopicPartition], bool]:
        """One pass over ``topic``'s reassignments: start those requested in ``/admin/reassign_partitions``
        (Kafka's phase U), complete those whose target replicas are all in the ISR (phase B). Returns the
        request entries done with (completed, or naming no partition, or no valid replica list) and whether
        the topic node was written."""
        targets, request_version = request
        finished: set[TopicPartition] = set()
        current = replica_assignments(assignment)
        updated: dict[int, ReplicaAssignment] = {}
        for (name, partition), target in targets.items():
            if name != topic:
                continue
            existing = current.get(partition)
            if existing is None or not _valid_replicas(target):
                log.error("%s-%d: reassignment to %s refused (%s)", topic, partition, list(target),
                          "no such partition" if existing is None else "not a list of distinct broker ids")
                finished.add((topic, partition))
            elif target != existing.target:
                updated[partition] = existing.reassign_to(target)
            elif not existing.reassigning:
                finished.add((topic, partition))  # nothing to move (or done before this pass)
        completing: set[int] = set()
        moving = [p for p, a in current.items() if a.reassigning and p not in updated]
        states = self._layout.partition_states_versioned((topic, p) for p in moving) if moving else {}
        for partition in moving:
            if self._complete_if_in_sync(fence, topic, partition, current[partition], states.get((topic, partition)),
                                         live):
                completing.add(partition)
                updated[partition] = ReplicaAssignment(current[partition].target)
        if not updated:
            return finished, False
        started = set(updated) - completing  # acted on the request: written only while it still stands
        try:
            self._layout.set_topic_assignment(topic, with_assignments(assignment, current | updated), version, fence,
                                              request_version if started else None)
        except StaleVersionError:
            for partition in completing:  # resumed from the node on the next pass
                self._reassignments.pop((topic, partition), None)
            self._wake.set()
            return finished, False
        for partition, new in updated.items():
            key = (topic, partition)
            reassignment = self._reassignments.pop(key, None) or Reassignment(topic, partition, current[partition])
            if new.reassigning:
                reassignment.transition(CATCHING_UP, new)
                self._reassignments[key] = reassignment
                continue
            if reassignment.state != COMPLETING:
                reassignment.transition(COMPLETING, new)
            reassignment.transition(COMPLETED, new)
            if targets.get(key) == new.replicas:
                finished.add(key)
        self._wake.set()
        return finished, True

    def _complete_if_in_sync(self, fence: ControllerEpoch, topic: str, partition: int, moving: ReplicaAssignment,
                             versioned: tuple[PartitionState, int] | None, live: set[int]) -> bool:
        """Phase B3/B4 of a reassignment in progress: once every target replica is in the ISR, the leader moved
        into the target if it must and the ISR cut to it (a fenced write). True when the topic node may now
        say RS = TRS."""
        key = (topic, partition)
        reassignment = self._reassignments.get(key)
        if reassignment is None or reassignment.assignment != moving:
            # resumed from the topic node (a new controller, or a change by AlterPartitionReassignments)
            reassignment = self._reassignments[key] = Reassignment(topic, partition, moving, state=CATCHING_UP)
        if versioned is None or not target_in_sync(moving, versioned[0]):
            return False
        state, state_version = versioned
        new = completion_state(moving, state, live, controller_epoch=fence.epoch)
        if new is not None:
            try:
                self._layout.set_partition_state_fenced(fence, topic, partition, new, state_version)
            except StaleVersionError:
                self._wake.set()
                return False
            log.info("%s-%d: reassignment to %s: leader %d -> %d, leader epoch %d, ISR %s (controller epoch %d)",
                     topic, partition, list(moving.target), state.leader, new.leader, new.leader_epoch,
                     list(new.isr), fence.epoch)
            state = new
        if state.leader not in moving.target or state.leader not in live or not set(state.isr) <= set(moving.target):
            return False  # no target replica can lead yet
        if reassignment.state != COMPLETING:
            reassignment.transition(COMPLETING)
        return True

    def alter_reassignments(self, requests: Mapping[TopicPartition, tuple[int, ...] | None]
                            ) -> dict[TopicPartition, PartitionResult]:
        """AlterPartitionReassignments (any thread): each partition's new target written to its topic node as
        Kafka's phase U (None: cancel, back to the original replicas), to be completed by the controller's
        passes; a pending ``/admin/reassign_partitions`` entry for it is dropped (the latest request wins, as
        in Kafka's ``processApiPartitionReassignment``). NotControllerError unless this broker is the controller."""
        fence = self._require_fence()
        live = set(self._layout.broker_ids())
        results: dict[TopicPartition, PartitionResult] = {}
        by_topic: dict[str, dict[int, tuple[int, ...] | None]] = {}
        for (topic, partition), target in requests.items():
            by_topic.setdefault(topic, {})[partition] = target
        # the latest request wins: a pending /admin/reassign_partitions entry is dropped before the topic node is
        # written (the controller acts on an entry only while the node is unchanged, so it cannot undo this)
        self._layout.remove_from_reassignment_request(set(requests))
        for topic, wanted in by_topic.items():
            results.update(self._alter_topic(fence, topic, wanted, live))
        self._wake.set()
        return results

    def _alter_topic(self, fence: ControllerEpoch, topic: str, wanted: Mapping[int, tuple[int, ...] | None],
                     live: set[int]) -> dict[TopicPartition, PartitionResult]:
        for _ in range(5):  # a conditional write: the controller's own pass may change the node meanwhile
            try:
                versioned = self._layout.topic_assignment_versioned(topic)
            except MalformedNodeError as e:
                return {(topic, p): PartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(e)) for p in wanted}
            if versioned is None or topic in self._layout.topics_marked_for_deletion():
                return {(topic, p): NO_PARTITION for p in wanted}
            assignment, version = versioned
            current = replica_assignments(assignment)
            results: dict[TopicPartition, PartitionResult] = {}
            updated: dict[int, ReplicaAssignment] = {}
            for partition, target in wanted.items():
                result, new = _alter_one(current.get(partition), target, live)
                results[(topic, partition)] = result
                if new is not None and new != current.get(partition):
                    updated[partition] = new
            if not updated:
                return results
            try:
                self._layout.set_topic_assignment(topic, with_assignments(assignment, current | updated), version,
                                                  fence)
            except StaleVersionError:
                continue
            for partition, new in updated.items():
                log.info("%s-%d: AlterPartitionReassignments: replicas %s, adding %s, removing %s", topic, partition,
                         *new.as_lists())
            return results
        return {(topic, p): PartitionResult(ErrorCode.REQUEST_TIMED_OUT, "the topic node kept changing")
                for p in wanted}

    def list_reassignments(self, partitions: Collection[TopicPartition] | None
                           ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments (any thread): the partitions being reassigned, among ``partitions``
        (None: all). NotControllerError unless this broker is the controller."""
        self._require_fence()
        topics = sorted({t for t, _ in partitions}) if partitions is not None else self._layout.topics()
        result: dict[TopicPartition, ReplicaAssignment] = {}
        for topic in topics:
            try:
                assignment = self._layout.topic_assignment(topic)
            except MalformedNodeError:
                continue
            if assignment is None:
                continue
            for partition, entry in replica_assignments(assignment).items():
                if entry.reassigning and (partitions is None or (topic, partition) in partitions):
                    result[(topic, partition)] = entry
        return result
