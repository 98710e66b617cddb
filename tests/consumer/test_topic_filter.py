"""Topic filters (Kafka's TopicFilter rules) and subscriptions -> TopicCount."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metaq.consumer.topic_filter import (
    Blacklist,
    StaticTopics,
    TopicFilter,
    Whitelist,
    WildcardTopics,
    filter_for,
    is_internal_topic,
    subscription_from_topic_count,
    subscription_of,
    topic_count_for,
)
from metaq.errors import ConfigError
from zk_layout.consumer_formats import TopicCount

TOPICS = ["clicks", "views", "logs.web", "logs.db", "logsXweb", "__consumer_offsets", "__transaction_state", "__mine"]


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("  clicks  ", "clicks"),
        ("clicks,views", "clicks|views"),
        ("clicks, views", "clicks|views"),
        ('"logs.*"', "logs.*"),
        ("'logs.*'", "logs.*"),
        ("\"'a|b'\"", "a|b"),
        ("a b c", "abc"),
    ],
)
def test_regex_normalisation(raw: str, normalised: str) -> None:
    assert Whitelist(raw).regex == normalised
    assert Blacklist(raw).regex == normalised
    assert Whitelist(raw).raw == raw


def test_whitelist_is_a_full_match() -> None:
    wl = Whitelist("logs\\..*")
    assert wl.filter(TOPICS) == ["logs.db", "logs.web"]
    assert not Whitelist("click").is_allowed("clicks")  # no partial match (Java String.matches)
    assert not Whitelist("licks").is_allowed("clicks")


def test_comma_list_whitelist() -> None:
    assert Whitelist("clicks, views").filter(TOPICS) == ["clicks", "views"]


def test_blacklist_allows_what_does_not_match() -> None:
    assert Blacklist("logs.*").filter(TOPICS) == ["__mine", "clicks", "views"]
    assert Blacklist("").filter(TOPICS) == ["__mine", "clicks", "logs.db", "logs.web", "logsXweb", "views"]


def test_internal_topics_are_excluded_when_asked() -> None:
    everything = Whitelist(".*")
    assert not everything.is_allowed("__consumer_offsets")
    assert not everything.is_allowed("__transaction_state")
    assert everything.is_allowed("__consumer_offsets", exclude_internal_topics=False)
    assert everything.is_allowed("__mine")  # a user topic that merely starts with "__"
    assert not Blacklist("clicks").is_allowed("__consumer_offsets")
    assert Blacklist("clicks").is_allowed("__consumer_offsets", exclude_internal_topics=False)
    assert is_internal_topic("__consumer_offsets") and not is_internal_topic("__mine")


@pytest.mark.parametrize("bad", ["logs[", "(a", "*x", "a)"])
def test_invalid_regex_is_a_config_error_naming_it(bad: str) -> None:
    for cls in (Whitelist, Blacklist):
        with pytest.raises(ConfigError, match=r"topic filter .*not a valid regex") as info:
            cls(bad)
        assert repr(bad) in str(info.value)


def test_empty_whitelist_is_refused() -> None:
    with pytest.raises(ConfigError, match="matches no topic"):
        Whitelist(" '' ")


def test_pattern_equality_and_repr() -> None:
    assert Whitelist("a").pattern == "white_list"
    assert Blacklist("a").pattern == "black_list"
    assert StaticTopics({"a": 1}).pattern == "static"
    assert Whitelist("a, b") == Whitelist("a|b")
    assert Whitelist("a") != Blacklist("a")
    assert len({Whitelist("a"), Whitelist("'a'")}) == 1
    assert repr(Blacklist("x,y")) == "Blacklist('x|y')"
    with pytest.raises(TypeError):
        TopicFilter("a")  # type: ignore[abstract]


# -- subscriptions -------------------------------------------------------------------------------------------


def test_static_topics_validation() -> None:
    assert StaticTopics({"views": 1, "clicks": 2}).counts == {"clicks": 2, "views": 1}
    with pytest.raises(ConfigError, match="at least one topic"):
        StaticTopics({})
    with pytest.raises(ConfigError, match="topic name"):
        StaticTopics({"bad topic": 1})
    for bad in (0, -1, True, "2"):
        with pytest.raises(ConfigError, match="streams"):
            StaticTopics({"clicks": bad})  # type: ignore[dict-item]


def test_wildcard_topics_validation() -> None:
    with pytest.raises(ConfigError, match="streams"):
        WildcardTopics(Whitelist("a.*"), 0)
    assert WildcardTopics(Whitelist("a.*")).streams == 1


def test_subscription_short_forms() -> None:
    assert subscription_of({"clicks": 2}) == StaticTopics({"clicks": 2})
    assert subscription_of((Whitelist("a"), 3)) == WildcardTopics(Whitelist("a"), 3)
    assert subscription_of(Blacklist("a")) == WildcardTopics(Blacklist("a"), 1)
    sub = StaticTopics({"x": 1})
    assert subscription_of(sub) is sub
    with pytest.raises(TypeError):
        subscription_of(["clicks"])  # type: ignore[arg-type]


def test_topic_count_for_static() -> None:
    tc = topic_count_for(StaticTopics({"views": 1, "clicks": 2}), 1428512949385)
    assert tc.encode() == (
        b'{"version":1,"subscription":{"clicks":2,"views":1},"pattern":"static","timestamp":"1428512949385"}'
    )


def test_topic_count_for_wildcards_stores_the_normalised_regex() -> None:
    tc = topic_count_for(WildcardTopics(Whitelist(' "logs\\..*" '), 1), 1428512949385)
    assert tc.encode() == (
        b'{"version":1,"subscription":{"logs\\\\..*":1},"pattern":"white_list","timestamp":"1428512949385"}'
    )
    tc = topic_count_for(WildcardTopics(Blacklist("__.*"), 2), 1428512949385)
    assert tc.encode() == b'{"version":1,"subscription":{"__.*":2},"pattern":"black_list","timestamp":"1428512949385"}'


def test_topic_count_for_defaults_to_now() -> None:
    assert topic_count_for(StaticTopics({"a": 1})).timestamp_ms > 1_600_000_000_000


def test_round_trip_through_topic_count() -> None:
    for sub in (StaticTopics({"a": 2, "b": 1}), WildcardTopics(Whitelist("a|b"), 2), WildcardTopics(Blacklist("x"))):
        tc = TopicCount.decode("/consumers/g/ids/g_c", topic_count_for(sub, 1).encode())
        assert subscription_from_topic_count(tc) == sub


def test_filter_for() -> None:
    assert filter_for("white_list", "a") == Whitelist("a")
    assert filter_for("black_list", "a") == Blacklist("a")
    with pytest.raises(ValueError):
        filter_for("static", "a")


# -- agreement with TopicCount.streams_per_topic (what every peer computes) ----------------------------------

topic_names = st.lists(
    st.one_of(st.from_regex(r"[a-z_.]{1,8}", fullmatch=True), st.sampled_from(TOPICS)), max_size=15, unique=True
)
regexes = st.one_of(
    st.sampled_from([".*", "logs\\..*", "clicks, views", "'__.*'", "[a-c].*", "x|y|z", "a.?b", '"logs.*"']),
    st.from_regex(r"[a-z.|*_]{1,6}", fullmatch=True),
)


@given(topics=topic_names, regex=regexes, white=st.booleans(), exclude=st.booleans(), streams=st.integers(1, 5))
def test_filters_agree_with_topic_count_expansion(
    topics: list[str], regex: str, white: bool, exclude: bool, streams: int
) -> None:
    try:
        topic_filter: TopicFilter = Whitelist(regex) if white else Blacklist(regex)
    except ConfigError:
        return  # e.g. "*" alone; TopicCount raises ConfigError too
    sub = WildcardTopics(topic_filter, streams)
    tc = topic_count_for(sub, 1)
    assert sub.streams_per_topic(topics, exclude) == tc.streams_per_topic(topics, exclude_internal=exclude)


@given(counts=st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True), st.integers(1, 9), min_size=1))
def test_static_expansion_is_the_subscription(counts: dict[str, int]) -> None:
    sub = StaticTopics(counts)
    assert sub.streams_per_topic(["other"]) == counts == topic_count_for(sub, 1).streams_per_topic(["other"])


def test_own_filter_rejected_by_re2_is_a_config_error() -> None:
    """The consumer's own whitelist goes through the same linear-time engine as its peers' (RE2)."""
    expected = r"topic filter 'logs(?!\\.tmp).*' is not a valid regex: invalid perl operator"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        Whitelist("logs(?!\\.tmp).*")
    assert Whitelist("(a+)+$").filter(["a" * 40 + "b", "a" * 40]) == ["a" * 40]
