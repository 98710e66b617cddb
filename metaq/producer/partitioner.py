"""Choosing a partition for a record that names none.

"default" sends keyed records where Kafka's Java client (and librdkafka's ``murmur2_random``) sends them, so
producers in different languages agree on key placement::

    p = make_partitioner("default")
    p("clicks", b"user-42", [0, 1, 2, 3], [0, 1, 2, 3])   # same partition as the Java client
    p("clicks", None, [0, 1, 2, 3], [0, 2])               # round robin over partitions that have a leader
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Protocol

from kafka.partitioner.default import murmur2

from metaq.errors import ConfigError


class Partitioner(Protocol):
    def __call__(self, topic: str, key: bytes | None, partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        """A partition of ``topic``: ``partitions`` is all of them (sorted), ``available`` those with a leader."""
        ...


def murmur2_partition(key: bytes, partitions: Sequence[int]) -> int:
    """Java's ``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return partitions[(int(murmur2(key)) & 0x7FFFFFFF) % len(partitions)]


class RoundRobinPartitioner:
    """Cycles through a topic's available partitions (all of them if none has a leader), ignoring keys."""

    def __init__(self) -> None:
        self._counters: dict[str, Callable[[], int]] = {}

    def _next(self, topic: str) -> int:
        counter = self._counters.get(topic)
        if counter is None:
            # setdefault: two threads racing on a new topic share one counter; next() is atomic under the GIL
            counter = self._counters.setdefault(topic, itertools.count(random.randrange(1 << 16)).__next__)
        return counter()

    def __call__(self, topic: str, key: bytes | None, partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        pool = available or partitions
        return pool[self._next(topic) % len(pool)]


class DefaultPartitioner(RoundRobinPartitioner):
    """murmur2 of the key over all partitions (stable placement), round robin for null keys."""

    def __call__(self, topic: str, key: bytes | None, partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        if key is not None:
            return murmur2_partition(key, partitions)
        return super().__call__(topic, key, partitions, available)


class RandomPartitioner:
    """A uniformly random available partition."""

    def __call__(self, topic: str, key: bytes | None, partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        return random.choice(available or partitions)


def make_partitioner(name: str) -> Partitioner:
    factories: dict[str, Callable[[], Partitioner]] = {
        "default": DefaultPartitioner,
        "round_robin": RoundRobinPartitioner,
        "random": RandomPartitioner,
    }
    try:
        return factories[name]()
    except KeyError:
        raise ConfigError(f"config 'partitioner': {name!r} must be one of {', '.join(factories)}") from None
