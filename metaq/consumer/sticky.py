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
with different subscriptions get :class:`_General`, a port of ``GeneralAssignmentBuilder`` (same document),
again with Java's order where it decides ties. Rack awareness is not implemented.
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
    assignment = _General(members, counts, owned, order).build()
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


class _JavaHashSet:
    """A ``java.util.HashSet<TopicPartition>``'s iteration order (Java's sticky assignor takes the first element
    of one): by bucket of ``TopicPartition.hashCode`` (capacity 16, doubled past 3/4 full, never shrunk), in
    insertion order within a bucket."""

    def __init__(self) -> None:
        self._items: dict[TopicPartition, None] = {}
        self._capacity = 16

    def add(self, tp: TopicPartition) -> None:
        if tp not in self._items:
            self._items[tp] = None
            if len(self._items) > self._capacity * 3 // 4:
                self._capacity *= 2

    def remove(self, tp: TopicPartition) -> None:
        self._items.pop(tp, None)

    def __bool__(self) -> bool:
        return bool(self._items)

    def first(self) -> TopicPartition:
        return min(self._items, key=lambda tp: _bucket(_partition_hash(tp), self._capacity))


def _partition_hash(tp: TopicPartition) -> int:
    """``TopicPartition.hashCode``: ``31 * (31 + partition) + topic.hashCode()`` in 32 bits."""
    return (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF


def _bucket(h: int, capacity: int) -> int:
    h &= 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


Pair = tuple[str, str]  # (from member, to member)


class _Movements:
    """``PartitionMovements``: where each partition moved during this assignment, so that a partition moving
    back along a pair of members moves the one that came the other way instead (stickiness)."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[Pair, _JavaHashSet]] = {}
        self.moves: dict[TopicPartition, Pair] = {}

    def _remove(self, tp: TopicPartition) -> Pair:
        pair = self.moves.pop(tp)
        pairs = self.by_topic[tp[0]]
        pairs[pair].remove(tp)
        if not pairs[pair]:
            del pairs[pair]
        if not pairs:
            del self.by_topic[tp[0]]
        return pair

    def _add(self, tp: TopicPartition, pair: Pair) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp[0], {}).setdefault(pair, _JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            source = self._remove(tp)[0]
            if source != new:
                self._add(tp, (source, new))
        else:
            self._add(tp, (old, new))

    def to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """``getTheActualPartitionToBeMoved``."""
        pairs = self.by_topic.get(tp[0])
        if pairs is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = pairs.get((new, old))
        return tp if reverse is None else reverse.first()


@dataclass(frozen=True)
class _Previous:
    member_id: str
    generation: int


class _General:
    """``GeneralAssignmentBuilder`` (members subscribe to different topics), without racks.

    Where Java's order decides, this follows it: members in ``java_hashmap_order`` (the leader's subscription
    map), "the least loaded member" as Java's ``TreeSet`` by (partition count, member id), partitions by
    (members subscribing to the topic, topic, partition), and the first partition of a ``HashSet`` as
    :class:`_JavaHashSet` computes it. Where Java would fail with a NullPointerException (a previous owner of a
    partition that is in no balancing any more), this skips the step."""

    def __init__(self, members: Mapping[str, StickyMember], counts: Mapping[str, int],
                 owned: Mapping[str, list[TopicPartition]], order: Sequence[str]) -> None:
        self.members = members
        self.counts = counts
        self.order = order
        self.consumers = {t: [m for m in order if t in members[m].topics] for t in counts}
        self.topics = {m: {t for t in members[m].topics if t in counts} for m in order}
        self.current: dict[str, list[TopicPartition]] = {m: list(owned.get(m, [])) for m in order}
        self.owner = {tp: m for m, tps in self.current.items() for tp in tps}
        topics = sorted(counts, key=lambda t: (len(self.consumers[t]), t))
        self.sorted_all = [(t, p) for t in topics for p in range(counts[t])]
        self.balancing: set[str] = set()  # Java's sortedCurrentSubscriptions (a TreeSet by load, then id)
        self.revocation_required = False
        self.movements = _Movements()

    def _by_load(self) -> list[str]:
        return sorted(self.balancing, key=lambda m: (len(self.current[m]), m))

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous()
        assigned = set(self._assign_owned())
        unassigned = [tp for tp in self.sorted_all if tp not in assigned]
        self.balancing.update(self.current)
        self._balance(previous, unassigned)
        return self.current

    def _previous(self) -> dict[TopicPartition, _Previous]:
        """``prepopulateCurrentAssignments``: partitions claimed by members of an older generation than the
        newest, with the newest of those claims (the first member in map order on a tie)."""
        newest = max([NO_GENERATION, *(m.generation for m in self.members.values())])
        previous: dict[TopicPartition, _Previous] = {}
        for member_id in self.order:
            member = self.members[member_id]
            if member.generation >= newest:
                continue
            for tp in member.owned:
                known = previous.get(tp)
                if known is None or member.generation > known.generation:
                    previous[tp] = _Previous(member_id, member.generation)
        return previous

    def _assign_owned(self) -> list[TopicPartition]:
        """Keep each member's owned partitions of topics it still subscribes to."""
        assigned: list[TopicPartition] = []
        for member_id, partitions in self.current.items():
            kept = [tp for tp in partitions if tp[0] in self.members[member_id].topics]
            if len(kept) != len(partitions):
                self.revocation_required = True
            partitions[:] = kept
            assigned.extend(kept)
        return assigned

    def _max_size(self, member_id: str) -> int:
        return sum(self.counts[t] for t in self.topics[member_id])

    def _balance(self, previous: Mapping[TopicPartition, _Previous], unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self._by_load()[-1]]
        for tp in unassigned:
            target = next((m for m in self._by_load() if tp[0] in self.topics[m]), None)
            if target is not None:
                self.current[target].append(tp)
                self.owner[tp] = target
        fixed_topics = {t for t, consumers in self.consumers.items() if len(consumers) < 2}
        self.sorted_all = [tp for tp in self.sorted_all if tp[0] not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp[0] not in fixed_topics]
        fixed: dict[str, list[TopicPartition]] = {}
        for member_id in self.order:
            if not self._can_participate(member_id, fixed_topics):
                self.balancing.discard(member_id)
                fixed[member_id] = self.current.pop(member_id)
        before = {m: list(tps) for m, tps in self.current.items()}
        owners_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        performed = self._reassign(self.sorted_all, previous)
        if not initializing and performed and _balance_score(self.current) >= _balance_score(before):
            self.current = before
            self.owner = owners_before
        self.current.update(fixed)
        self.balancing.update(fixed)

    def _can_participate(self, member_id: str, fixed_topics: set[str]) -> bool:
        partitions = self.current[member_id]
        return len(partitions) < self._max_size(member_id) or any(tp[0] not in fixed_topics for tp in partitions)

    def _balanced(self) -> bool:
        """``isBalanced``: loads differ by at most one, or no member could take a partition from a member
        holding two more than it."""
        by_load = self._by_load()
        if len(self.current[by_load[0]]) >= len(self.current[by_load[-1]]) - 1:
            return True
        owner = {tp: m for m, tps in self.current.items() for tp in tps}
        for member_id in by_load:
            mine = self.current[member_id]
            if len(mine) == self._max_size(member_id):
                continue
            have = set(mine)
            for topic in self.topics[member_id]:
                for p in range(self.counts[topic]):
                    other = owner.get((topic, p))
                    if (topic, p) not in have and other is not None and len(mine) + 1 < len(self.current[other]):
                        return False
        return True

    def _reassign(self, partitions: list[TopicPartition], previous: Mapping[TopicPartition, _Previous]) -> bool:
        """``performReassignments``: until a pass changes nothing, move each partition (while unbalanced) back to
        its previous owner or to the least loaded subscriber, if that leaves its owner no more loaded."""
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._balanced():
                    break
                load = len(self.current[self.owner[tp]])
                before = previous.get(tp)
                if before is not None and before.member_id in self.current \
                        and load > len(self.current[before.member_id]) + 1:
                    self._move(tp, before.member_id)
                    performed = modified = True
                    continue
                if any(load > len(self.current[m]) + 1 for m in self.consumers[tp[0]] if m in self.current):
                    target = next(m for m in self._by_load() if tp[0] in self.topics[m])
                    self._move(tp, target)
                    performed = modified = True
        return performed

    def _move(self, tp: TopicPartition, new: str) -> None:
        """``reassignPartition``: moves ``tp``, or the partition of its topic that came the other way."""
        moved = self.movements.to_move(tp, self.owner[tp], new)
        old = self.owner[moved]
        self.movements.move(moved, old, new)
        self.current[old].remove(moved)
        self.current[new].append(moved)
        self.owner[moved] = new


def _balance_score(assignment: Mapping[str, list[TopicPartition]]) -> int:
    sizes = [len(tps) for tps in assignment.values()]
    return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])


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
