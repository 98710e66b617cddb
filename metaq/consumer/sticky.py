"""Kafka's ``cooperative-sticky`` assignor (``CooperativeStickyAssignor`` over ``AbstractStickyAssignor``).

The leader gets, from every member's subscription, the partitions it owns now and the generation it owned them
in (metaq.consumer.cooperative decodes them); the sticky assignment keeps every member's owned partitions up to
its quota and deals out the rest, so that a rebalance moves as few partitions as possible. Then, as KIP-429's
incremental protocol requires, a partition that changes owner is left out of the new owner's assignment for this
round: its old owner revokes it and rejoins, and the second round gives it to the new one
(``CooperativeStickyAssignor.adjustAssignment``)::

    subs = {"a": StickyMember(("t",), (("t", 0), ("t", 1)), 3), "b": StickyMember(("t",), (), -1)}
    cooperative_sticky_assign(subs, {"t": 2})    # {"a": [("t", 0)], "b": []}: t-1 moves, in the next round

When every member subscribes to the same topics, this is a port of Kafka 3.9's ``ConstrainedAssignmentBuilder``
(docs/broker-coordinated-consumer.md cites the source), including where Java's ``HashMap`` iteration order
decides (which over-quota members keep their extra partition): :func:`java_hashmap_order` reproduces it, and
``integration_tests/test_assignors_vs_java.py`` checks the results against kafka-clients' own class. Members
with different subscriptions get :func:`_general_assign`, a simpler sticky algorithm (keep what is owned and still
subscribed, give each unowned partition to the least loaded subscriber, then even out): valid and sticky, not
necessarily Java's ``GeneralAssignmentBuilder`` result. Rack awareness is not implemented.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from metaq.hashing import java_string_hash

TopicPartition = tuple[str, int]
NO_GENERATION = -1  # AbstractStickyAssignor.DEFAULT_GENERATION


@dataclass(frozen=True)
class StickyMember:
    """What the sticky assignor reads from one member's subscription."""

    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...]
    generation: int  # from the subscription's user data (cooperative-sticky) or its GenerationId field; -1: none
    subscription_generation: int = NO_GENERATION  # the GenerationId field alone (v2+), as Java compares it


def java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, ?>`` filled with ``keys`` in this order by ``put``
    (default capacity 16, doubled when the size passes 3/4 of it): by bucket ``(h ^ h >>> 16) & (capacity - 1)``
    of ``String.hashCode``, insertion order within a bucket."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(dict.fromkeys(keys), key=bucket)  # sorted() is stable: insertion order within a bucket


def cooperative_sticky_assign(members: Mapping[str, StickyMember],
                              partition_counts: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """The whole group's assignment for this round, moved partitions left out (the next round assigns them)."""
    assignment, transferring = sticky_assign(members, partition_counts)
    for partition, new_owner in transferring.items():
        assignment[new_owner].remove(partition)
    return assignment


def sticky_assign(members: Mapping[str, StickyMember], partition_counts: Mapping[str, int]
                  ) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """``AbstractStickyAssignor.assignPartitions``: (the assignment, partition -> new owner for the partitions
    that change owner)."""
    topics = {t for m in members.values() for t in m.topics if partition_counts.get(t, 0) > 0}
    counts = {t: partition_counts[t] for t in topics}
    order = java_hashmap_order(sorted(members))
    owned, doubly_claimed = _owned_partitions(members, order, counts)
    first = members[order[0]].topics if order else ()
    if all(set(m.topics) == set(first) for m in members.values()):
        return _Constrained(counts, owned, order, doubly_claimed).build()
    assignment = _general_assign(members, counts, owned)
    return assignment, _transferring(members, assignment)


def _owned_partitions(members: Mapping[str, StickyMember], order: Sequence[str], counts: Mapping[str, int]
                      ) -> tuple[dict[str, list[TopicPartition]], set[TopicPartition]]:
    """``allSubscriptionsEqual``'s other work: each member's owned partitions of existing topics; a partition
    claimed by two members goes to the higher generation, or to neither if they claim the same one."""
    owned: dict[str, list[TopicPartition]] = {}
    previous_owner: dict[TopicPartition, str] = {}
    doubly_claimed: set[TopicPartition] = set()
    for member_id in order:
        member = members[member_id]
        mine: list[TopicPartition] = []
        owned[member_id] = mine
        for tp in member.owned:
            if tp[0] not in counts:
                continue
            other = previous_owner.get(tp)
            if other is None:
                mine.append(tp)
                previous_owner[tp] = member_id
                continue
            other_generation = members[other].subscription_generation  # Java reads the field, not user data
            if member.generation == other_generation:
                doubly_claimed.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                previous_owner[tp] = member_id
            elif member.generation > other_generation:
                mine.append(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                previous_owner[tp] = member_id
    return owned, doubly_claimed


def _all_partitions(counts: Mapping[str, int]) -> list[TopicPartition]:
    return [(topic, p) for topic in sorted(counts) for p in range(counts[topic])]


class _Constrained:
    """``ConstrainedAssignmentBuilder`` (every member subscribes to the same topics), without racks."""

    def __init__(self, counts: Mapping[str, int], owned: Mapping[str, list[TopicPartition]], order: Sequence[str],
                 doubly_claimed: set[TopicPartition]) -> None:
        self.counts = counts
        self.owned = owned
        self.order = order
        self.doubly_claimed = doubly_claimed
        total = sum(counts.values())
        members = len(owned)
        self.min_quota = total // members if members else 0
        self.max_quota = -(-total // members) if members else 0
        self.expected_over_min = total % members if members else 0
        self.over_min = 0
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in owned}
        self.assigned: set[TopicPartition] = set()
        self.transferring: dict[TopicPartition, str] = {}

    def build(self) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
        if not self.owned:
            return {}, {}
        self._assign_owned()
        unassigned = [tp for tp in _all_partitions(self.counts) if tp not in self.assigned]
        self.under_min.sort()
        self.exactly_min.sort()
        self._assign_round_robin(unassigned)
        return self.assignment, self.transferring

    def _assign_owned(self) -> None:
        """Each member keeps its owned partitions up to the min quota (max quota for as many members as the
        remainder allows, first come in HashMap order); the rest may be revoked."""
        for member_id in self.order:
            mine = sorted(self.owned[member_id], key=lambda tp: (tp[1], tp[0]))
            mine = [tp for tp in mine if tp not in self.doubly_claimed]
            target = self.assignment[member_id]
            if len(mine) < self.min_quota:
                target.extend(mine)
                self.assigned.update(mine)
                self.under_min.append(member_id)
            elif len(mine) >= self.max_quota and self.over_min < self.expected_over_min:
                self.over_min += 1
                if self.over_min == self.expected_over_min:
                    self.exactly_min.clear()
                self._keep(member_id, mine, self.max_quota)
            else:
                self._keep(member_id, mine, self.min_quota)
                if self.over_min < self.expected_over_min:
                    self.exactly_min.append(member_id)

    def _keep(self, member_id: str, mine: list[TopicPartition], quota: int) -> None:
        self.assignment[member_id].extend(mine[:quota])
        self.assigned.update(mine[:quota])
        for tp in mine[quota:]:
            self.maybe_revoked[tp] = member_id

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        """Deal the unassigned partitions to the members under the min quota in turn, then one each to members
        at the min quota until as many as the remainder are at the max quota."""
        under, position = self.under_min, 0  # ``position``: a Java iterator over ``under`` that may remove
        for tp in unassigned:
            if position < len(under):
                member_id = under[position]
                position += 1
            elif not under and not self.exactly_min:
                raise AssertionError(f"no member left to take {tp} (sticky assignor invariant)")
            elif not under:
                member_id = self.exactly_min.pop(0)
            else:
                position = 0
                member_id = under[position]
                position += 1
            count = self._assign_new(tp, member_id)
            if count == self.min_quota:
                position -= 1
                under.pop(position)
                self.exactly_min.append(member_id)
            elif count == self.max_quota:
                self.over_min += 1

    def _assign_new(self, tp: TopicPartition, member_id: str) -> int:
        target = self.assignment[member_id]
        target.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member_id) or tp in self.doubly_claimed:
            self.transferring[tp] = member_id
        return len(target)


def _general_assign(members: Mapping[str, StickyMember], counts: Mapping[str, int],
                    owned: Mapping[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Members with different subscriptions: keep owned partitions still subscribed, give the others to the
    least loaded subscriber (ties by member id), then move partitions from a member holding two more than
    another subscriber of the topic until none does."""
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    for member_id in sorted(members):
        for tp in owned.get(member_id, []):
            if tp[0] in members[member_id].topics and tp[1] < counts.get(tp[0], 0) and tp not in taken:
                assignment[member_id].append(tp)
                taken.add(tp)
    subscribers = {t: sorted(m for m in members if t in members[m].topics) for t in counts}
    for tp in _all_partitions(counts):
        if tp not in taken and subscribers[tp[0]]:
            chosen = min(subscribers[tp[0]], key=lambda m: (len(assignment[m]), m))
            assignment[chosen].append(tp)
    moved = True
    while moved:
        moved = False
        for member_id in sorted(members, key=lambda m: (-len(assignment[m]), m)):
            for tp in sorted(assignment[member_id]):
                target = min(subscribers[tp[0]], key=lambda m: (len(assignment[m]), m))
                if len(assignment[member_id]) - len(assignment[target]) > 1:
                    assignment[member_id].remove(tp)
                    assignment[target].append(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(ps) for m, ps in assignment.items()}


def _transferring(members: Mapping[str, StickyMember],
                  assignment: Mapping[str, list[TopicPartition]]) -> dict[TopicPartition, str]:
    """``CooperativeStickyAssignor.computePartitionsTransferringOwnership``: partitions newly assigned to one
    member that another member owned and is not assigned any more."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member_id, parts in assignment.items():
        owned = set(members[member_id].owned)
        added.update({tp: member_id for tp in parts if tp not in owned})
        revoked.update(tp for tp in owned if tp not in set(parts))
    return {tp: m for tp, m in added.items() if tp in revoked}
