"""Range and round-robin assignors: Kafka 0.8's worked examples, then invariants over random groups."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metaq.consumer.assignors import (
    RANGE,
    ROUNDROBIN,
    STRATEGIES,
    AssignmentContext,
    assign,
    assign_for,
    by_topic,
    owned_by,
    range_assign,
    range_split,
    roundrobin_assign,
    roundrobin_order,
    sort_thread_ids,
    streams_by_member,
    threads_by_topic,
)
from metaq.consumer.ids import consumer_id_of
from metaq.errors import ConfigError
from metaq.hashing import java_string_hash
from zk_layout.consumer_formats import TopicCount

# -- worked examples (Kafka 0.8's range and roundrobin assignors) ----------------------------------------


def test_range_two_members_two_streams_five_partitions() -> None:
    # the example in Kafka's RangeAssignor source comment
    threads = {"t": ["C2-1", "C1-0", "C2-0", "C1-1"]}
    assert range_assign(threads, {"t": [4, 3, 2, 1, 0]}) == {
        ("t", 0): "C1-0",
        ("t", 1): "C1-0",
        ("t", 2): "C1-1",
        ("t", 3): "C2-0",
        ("t", 4): "C2-1",
    }


def test_range_three_threads_eight_partitions() -> None:
    result = range_assign({"t": ["c-0", "c-1", "c-2"]}, {"t": range(8)})
    assert by_topic(result)["t"] == {0: "c-0", 1: "c-0", 2: "c-0", 3: "c-1", 4: "c-1", 5: "c-1", 6: "c-2", 7: "c-2"}


def test_range_eleven_streams_sort_as_strings() -> None:
    threads = [f"g_c-{i}" for i in range(11)]
    assert sort_thread_ids(threads)[:4] == ["g_c-0", "g_c-1", "g_c-10", "g_c-2"]
    result = by_topic(range_assign({"t": threads}, {"t": range(22)}))["t"]
    assert [p for p, tid in result.items() if tid == "g_c-10"] == [4, 5]  # the third range
    assert [p for p, tid in result.items() if tid == "g_c-2"] == [6, 7]
    assert [p for p, tid in result.items() if tid == "g_c-9"] == [20, 21]


def test_range_zk_layout_example_tree() -> None:
    cid = "etl_host1-1700000000000-6b2a1f0c"
    result = range_assign({"clicks": [f"{cid}-0", f"{cid}-1"]}, {"clicks": [0, 1, 2]})
    assert result == {("clicks", 0): f"{cid}-0", ("clicks", 1): f"{cid}-0", ("clicks", 2): f"{cid}-1"}


def test_range_partitions_sort_numerically() -> None:
    # KAFKA-1062: 10 must come after 9, not after 1
    result = range_assign({"t": ["a-0", "b-0"]}, {"t": [10, 9, 1, 0]})
    assert result == {("t", 0): "a-0", ("t", 1): "a-0", ("t", 9): "b-0", ("t", 10): "b-0"}


def test_roundrobin_hash_order_of_the_example() -> None:
    tps = [(t, p) for t in ("clicks", "views") for p in range(3)]
    assert java_string_hash("[views,0]") == -72890490
    assert java_string_hash("[clicks,0]") == 1627908499
    assert roundrobin_order(tps) == [
        ("views", 0),
        ("views", 1),
        ("views", 2),
        ("clicks", 0),
        ("clicks", 1),
        ("clicks", 2),
    ]


def test_roundrobin_clicks_views_example() -> None:
    threads = {"clicks": ["g_c2-0", "g_c1-0"], "views": ["g_c1-0", "g_c2-0"]}
    result = roundrobin_assign(threads, {"clicks": [0, 1, 2], "views": [0, 1, 2]})
    assert set(owned_by(result, "g_c1")) == {("views", 0), ("views", 2), ("clicks", 1)}
    assert set(owned_by(result, "g_c2")) == {("views", 1), ("clicks", 0), ("clicks", 2)}


def test_roundrobin_skips_unsubscribed_threads() -> None:
    # KAFKA-2434: c2 reads only views; the deal skips it for clicks and resumes after the thread used
    threads = {"clicks": ["g_c1-0"], "views": ["g_c1-0", "g_c2-0"]}
    result = roundrobin_assign(threads, {"clicks": [0, 1, 2], "views": [0, 1, 2]})
    assert owned_by(result, "g_c2") == {("views", 1): "g_c2-0"}
    assert set(owned_by(result, "g_c1")) == {("views", 0), ("views", 2), ("clicks", 0), ("clicks", 1), ("clicks", 2)}


def test_roundrobin_ties_on_hash_are_ordered_by_topic_partition() -> None:
    # "Aa" and "BB" have the same Java hash, so "[Aa,0]" and "[BB,0]" tie
    assert java_string_hash("[Aa,0]") == java_string_hash("[BB,0]")
    assert roundrobin_order([("BB", 0), ("Aa", 0)]) == [("Aa", 0), ("BB", 0)]
    threads = {"Aa": ["x-0", "y-0"], "BB": ["y-0", "x-0"]}
    parts = {"BB": [0], "Aa": [0]}
    assert roundrobin_assign(threads, parts) == {("Aa", 0): "x-0", ("BB", 0): "y-0"}


# -- edge cases ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_empty_inputs(strategy: str) -> None:
    assert assign(strategy, {}, {}) == {}
    assert assign(strategy, {"t": []}, {"t": [0, 1]}) == {}  # nobody subscribed
    assert assign(strategy, {"t": ["a-0"]}, {}) == {}  # topic without partitions (missing in ZooKeeper)
    assert assign(strategy, {}, {"t": [0]}) == {}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_duplicate_threads_and_partitions_are_collapsed(strategy: str) -> None:
    once = assign(strategy, {"t": ["a-0", "b-0"]}, {"t": [0, 1, 2]})
    twice = assign(strategy, {"t": ["b-0", "a-0", "a-0"]}, {"t": [2, 0, 1, 2, 0]})
    assert once == twice


def test_unknown_strategy_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        assign("sticky", {"t": ["a-0"]}, {"t": [0]})


def test_range_split_is_the_metaq_default_over_strings() -> None:
    # MetaQ DEFAULT: string-sorted consumer ids over string-sorted brokerId-p names
    parts = sorted(["0-0", "0-1", "0-2", "0-10", "1-0"])
    assert parts == ["0-0", "0-1", "0-10", "0-2", "1-0"]
    assert range_split(["g_a", "g_b"], parts) == {"0-0": "g_a", "0-1": "g_a", "0-10": "g_a", "0-2": "g_b", "1-0": "g_b"}
    assert range_split([], parts) == {}


def test_owned_by_matches_the_consumer_id_exactly() -> None:
    assignment = {("t", 0): "g_c1-0", ("t", 1): "g_c1-0-1", ("t", 2): "g_c1-1"}
    assert owned_by(assignment, "g_c1") == {("t", 0): "g_c1-0", ("t", 2): "g_c1-1"}
    assert owned_by(assignment, "g_c1-0") == {("t", 1): "g_c1-0-1"}
    assert owned_by(assignment, "g_c") == {}


def test_by_topic_groups_sorted() -> None:
    assert by_topic({("b", 1): "x-0", ("a", 0): "y-0", ("b", 0): "x-1"}) == {"a": {0: "y-0"}, "b": {0: "x-1", 1: "x-0"}}


# -- inputs from TopicCounts ---------------------------------------------------------------------------------


def _topic_counts() -> dict[str, TopicCount]:
    return {
        "g_b": TopicCount({"clicks": 2, "views": 0}, "static", 1),
        "g_a": TopicCount({"c.*": 1}, "white_list", 1),
        "g_c": TopicCount({"clicks|views": 1}, "black_list", 1),
    }


def test_streams_by_member_expands_wildcards_against_topics() -> None:
    topics = ["views", "clicks", "cats", "__consumer_offsets"]
    assert streams_by_member(_topic_counts(), topics) == {
        "g_a": {"cats": 1, "clicks": 1},
        "g_b": {"clicks": 2},  # the zero-stream entry is dropped
        "g_c": {"cats": 1},  # internal topics stay out of the black list
    }
    with_internal = streams_by_member(_topic_counts(), topics, exclude_internal_topics=False)
    assert with_internal["g_c"] == {"__consumer_offsets": 1, "cats": 1}


def test_threads_by_topic_sorts_as_strings() -> None:
    streams = {"g_b": {"t": 11}, "g_a": {"t": 1, "u": 2}}
    threads = threads_by_topic(streams)
    assert threads["u"] == ["g_a-0", "g_a-1"]
    assert threads["t"][:4] == ["g_a-0", "g_b-0", "g_b-1", "g_b-10"]


def test_assignment_context_from_topic_counts() -> None:
    partitions = {"clicks": [2, 1, 0], "cats": [0], "views": [0, 1]}
    ctx = AssignmentContext.from_topic_counts(_topic_counts(), partitions)
    assert ctx.topic_threads == {"cats": ["g_a-0", "g_c-0"], "clicks": ["g_a-0", "g_b-0", "g_b-1"]}
    assert ctx.topic_partitions == {"cats": [0], "clicks": [0, 1, 2]}
    assert ctx.topics_of("g_b") == ["clicks"]
    assert ctx.assign(RANGE) == {
        ("cats", 0): "g_a-0",
        ("clicks", 0): "g_a-0",
        ("clicks", 1): "g_b-0",
        ("clicks", 2): "g_b-1",
    }
    assert set(ctx.assign(ROUNDROBIN)) == set(ctx.assign(RANGE))


def test_assignment_context_static_topic_missing_from_zookeeper() -> None:
    ctx = AssignmentContext.from_topic_counts({"g_a": TopicCount({"ghost": 1}, "static", 1)}, {})
    assert ctx.topic_partitions == {"ghost": []}
    assert ctx.assign(RANGE) == {} and ctx.assign(ROUNDROBIN) == {}


def test_assignment_context_expands_against_explicit_topics() -> None:
    counts = {"g_a": TopicCount({"c.*": 1}, "white_list", 1)}
    ctx = AssignmentContext.from_topic_counts(counts, {"clicks": [0]}, topics=["clicks", "cats"])
    assert ctx.topic_partitions == {"cats": [], "clicks": [0]}


# -- properties ----------------------------------------------------------------------------------------------

TOPICS = ["a", "b", "c", "d"]

members_st = st.lists(st.text("xyz-_0123456789", min_size=1, max_size=6), min_size=1, max_size=8, unique=True)


@st.composite
def groups(draw: st.DrawFn, *, equal: bool = False) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    """(topic -> thread ids, topic -> partitions) for a random group. ``equal``: every member subscribes to
    every topic with the same stream count."""
    members = [f"g_{m}" for m in draw(members_st)]
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    if equal:
        k = draw(st.integers(1, 4))
        streams = {m: dict.fromkeys(topics, k) for m in members}
    else:
        streams = {m: {t: draw(st.integers(0, 4)) for t in topics} for m in members}
    partitions = {t: sorted(draw(st.sets(st.integers(0, 40), max_size=25))) for t in topics}
    return threads_by_topic(streams), partitions


def _shuffled(
    topic_threads: dict[str, list[str]], topic_partitions: dict[str, list[int]], rnd: random.Random
) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
    def shuffle(xs: list) -> list:  # type: ignore[type-arg]
        xs = list(xs)
        rnd.shuffle(xs)
        return xs

    threads = {t: shuffle(topic_threads[t]) for t in shuffle(list(topic_threads))}
    parts = {t: shuffle(topic_partitions[t]) for t in shuffle(list(topic_partitions))}
    return threads, parts


def _check_complete_and_valid(
    assignment: dict[tuple[str, int], str], topic_threads: dict[str, list[str]], topic_partitions: dict[str, list[int]]
) -> None:
    expected = {(t, p) for t, threads in topic_threads.items() if threads for p in topic_partitions.get(t, [])}
    assert set(assignment) == expected  # every partition of a subscribed topic exactly once (dict keys), no other
    for (topic, _), thread_id in assignment.items():
        assert thread_id in topic_threads[topic]  # only to a thread subscribed to that topic


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=200, deadline=None)
@given(group=groups(), seed=st.integers(0, 2**32))
def test_complete_valid_and_deterministic(strategy: str, group: tuple, seed: int) -> None:  # type: ignore[type-arg]
    topic_threads, topic_partitions = group
    assignment = assign(strategy, topic_threads, topic_partitions)
    _check_complete_and_valid(assignment, topic_threads, topic_partitions)
    # every member computes the same answer from its own read order
    assert assign(strategy, *_shuffled(topic_threads, topic_partitions, random.Random(seed))) == assignment


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=200, deadline=None)
@given(group=groups(), seed=st.integers(0, 2**32))
def test_assign_for_is_each_members_part_of_assign(strategy: str, group: tuple, seed: int) -> None:  # type: ignore[type-arg]
    """What a member claims (computed without the rest of the group's assignment) is exactly its entries of
    the whole assignment, from any read order."""
    topic_threads, topic_partitions = group
    assignment = assign(strategy, topic_threads, topic_partitions)
    shuffled = _shuffled(topic_threads, topic_partitions, random.Random(seed))
    members = {consumer_id_of(t) for threads in topic_threads.values() for t in threads}
    for member in members:
        threads = {t for ts in topic_threads.values() for t in ts if consumer_id_of(t) == member}
        assert assign_for(strategy, *shuffled, threads) == owned_by(assignment, member)
    assert assign_for(strategy, topic_threads, topic_partitions, set()) == {}


@settings(max_examples=200, deadline=None)
@given(group=groups())
def test_range_is_balanced_per_thread_within_each_topic(group: tuple) -> None:  # type: ignore[type-arg]
    """Range balances *threads* per topic: any two threads subscribed to a topic own numbers of its partitions
    that differ by at most 1, and each thread owns a contiguous run of the sorted partitions."""
    topic_threads, topic_partitions = group
    per_topic = by_topic(range_assign(topic_threads, topic_partitions))
    for topic, threads in topic_threads.items():
        owned = per_topic.get(topic, {})
        counts = Counter(owned.values())
        sizes = [counts.get(t, 0) for t in threads]
        if sizes:
            assert max(sizes) - min(sizes) <= 1
        order = [owned[p] for p in sorted(owned)]
        assert order == sorted(order)  # runs follow the string order of the threads


@settings(max_examples=200, deadline=None)
@given(group=groups(equal=True))
def test_range_member_balance_with_equal_subscriptions(group: tuple) -> None:  # type: ignore[type-arg]
    """With every member on every topic with k streams, per topic two *members* differ by at most k
    partitions (the extras go to the first threads, which may all belong to one member); with k = 1 that
    is within 1."""
    topic_threads, topic_partitions = group
    per_topic = by_topic(range_assign(topic_threads, topic_partitions))
    for topic, threads in topic_threads.items():
        members = {tid.rsplit("-", 1)[0] for tid in threads}
        k = len(threads) // len(members)
        counts = Counter(tid.rsplit("-", 1)[0] for tid in per_topic.get(topic, {}).values())
        sizes = [counts.get(m, 0) for m in members]
        assert max(sizes) - min(sizes) <= k


def test_range_members_with_two_streams_can_differ_by_two() -> None:
    # why the bound above is k and not 1: 6 partitions over C1-0, C1-1, C2-0, C2-1 -> 2, 2, 1, 1
    result = range_assign({"t": ["C1-0", "C1-1", "C2-0", "C2-1"]}, {"t": range(6)})
    counts = Counter(t.rsplit("-", 1)[0] for t in result.values())
    assert counts == {"C1": 4, "C2": 2}


@settings(max_examples=200, deadline=None)
@given(group=groups(equal=True))
def test_roundrobin_is_balanced_per_thread_with_equal_subscriptions(group: tuple) -> None:  # type: ignore[type-arg]
    """With identical subscriptions, round robin balances threads over *all* topics together: any two
    threads' totals differ by at most 1."""
    topic_threads, topic_partitions = group
    counts = Counter(roundrobin_assign(topic_threads, topic_partitions).values())
    threads = {t for ts in topic_threads.values() for t in ts}
    sizes = [counts.get(t, 0) for t in threads]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_members_by_partitions_grid(strategy: str) -> None:
    """pykafka ``_test_decide_partitions`` style: 1..100 one-stream members over 1..100 partitions of one
    topic. Everything is assigned once, nobody gets two more than anyone else, and with more members than
    partitions exactly ``members - partitions`` members get nothing."""
    for n_members in range(1, 101):
        threads = [f"g_m{i:03d}-0" for i in range(n_members)]
        for n_parts in range(1, 101):
            assignment = assign(strategy, {"t": threads}, {"t": range(n_parts)})
            assert len(assignment) == n_parts
            counts = Counter(assignment.values())
            assert max(counts.values()) - (min(counts.values()) if len(counts) == n_members else 0) <= 1
            assert n_members - len(counts) == max(0, n_members - n_parts)


def test_roundrobin_orders_partitions_by_the_name_format_of_the_kafka_release() -> None:
    """Kafka's Scala consumers sort by ``TopicAndPartition.toString.hashCode``: ``[t,p]`` in 0.8.2.2/0.10.2.2,
    ``t-p`` in 1.1.1 (hashes printed by each release's jar). Two members using different formats disagree on
    whole assignments, so a group mixing metaq with 1.1 Scala consumers sets
    ``partition.assignment.roundrobin.hash``."""
    topic = "mixed-roundrobin-270042"
    assert java_string_hash(f"{topic}-10") == -181161270 and java_string_hash(f"{topic}-0") == -560033243
    partitions = [(topic, p) for p in range(12)]
    assert [p for _, p in roundrobin_order(partitions, "0.8")] == [10, 11, *range(10)]
    assert [p for _, p in roundrobin_order(partitions, "1.1")] == list(range(12))
