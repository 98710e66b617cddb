"""What a consumer subscribes to: fixed topics with stream counts, or a white/black-list regex.

The regex rules are Kafka's ``TopicFilter``: the text is trimmed, ``,`` becomes ``|``, spaces are removed and
surrounding quotes stripped (property files bring them), and a topic is matched against the **whole** regex
(Java ``String.matches``)::

    Whitelist("logs\\..*, audit").is_allowed("logs.web")          # True; regex is "logs\\..*|audit"
    Blacklist("__.*").is_allowed("clicks")                         # True
    topic_count_for(WildcardTopics(Whitelist("logs.*"), 2), 1428512949385).encode()
    topic_count_for(StaticTopics({"clicks": 2}), 1428512949385)

Every member expands a wildcard member's registration itself (``TopicCount.streams_per_topic``); the filters
here give the same answer, so a member and its peers agree on who reads what.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from metaq.errors import ConfigError
from zk_layout import validate_topic
from zk_layout.consumer_formats import (
    BLACK_LIST,
    STATIC,
    WHITE_LIST,
    TopicCount,
    compile_topic_filter,
    normalize_topic_filter,
)
from zk_layout.topic_formats import INTERNAL_TOPICS


def is_internal_topic(topic: str) -> bool:
    """Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``): kept out of wildcard
    subscriptions when ``exclude.internal.topics`` is true. Other ``__`` names are ordinary user topics."""
    return topic in INTERNAL_TOPICS


class TopicFilter(ABC):
    """A normalised topic regex compiled with RE2 (linear-time matching, see
    :func:`zk_layout.consumer_formats.compile_topic_filter`). Subclasses decide whether a match allows or excludes a
    topic."""

    pattern: ClassVar[str]
    """The TopicCount ``pattern`` this filter registers as (``white_list`` or ``black_list``)."""

    def __init__(self, regex: str) -> None:
        self.raw = regex
        self.regex = normalize_topic_filter(regex)
        try:
            self._compiled = compile_topic_filter(self.regex)
        except ConfigError as e:
            raise ConfigError(f"{e}{f' (given as {regex!r})' if regex != self.regex else ''}") from e

    def matches(self, topic: str) -> bool:
        """Whole-string match, as Java's ``String.matches``."""
        return self._compiled.fullmatch(topic) is not None

    @abstractmethod
    def is_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        """Whether ``topic`` belongs to the subscription."""

    def filter(self, topics: Iterable[str], exclude_internal_topics: bool = True) -> list[str]:
        """The allowed topics, sorted."""
        return sorted({t for t in topics if self.is_allowed(t, exclude_internal_topics)})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicFilter) and type(other) is type(self) and other.regex == self.regex

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.regex))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"


class Whitelist(TopicFilter):
    """Topics the regex matches: ``Whitelist("clicks|views")``."""

    pattern = WHITE_LIST

    def __init__(self, regex: str) -> None:
        super().__init__(regex)
        if not self.regex:
            raise ConfigError(f"topic filter {regex!r}: an empty whitelist matches no topic")

    def is_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        return self.matches(topic) and not (exclude_internal_topics and is_internal_topic(topic))


class Blacklist(TopicFilter):
    """Topics the regex does not match: ``Blacklist("tmp\\..*")``."""

    pattern = BLACK_LIST

    def is_allowed(self, topic: str, exclude_internal_topics: bool = True) -> bool:
        return not self.matches(topic) and not (exclude_internal_topics and is_internal_topic(topic))


def _check_streams(what: str, streams: object) -> int:
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ConfigError(f"{what}: the number of streams must be an integer >= 1, got {streams!r}")
    return streams


@dataclass(frozen=True)
class StaticTopics:
    """Fixed topics, each with its number of streams: ``StaticTopics({"clicks": 2, "views": 1})``."""

    counts: Mapping[str, int]
    pattern: ClassVar[str] = STATIC

    def __post_init__(self) -> None:
        if not self.counts:
            raise ConfigError("a static subscription needs at least one topic")
        for topic, streams in self.counts.items():
            validate_topic(topic)
            _check_streams(f"topic {topic!r}", streams)
        object.__setattr__(self, "counts", dict(sorted(self.counts.items())))

    def streams_per_topic(self, topics: Iterable[str] = (), exclude_internal_topics: bool = True) -> dict[str, int]:
        """The subscription itself: static topics do not depend on which topics exist."""
        return dict(self.counts)


@dataclass(frozen=True)
class WildcardTopics:
    """``streams`` streams shared by every topic ``filter`` allows: ``WildcardTopics(Whitelist("logs.*"), 2)``."""

    filter: TopicFilter
    streams: int = field(default=1)

    def __post_init__(self) -> None:
        _check_streams(f"topic filter {self.filter.regex!r}", self.streams)

    @property
    def pattern(self) -> str:
        return self.filter.pattern

    def streams_per_topic(self, topics: Iterable[str], exclude_internal_topics: bool = True) -> dict[str, int]:
        return {t: self.streams for t in self.filter.filter(topics, exclude_internal_topics)}


Subscription = StaticTopics | WildcardTopics


def subscription_of(spec: Subscription | Mapping[str, int] | tuple[TopicFilter, int] | TopicFilter) -> Subscription:
    """Accept the short forms: ``{topic: n}``, ``(filter, n)`` or a bare filter (one stream)."""
    if isinstance(spec, StaticTopics | WildcardTopics):
        return spec
    if isinstance(spec, TopicFilter):
        return WildcardTopics(spec)
    if isinstance(spec, tuple):
        topic_filter, streams = spec
        return WildcardTopics(topic_filter, streams)
    if isinstance(spec, Mapping):
        return StaticTopics(spec)
    raise TypeError(f"not a subscription: {spec!r}")


def topic_count_for(subscription: Subscription, timestamp_ms: int | None = None) -> TopicCount:
    """The TopicCount this member registers under ``/consumers/<g>/ids/<consumerId>``. A wildcard is stored
    as its normalised regex, as Kafka does. ``timestamp_ms`` defaults to now."""
    if isinstance(subscription, StaticTopics):
        counts, pattern = dict(subscription.counts), STATIC
    else:
        counts, pattern = {subscription.filter.regex: subscription.streams}, subscription.pattern
    if timestamp_ms is None:
        return TopicCount(counts, pattern)
    return TopicCount(counts, pattern, timestamp_ms)


def filter_for(pattern: str, regex: str) -> TopicFilter:
    """The filter for a TopicCount's ``pattern`` (``white_list`` or ``black_list``) and regex."""
    if pattern == WHITE_LIST:
        return Whitelist(regex)
    if pattern == BLACK_LIST:
        return Blacklist(regex)
    raise ValueError(f"not a wildcard pattern: {pattern!r}")


def subscription_from_topic_count(topic_count: TopicCount) -> Subscription:
    """The inverse of :func:`topic_count_for` (e.g. to show what a peer subscribed to). Raises ConfigError
    for a registration metaq would not write itself (zero streams, an invalid topic name or regex)."""
    if not topic_count.is_wildcard:
        return StaticTopics(topic_count.subscription)
    regex, streams = topic_count.topic_filter()
    return WildcardTopics(filter_for(topic_count.pattern, regex), streams)
