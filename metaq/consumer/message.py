"""What a consumer hands to the application."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from metaq.protocol.records import Record


@dataclass(frozen=True, slots=True)
class MessageAndMetadata:
    """One message as Kafka 0.8's ``MessageAndMetadata``: where it came from and its decoded key/value."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def next_offset(self) -> int:
        return self.offset + 1


@dataclass(slots=True)
class _Unfrozen:
    """MessageAndMetadata's twin without the frozen ``__setattr__`` (same fields, same slot layout)."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def make_message(topic: str, partition: int, offset: int, key: Any, value: Any, timestamp: int,
                 headers: tuple[tuple[str, bytes | None], ...] = ()) -> MessageAndMetadata:
    """The same object as ``MessageAndMetadata(...)``, built in about a third of the time (the hot path of
    the streams): a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, the
    unfrozen twin's with plain slot stores, and CPython allows relabelling an instance between two classes
    with identical slot layouts. The result is a genuine, frozen MessageAndMetadata."""
    message: Any = _Unfrozen(topic, partition, offset, key, value, timestamp, headers)
    message.__class__ = MessageAndMetadata
    return message  # type: ignore[no-any-return]


def make_messages(topic: str, partition: int, records: Iterable[Record], min_offset: int) -> list[MessageAndMetadata]:
    """``[make_message(topic, partition, ...) for each record at or above min_offset]`` in less than half the
    time (the batch listeners' hot path): one loop of plain slot stores, without a call per message."""
    out: list[MessageAndMetadata] = []
    append = out.append
    new = object.__new__
    unfrozen, frozen = _Unfrozen, MessageAndMetadata
    for offset, timestamp, key, value, headers in records:
        if offset < min_offset:
            continue
        message: Any = new(unfrozen)
        message.topic = topic
        message.partition = partition
        message.offset = offset
        message.key = key
        message.value = value
        message.timestamp = timestamp
        message.headers = headers
        message.__class__ = frozen
        append(message)
    return out


__all__ = ["MessageAndMetadata", "make_message", "make_messages"]
