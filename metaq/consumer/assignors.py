"""Partition assignors of the Kafka 0.8 high-level consumer: ``range`` (the default) and ``roundrobin``.

Every member computes the whole group's assignment from the same ZooKeeper reads and claims only its own
entries, so the functions here must be pure and deterministic: thread ids are sorted **as strings** (Kafka's
``ConsumerThreadId.compare``; ``-10`` sorts before ``-2``) and partitions numerically (KAFKA-1062), whatever
order the inputs come in::

    ctx = AssignmentContext.from_topic_counts(topic_counts, {"clicks": [0, 1, 2, 3, 4]})
    assignment = assign("range", ctx.topic_threads, ctx.topic_partitions)   # {("clicks", 0): "g_c1-0", ...}
    mine = owned_by(assignment, "g_c1")

An assignment maps ``(topic, partition)`` to the owning thread id, which is also the data of the owner node
``/consumers/<g>/owners/<t>/<p>``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from metaq.consumer.ids import consumer_id_of, make_thread_ids
from metaq.errors import ConfigError
from metaq.hashing import java_string_hash
from zk_layout.consumer_formats import TopicCount

RANGE: Final = "range"
ROUNDROBIN: Final = "roundrobin"
STRATEGIES: Final = (RANGE, ROUNDROBIN)

TopicPartition = tuple[str, int]
Assignment = dict[TopicPartition, str]
"""(topic, partition) -> owning thread id."""

T = TypeVar("T")


def sort_thread_ids(thread_ids: Iterable[str]) -> list[str]:
    """Distinct thread ids in Kafka's order: plain string comparison, so ``c-10`` comes before ``c-2``."""
    return sorted(set(thread_ids))


# -- range ---------------------------------------------------------------------------------------------


def range_split(members: Sequence[str], items: Sequence[T]) -> dict[T, str]:
    """Kafka's range split of ``items`` (already in order) over ``members`` (already in order).

    Member at position ``pos`` gets ``count = n + (1 if pos + 1 <= extra else 0)`` items starting at
    ``start = n*pos + min(pos, extra)``, where ``n, extra = divmod(len(items), len(members))``; members past
    the items get nothing. MetaQ's ``DEFAULT`` strategy is the same split over string-sorted consumer ids and
    ``brokerId-p`` partition names.
    """
    if not members:
        return {}
    result: dict[T, str] = {}
    for pos, member in enumerate(members):
        result.update(dict.fromkeys(items[_range_slot(pos, len(members), len(items))], member))
    return result


def _range_slot(pos: int, members: int, items: int) -> slice:
    """The items of the member at ``pos`` in :func:`range_split`."""
    n, extra = divmod(items, members)
    start = n * pos + min(pos, extra)
    return slice(start, start + n + (1 if pos + 1 <= extra else 0))


def range_assign(
    topic_threads: Mapping[str, Sequence[str]], topic_partitions: Mapping[str, Sequence[int]]
) -> Assignment:
    """Range, each topic on its own: contiguous runs of the numerically sorted partitions go to the
    string-sorted thread ids subscribed to that topic. A topic without partitions assigns nothing."""
    assignment: Assignment = {}
    for topic in sorted(topic_threads):
        threads = sort_thread_ids(topic_threads[topic])
        partitions = [(topic, p) for p in sorted(set(topic_partitions.get(topic, ())))]
        assignment.update(range_split(threads, partitions))  # keyed by (topic, partition) directly
    return assignment


def range_assign_for(
    topic_threads: Mapping[str, Sequence[str]], topic_partitions: Mapping[str, Sequence[int]], threads: Collection[str]
) -> Assignment:
    """The entries of :func:`range_assign` owned by ``threads``, without building the rest: each member of a
    large group needs only its own runs (10,000 partitions over 100 members: 100 entries, not 10,000)."""
    assignment: Assignment = {}
    for topic in sorted(topic_threads):
        ordered = sort_thread_ids(topic_threads[topic])
        positions = [pos for pos, thread in enumerate(ordered) if thread in threads]
        if not positions:
            continue
        partitions = sorted(set(topic_partitions.get(topic, ())))
        for pos in positions:
            for partition in partitions[_range_slot(pos, len(ordered), len(partitions))]:
                assignment[(topic, partition)] = ordered[pos]
    return assignment


# -- roundrobin ----------------------------------------------------------------------------------------


ROUNDROBIN_HASHES = {"0.8": "[{0},{1}]", "1.1": "{0}-{1}"}
"""``partition.assignment.roundrobin.hash`` -> the string whose Java hash orders a partition: the ``toString`` of
Kafka's ``TopicAndPartition``, ``[topic,partition]`` in 0.8.2.2 and 0.10.2.2 and ``topic-partition`` in 1.1.1
(each read from the release's own jar). A group mixing metaq with Scala consumers must use theirs."""


def roundrobin_order(topic_partitions: Iterable[TopicPartition], hashed: str = "0.8") -> list[TopicPartition]:
    """Sort by Java ``String.hashCode`` of the partition's name in Kafka ``hashed``'s format (signed, ascending)
    so that one topic's partitions spread over the threads. Equal hashes are ordered by (topic, partition):
    Kafka leaves that tie to map iteration order, which would let members disagree."""
    name = ROUNDROBIN_HASHES[hashed]
    return sorted(set(topic_partitions), key=lambda tp: (java_string_hash(name.format(tp[0], tp[1])), tp))


def roundrobin_assign(
    topic_threads: Mapping[str, Sequence[str]], topic_partitions: Mapping[str, Sequence[int]], hashed: str = "0.8"
) -> Assignment:
    """Round robin: every partition of every subscribed topic, in :func:`roundrobin_order`, is dealt in turn
    over all string-sorted thread ids, skipping the threads not subscribed to that partition's topic
    (KAFKA-2434; 0.8.2 instead required identical subscriptions). The deal resumes after the last thread used.
    """
    subscribers = {topic: set(threads) for topic, threads in topic_threads.items() if threads}
    ring = sort_thread_ids(t for threads in subscribers.values() for t in threads)
    wanted = ((topic, p) for topic in subscribers for p in topic_partitions.get(topic, ()))
    assignment: Assignment = {}
    cursor = 0
    for topic, partition in roundrobin_order(wanted, hashed):
        while ring[cursor % len(ring)] not in subscribers[topic]:  # ends: the topic has a subscriber
            cursor += 1
        assignment[(topic, partition)] = ring[cursor % len(ring)]
        cursor += 1
    return dict(sorted(assignment.items()))


# -- dispatch and views ----------------------------------------------------------------------------------


def assign(
    strategy: str, topic_threads: Mapping[str, Sequence[str]], topic_partitions: Mapping[str, Sequence[int]],
    roundrobin_hash: str = "0.8",
) -> Assignment:
    """Run the assignor named by ``partition.assignment.strategy``. Kafka 0.8 silently fell back to range
    on an unknown name; here it is an error (as from Kafka 0.9, KAFKA-2032)."""
    if strategy == RANGE:
        return range_assign(topic_threads, topic_partitions)
    if strategy == ROUNDROBIN:
        return roundrobin_assign(topic_threads, topic_partitions, roundrobin_hash)
    raise ConfigError(f"config 'partition.assignment.strategy': {strategy!r} must be one of {', '.join(STRATEGIES)}")


def assign_for(
    strategy: str,
    topic_threads: Mapping[str, Sequence[str]],
    topic_partitions: Mapping[str, Sequence[int]],
    threads: Collection[str],
    roundrobin_hash: str = "0.8",
) -> Assignment:
    """The entries of :func:`assign` owned by ``threads`` (one member's thread ids): what a member claims.
    Range computes only those; round robin deals every partition anyway, then keeps ours."""
    if strategy == RANGE:
        return range_assign_for(topic_threads, topic_partitions, threads)
    return {tp: tid for tp, tid in assign(strategy, topic_threads, topic_partitions, roundrobin_hash).items()
            if tid in threads}


def owned_by(assignment: Mapping[TopicPartition, str], consumer_id: str) -> Assignment:
    """The entries of one member: those whose thread id is ``<consumer_id>-<n>`` (exact, not a prefix)."""
    return {tp: tid for tp, tid in sorted(assignment.items()) if consumer_id_of(tid) == consumer_id}


def by_topic(assignment: Mapping[TopicPartition, str]) -> dict[str, dict[int, str]]:
    """``{topic: {partition: thread_id}}``: the shape of the ``before_starting_fetchers`` hook argument."""
    result: dict[str, dict[int, str]] = {}
    for (topic, partition), thread_id in sorted(assignment.items()):
        result.setdefault(topic, {})[partition] = thread_id
    return result


# -- inputs from ZooKeeper ---------------------------------------------------------------------------------


def streams_by_member(
    topic_counts: Mapping[str, TopicCount], topics: Iterable[str], *, exclude_internal_topics: bool = True
) -> dict[str, dict[str, int]]:
    """consumer id -> {topic: streams}, expanding wildcard members against ``topics`` (the children of
    ``/brokers/topics``) exactly as every other member does. Zero-stream entries are dropped."""
    all_topics = sorted(set(topics))
    result: dict[str, dict[str, int]] = {}
    for consumer_id, topic_count in sorted(topic_counts.items()):
        per_topic = topic_count.streams_per_topic(all_topics, exclude_internal=exclude_internal_topics)
        result[consumer_id] = {topic: n for topic, n in sorted(per_topic.items()) if n > 0}
    return result


def threads_by_topic(member_streams: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    """topic -> string-sorted thread ids of every member subscribed to it (``getConsumersPerTopic``)."""
    result: dict[str, list[str]] = {}
    for consumer_id, per_topic in member_streams.items():
        for topic, n in per_topic.items():
            result.setdefault(topic, []).extend(make_thread_ids(consumer_id, n))
    return {topic: sort_thread_ids(threads) for topic, threads in sorted(result.items())}


@dataclass(frozen=True)
class AssignmentContext:
    """Everything an assignor needs, already normalised (Kafka's ``AssignmentContext``)::

        ctx = AssignmentContext.from_topic_counts({"g_c1": tc1, "g_c2": tc2}, {"clicks": [0, 1, 2]})
        ctx.assign("roundrobin")

    ``topic_threads``: topic -> string-sorted thread ids of the whole group. ``topic_partitions``: topic ->
    numerically sorted partitions, for every topic some member subscribes to (empty if the topic is missing).
    """

    topic_threads: dict[str, list[str]]
    topic_partitions: dict[str, list[int]]

    @classmethod
    def from_topic_counts(
        cls,
        topic_counts: Mapping[str, TopicCount],
        topic_partitions: Mapping[str, Sequence[int]],
        *,
        topics: Iterable[str] | None = None,
        exclude_internal_topics: bool = True,
    ) -> AssignmentContext:
        """Build from every member's TopicCount (keyed by consumer id). Wildcards expand against ``topics``,
        by default the topics of ``topic_partitions``."""
        known = list(topic_partitions) if topics is None else list(topics)
        streams = streams_by_member(topic_counts, known, exclude_internal_topics=exclude_internal_topics)
        threads = threads_by_topic(streams)
        partitions = {topic: sorted(set(topic_partitions.get(topic, ()))) for topic in threads}
        return cls(threads, partitions)

    def assign(self, strategy: str, roundrobin_hash: str = "0.8") -> Assignment:
        return assign(strategy, self.topic_threads, self.topic_partitions, roundrobin_hash)

    def topics_of(self, consumer_id: str) -> list[str]:
        """The topics this member has at least one thread for."""
        return [t for t, ts in self.topic_threads.items() if any(consumer_id_of(x) == consumer_id for x in ts)]
