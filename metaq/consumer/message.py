"""What a consumer hands to the application."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, overload

from metaq.protocol.record_types import Record


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


_new = object.__new__


def iter_messages(topic: str, partition: int, records: Iterable[Record]) -> Iterator[MessageAndMetadata]:
    """``make_message(topic, partition, ...)`` for each record, without a call per message: the hot loop of
    :class:`MessageBatch` and of ``for message in stream``, where a call would add a tenth to the cost."""
    new, unfrozen, frozen = _new, _Unfrozen, MessageAndMetadata
    for offset, timestamp, key, value, headers in records:
        message: Any = new(unfrozen)
        message.topic = topic
        message.partition = partition
        message.offset = offset
        message.key = key
        message.value = value
        message.timestamp = timestamp
        message.headers = headers
        message.__class__ = frozen
        yield message


_KEYS = itemgetter(2)
_VALUES = itemgetter(3)


class MessageBatch(Sequence[MessageAndMetadata]):
    """A chunk's messages as a read-only sequence that builds each :class:`MessageAndMetadata` when it is
    read (iterating, indexing) rather than all of them up front.

    Why: a batch listener used to get a list of ~10,000 messages per 1 MiB chunk, all alive at once; being
    container objects, they are what CPython's cyclic collector traverses again and again (gen0 -> gen1 ->
    gen2 and full collections), about 0.5 us a message, as much as all the rest of the consuming
    (docs/architecture.md, "Consumer CPU and the garbage collector"). Built one at a time, a message the
    listener is done with is freed at once and never counts towards a collection. The records behind it are
    the decoder's ``(offset, timestamp, key, value, headers)`` tuples, which the collector stops tracking the
    first time it sees them. ``list(batch)`` makes an ordinary list; :meth:`values`, :meth:`keys` and
    :meth:`offsets` read one field of every message without building messages at all.
    """

    __slots__ = ("topic", "partition", "_records")

    def __init__(self, topic: str, partition: int, records: Sequence[Record]) -> None:
        self.topic = topic
        self.partition = partition
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> MessageAndMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> MessageBatch: ...

    def __getitem__(self, index: int | slice) -> MessageAndMetadata | MessageBatch:
        if isinstance(index, slice):
            return MessageBatch(self.topic, self.partition, self._records[index])
        offset, timestamp, key, value, headers = self._records[index]
        return make_message(self.topic, self.partition, offset, key, value, timestamp, headers)

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        return iter_messages(self.topic, self.partition, self._records)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence (a list, another batch) of the same messages."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes, bytearray)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # like a list: equal to lists, so not hashable

    def __repr__(self) -> str:
        if not self._records:
            return f"MessageBatch({self.topic}-{self.partition}, empty)"
        return (f"MessageBatch({self.topic}-{self.partition}, {len(self._records)} messages, offsets "
                f"{self._records[0][0]}-{self._records[-1][0]})")

    @property
    def records(self) -> Sequence[Record]:
        """The raw ``(offset, timestamp, key, value, headers)`` tuples behind the messages."""
        return self._records

    @property
    def next_offset(self) -> int:
        """The offset after the last message (the batch must not be empty)."""
        return int(self._records[-1][0]) + 1

    def offsets(self) -> list[int]:
        return [r[0] for r in self._records]

    def keys(self) -> list[Any]:
        return list(map(_KEYS, self._records))

    def values(self) -> list[Any]:
        return list(map(_VALUES, self._records))

    def size(self) -> int:
        """Bytes of keys and values (a null counts 0), as ``max_size`` counts them."""
        records = self._records
        return sum(map(len, filter(None, map(_KEYS, records)))) + sum(map(len, filter(None, map(_VALUES, records))))


def batch_from(topic: str, partition: int, records: list[Record], start: int, min_offset: int) -> MessageBatch:
    """The messages of ``records[start:]`` at or above ``min_offset`` (offsets rise along ``records``), without
    a copy in the usual case (the whole chunk, nothing below ``min_offset``)."""
    end = len(records)
    while start < end and records[start][0] < min_offset:
        start += 1
    return MessageBatch(topic, partition, records if start == 0 else records[start:])


__all__ = ["MessageAndMetadata", "MessageBatch", "batch_from", "iter_messages", "make_message"]
