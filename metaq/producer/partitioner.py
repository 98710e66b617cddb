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

from kafka.partitioner.default import murmur2 as _py_murmur2

from metaq.errors import ConfigError

_KAFKA_SEED = 0x9747B28C  # the seed of Kafka's Utils.murmur2


def _kafka_python_murmur2(key: bytes) -> int:
    """kafka-python's pure-Python murmur2, unsigned: the fallback where murmurhash2 has no wheel."""
    return int(_py_murmur2(key)) & 0xFFFFFFFF


try:
    from murmurhash2 import murmurhash2 as _murmurhash2

    def murmur2(key: bytes) -> int:
        """Kafka's ``Utils.murmur2`` (MurmurHash2, 32 bits, Kafka's seed) as an unsigned int.

        The compiled murmurhash2 package takes ~0.13 us for a 12-byte key, kafka-python's pure-Python one 2.1 us
        (9 us for 64 bytes), which a keyed send() paid per record. tests/producer/test_producer_partitioner.py
        checks both against Kafka's own vectors.
        """
        return int(_murmurhash2(key, _KAFKA_SEED))
except ImportError:  # pragma: no cover - every platform with a murmurhash2 wheel has it
    murmur2 = _kafka_python_murmur2


class Partitioner(Protocol):
    def __call__(self, topic: str, key: bytes | None, partitions: Sequence[int],
                 available: Sequence[int]) -> int:
        """A partition of ``topic``: ``partitions`` is all of them (sorted), ``available`` those with a leader."""
        ...


def murmur2_partition(key: bytes, partitions: Sequence[int]) -> int:
    """Java's ``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]


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
