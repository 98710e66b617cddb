"""Partition reassignment: the controller's pure decisions, as an explicit state machine (docs/reassignment.md).

Kafka's names (``KafkaController.onPartitionReassignment``): RS the replicas in ``/brokers/topics/<t>``, ORS
the original replicas, TRS the target replicas, AR = TRS - ORS the replicas being added, RR = ORS - TRS
those being removed. While a partition moves, the topic node holds RS = TRS + ORS (target first, no
duplicates) with AR and RR in its ``adding_replicas``/``removing_replicas`` fields: that node alone is the
reassignment's durable state, so a new controller resumes from it.

States of one partition's reassignment (only :meth:`Reassignment.transition` changes them)::

    REQUESTED   --RS = TRS + ORS, AR, RR written to the topic node (Kafka's phase U)--> CATCHING_UP
    REQUESTED   --TRS is the current assignment already--> COMPLETING
    CATCHING_UP --a new target (another request, or a cancellation: TRS = ORS)--> CATCHING_UP
    CATCHING_UP --every TRS replica in the ISR, leader moved into TRS and ISR cut to TRS (phase B3/B4)--> COMPLETING
    COMPLETING  --RS = TRS written, AR = RR = [], request entry removed (B6/B7)--> COMPLETED

Phase A (the new replicas catch up) needs no controller action here: brokers watch the topic node, a broker
newly in RS starts a follower and the leader adds it to the ISR once caught up (:mod:`.manager`). A broker
no longer in RS stops its replica and deletes its log. Replication throttles are not applied to the move.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from zk_layout import PartitionState
from zk_layout.topic_formats import TopicAssignment

log = logging.getLogger(__name__)

REQUESTED = "Requested"
CATCHING_UP = "CatchingUp"
COMPLETING = "Completing"
COMPLETED = "Completed"

_ALLOWED = {
    REQUESTED: {CATCHING_UP, COMPLETING},
    CATCHING_UP: {CATCHING_UP, COMPLETING},
    COMPLETING: {COMPLETED},
    COMPLETED: set[str](),
}


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's entry of the topic node: RS with AR and RR (Kafka's ``ReplicaAssignment``)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        """ORS: RS without the replicas being added."""
        return tuple(b for b in self.replicas if b not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: RS without the replicas being removed."""
        return tuple(b for b in self.replicas if b not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment that moves this partition to ``target`` (Kafka's ``reassignTo``): RS = TRS + ORS,
        where ORS is the origin of a reassignment in progress (a new target replaces it)."""
        full = tuple(dict.fromkeys([*target, *self.origin]))
        return ReplicaAssignment(full, tuple(b for b in full if b not in self.origin),
                                 tuple(b for b in full if b not in target))

    def as_lists(self) -> tuple[list[int], list[int], list[int]]:
        return list(self.replicas), list(self.adding), list(self.removing)

    def cancelled(self) -> ReplicaAssignment:
        """Back to the original replicas (AlterPartitionReassignments with null replicas)."""
        return ReplicaAssignment(self.origin)


def replica_assignments(assignment: TopicAssignment) -> dict[int, ReplicaAssignment]:
    """Each partition's entry of a topic node."""
    return {p: ReplicaAssignment(r, assignment.adding_replicas.get(p, ()), assignment.removing_replicas.get(p, ()))
            for p, r in assignment.partitions.items()}


def with_assignments(assignment: TopicAssignment, entries: Mapping[int, ReplicaAssignment]) -> TopicAssignment:
    """The topic node with ``entries``: adding/removing fields kept only for partitions being reassigned."""
    return TopicAssignment(
        {p: e.replicas for p, e in entries.items()}, version=max(assignment.version, 2), topic_id=assignment.topic_id,
        adding_replicas={p: e.adding for p, e in entries.items() if e.adding},
        removing_replicas={p: e.removing for p, e in entries.items() if e.removing})


def target_in_sync(assignment: ReplicaAssignment, state: PartitionState | None) -> bool:
    """Kafka's ``isReassignmentComplete``: every target replica is in the ISR (or nothing is moving)."""
    if not assignment.reassigning:
        return True
    return state is not None and set(assignment.target) <= set(state.isr)


def completion_state(assignment: ReplicaAssignment, state: PartitionState, live: Collection[int], *,
                     controller_epoch: int) -> PartitionState | None:
    """Phase B3/B4: the state that keeps only TRS in the ISR, with a leader in TRS. A leader leaving (or
    dead) is replaced by the first target replica alive and in the ISR, with a new leader epoch (Kafka's
    ``ReassignPartitionLeaderElectionStrategy``); a leader staying keeps its epoch (only the ISR shrinks).
    None if no target replica can lead yet (wait), or if the state is already right."""
    target = assignment.target
    isr = tuple(b for b in state.isr if b in target)
    if state.leader in target and state.leader in live:
        if isr == state.isr:
            return None
        return PartitionState(leader=state.leader, leader_epoch=state.leader_epoch, isr=isr,
                              controller_epoch=controller_epoch)
    leader = next((b for b in target if b in live and b in state.isr), None)
    if leader is None:
        return None
    return PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                          controller_epoch=controller_epoch)


@dataclass
class Reassignment:
    """One partition's reassignment as the controller drives it; ``assignment`` is what the topic node says."""

    topic: str
    partition: int
    assignment: ReplicaAssignment
    state: str = REQUESTED

    def transition(self, state: str, assignment: ReplicaAssignment | None = None) -> None:
        """The one place the state changes (RuntimeError on a transition the module docstring does not
        allow: a bug of the caller)."""
        if state not in _ALLOWED[self.state]:
            raise RuntimeError(f"{self.topic}-{self.partition}: illegal reassignment transition "
                               f"{self.state} -> {state}")
        log.info("%s-%d: reassignment %s -> %s (replicas %s, adding %s, removing %s)", self.topic, self.partition,
                 self.state, state, *(assignment or self.assignment).as_lists())
        self.state = state
        if assignment is not None:
            self.assignment = assignment

