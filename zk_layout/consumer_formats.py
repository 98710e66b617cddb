"""Codecs of a ZooKeeper consumer group's nodes: member registrations (TopicCount, with its topic filters), partition
owners and committed offsets (``/consumers/<g>/ids|owners|offsets``), in Kafka's forms and MetaQ's.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol, Self

import re2

from metaq.errors import ConfigError, MalformedNodeError
from zk_layout._codec import _as_int, _dumps, _Fields, _Node, _parse_int_text, now_ms
from zk_layout.topic_formats import INTERNAL_TOPICS

STATIC: Final = "static"
WHITE_LIST: Final = "white_list"
BLACK_LIST: Final = "black_list"
PATTERNS: Final = (STATIC, WHITE_LIST, BLACK_LIST)
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def normalize_topic_filter(regex: str) -> str:
    """Kafka's ``TopicFilter`` clean-up: trim, ``,`` -> ``|``, drop spaces, strip surrounding quotes."""
    cleaned = regex.strip().replace(",", "|").replace(" ", "")
    return cleaned.lstrip("\"'").rstrip("\"'")


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is raised (and named) here; RE2 would also print it to stderr


class TopicMatcher(Protocol):
    """A compiled topic filter (RE2's pattern object): ``fullmatch`` is truthy when the whole topic matches."""

    def fullmatch(self, text: str) -> object: ...


@functools.lru_cache(maxsize=512)
def compile_topic_filter(regex: str) -> TopicMatcher:
    """A normalised topic filter compiled with RE2, whose matching time is linear in the topic's length.

    Filters come from every member's ``/consumers/<g>/ids`` node, so they are untrusted: with Python's
    backtracking ``re``, ``(a+)+$`` against a 30-character topic takes seconds of CPU in every member and
    ops tool. RE2 accepts what topic filters use (classes, alternation, repetition, ``(?i)``, ``\\Q..\\E``)
    but not backreferences, lookaround or possessive quantifiers: those raise ConfigError with RE2's
    reason. ``fullmatch`` is Java's ``String.matches``."""
    try:
        matcher: TopicMatcher = re2.compile(regex, _RE2_OPTIONS)  # re2 ships no types
        return matcher
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ConfigError(f"topic filter {regex!r} is not a valid regex: {reason} (topic filters are matched "
                          "with RE2, which has no backreferences, lookaround or possessive quantifiers)") from e


@dataclass(frozen=True)
class TopicCount:
    """A consumer's registration, ``/consumers/<g>/ids/<consumerId>`` (ephemeral).

    ``static``: ``subscription`` maps topics to stream counts. ``white_list``/``black_list``: one entry,
    ``{regex: streams}``, expanded by every reader against the current topics (:meth:`streams_per_topic`).
    ``version=0`` marks a MetaQ registration (a CSV topic list, one stream each).
    """

    subscription: dict[str, int]
    pattern: str = STATIC
    timestamp_ms: int = field(default_factory=now_ms)
    version: int = 1

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")
        if self.pattern != STATIC and len(self.subscription) != 1:
            raise ValueError(f"a {self.pattern} subscription has exactly one regex, got {self.subscription}")

    @property
    def is_wildcard(self) -> bool:
        return self.pattern != STATIC

    def topic_filter(self) -> tuple[str, int]:
        """(normalised regex, streams) of a wildcard subscription."""
        if not self.is_wildcard:
            raise ValueError("a static subscription has no topic filter")
        regex, streams = next(iter(self.subscription.items()))
        return normalize_topic_filter(regex), streams

    def streams_per_topic(self, topics: Iterable[str], *, exclude_internal: bool = True) -> dict[str, int]:
        """topic -> streams. Static: the subscription. Wildcard: every topic the regex fully matches (white
        list) or does not (black list), with RE2 (:func:`compile_topic_filter`) standing in for Java's
        regex: they agree on the usual subset (classes, alternation, ``.*``). ConfigError for a filter RE2
        does not support (a decoded node has been checked already, see :meth:`decode`)."""
        if not self.is_wildcard:
            return dict(self.subscription)
        regex, streams = self.topic_filter()
        compiled = compile_topic_filter(regex)
        whitelist = self.pattern == WHITE_LIST
        return {
            topic: streams
            for topic in sorted(topics)
            if bool(compiled.fullmatch(topic)) == whitelist and not (exclude_internal and topic in INTERNAL_TOPICS)
        }

    def encode(self) -> bytes:
        subscription = self.subscription if self.is_wildcard else dict(sorted(self.subscription.items()))
        return _dumps(
            {
                "version": self.version if self.version >= 1 else 1,
                "subscription": subscription,
                "pattern": self.pattern,
                "timestamp": str(self.timestamp_ms),
            }
        )

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        """Kafka's ``constructTopicCount`` rules; MetaQ's CSV topic list reads as static, one stream each."""
        node = _Node(path, raw)
        text = node.text()
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict):
            return cls._decode_csv(node, text)
        fields = _Fields(node, obj)
        subscription = fields.object("subscription")
        pattern = fields.str("pattern")
        counts = {
            topic: _as_int(node, streams, f"'subscription'[{topic!r}]", 0) for topic, streams in subscription.items()
        }
        if not counts or pattern not in (WHITE_LIST, BLACK_LIST):
            pattern = STATIC
        else:
            counts = dict([next(iter(counts.items()))])
            try:
                compile_topic_filter(normalize_topic_filter(next(iter(counts))))
            except ConfigError as e:
                node.fail(str(e))
        return cls(counts, pattern, fields.timestamp(), fields.int("version", 1))

    @classmethod
    def _decode_csv(cls, node: _Node, text: str) -> Self:
        topics = [part.strip() for part in text.split(",")]
        if not text.strip() or not all(_TOPIC_NAME.fullmatch(t) for t in topics):
            node.fail("neither a Kafka TopicCount JSON object nor a MetaQ comma-separated topic list")
        return cls({t: 1 for t in topics}, STATIC, -1, 0)


def encode_owner(thread_id: str) -> bytes:
    """``/consumers/<g>/owners/<t>/<p>``: the owning thread id as plain text."""
    if not thread_id:
        raise ValueError("an owner thread id must not be empty")
    return thread_id.encode("utf-8")


def decode_owner(path: str, raw: bytes | None) -> str:
    text = _Node(path, raw).text()
    if not text:
        raise MalformedNodeError(path, raw, "empty owner")
    return text


def encode_offset(offset: int) -> bytes:
    """The next offset to consume as plain decimal digits: what Burrow's ``ParseInt`` accepts."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"an offset must be an integer >= 0, got {offset!r}")
    return str(offset).encode("ascii")


NO_OFFSET_VALUE: Final = -1
"""What an offset node holds before a first commit (a fence writes it); Kafka 0.8 reads it as "no offset"."""


def decode_offset(path: str, raw: bytes | None) -> int:
    """Accept Kafka's ``4213``, MetaQ's ``msgId-offset`` (``1349857398021-10240``, ``-1-0``) and surrounding
    whitespace. Splits on the *last* dash (MetaQ's own ``split("-")`` misreads ``-1-1234``). The only
    negative value is ``-1`` (no offset): anything below is no offset a consumer could have committed, so it
    is reported as malformed rather than silently read as "none"."""
    node = _Node(path, raw)
    text = node.text().strip()
    if "-" not in text[1:]:
        offset = _parse_int_text(node, text, "the offset")
        if offset < NO_OFFSET_VALUE:
            node.fail(f"negative offset {offset} (only {NO_OFFSET_VALUE}, \"no offset yet\", may be negative)")
        return offset
    msg_id, _, offset_text = text.rpartition("-")
    _parse_int_text(node, msg_id, "the msgId of msgId-offset")
    return _parse_int_text(node, offset_text, "the offset of msgId-offset", signed=False)
