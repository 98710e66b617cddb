"""Partitioners: Java-compatible murmur2 placement for keys, even spreading for null keys."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from metaq.errors import ConfigError
from metaq.producer import partitioner
from metaq.producer.partitioner import (
    DefaultPartitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    make_partitioner,
    murmur2,
    murmur2_partition,
)


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


# org.apache.kafka.common.utils.UtilsTest#testMurmur2
@pytest.mark.parametrize(("data", "expected"), [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_java(data, expected):
    assert murmur2 is not partitioner._kafka_python_murmur2  # the install step installs murmurhash2's wheel
    assert _signed(murmur2(data)) == expected
    assert _signed(partitioner._kafka_python_murmur2(data)) == expected  # the fallback


def test_the_compiled_murmur2_and_the_fallback_agree():
    keys = [random.Random(n).randbytes(n % 97) for n in range(2000)]
    compiled = [murmur2(k) for k in keys]
    assert [partitioner._kafka_python_murmur2(k) for k in keys] == compiled
    assert [kafka_python_murmur2(k) & 0xFFFFFFFF for k in keys] == compiled
    assert all(0 <= h < 1 << 32 for h in compiled)


# kafka-python's Java-compatibility vectors: partition of a key among 1000 partitions
@pytest.mark.parametrize(("key", "partition"), [
    (b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742),
])
def test_keyed_partition_matches_java_client(key, partition):
    partitions = list(range(1000))
    assert murmur2_partition(key, partitions) == partition
    assert DefaultPartitioner()("t", key, partitions, partitions[:10]) == partition  # availability ignored


def test_default_round_robins_null_keys_over_available():
    p = DefaultPartitioner()
    chosen = [p("t", None, [0, 1, 2, 3], [1, 3]) for _ in range(100)]
    assert Counter(chosen) == {1: 50, 3: 50}


def test_round_robin_spreads_evenly_and_ignores_keys():
    p = RoundRobinPartitioner()
    chosen = [p("t", b"same-key", list(range(6)), list(range(6))) for _ in range(600)]
    assert Counter(chosen) == {i: 100 for i in range(6)}
    assert all((b - a) % 6 == 1 for a, b in zip(chosen, chosen[1:], strict=False))


def test_round_robin_counters_are_per_topic():
    p = RoundRobinPartitioner()
    a = [p("a", None, [0, 1], [0, 1]) for _ in range(4)]
    b = [p("b", None, [0, 1, 2], [0, 1, 2]) for _ in range(6)]
    assert Counter(a) == {0: 2, 1: 2} and Counter(b) == {0: 2, 1: 2, 2: 2}


def test_round_robin_falls_back_to_all_partitions_without_leaders():
    p = RoundRobinPartitioner()
    assert Counter(p("t", None, [0, 1], []) for _ in range(10)) == {0: 5, 1: 5}


def test_random_stays_in_available():
    p = RandomPartitioner()
    assert {p("t", None, [0, 1, 2, 3], [2, 3]) for _ in range(200)} == {2, 3}


def test_make_partitioner():
    assert isinstance(make_partitioner("default"), DefaultPartitioner)
    assert isinstance(make_partitioner("round_robin"), RoundRobinPartitioner)
    assert isinstance(make_partitioner("random"), RandomPartitioner)
    with pytest.raises(ConfigError, match="'partitioner'"):
        make_partitioner("sticky")
