"""Kafka's rack-unaware replica assignment (AdminUtils.assignReplicasToBrokers) as metaq computes it."""

from __future__ import annotations

from collections import Counter

import pytest

from metaq.broker.topics import assign_replicas
from metaq.errors import ConfigError, TopicError


def test_matches_kafkas_fixed_start_example() -> None:
    # Kafka's AdminUtilsTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, fixed start 0
    expected = {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}
    assert assign_replicas([4, 3, 2, 1, 0], 10, 3, start_index=0, replica_shift=0) == expected


def test_single_replica_is_round_robin_from_the_start() -> None:
    assert assign_replicas([0, 1, 2], 4, start_index=1) == {0: [1], 1: [2], 2: [0], 3: [1]}


@pytest.mark.parametrize("brokers,partitions", [(3, 6), (3, 9), (4, 12), (5, 10)])
def test_leaders_and_replicas_spread_evenly(brokers: int, partitions: int) -> None:
    assignment = assign_replicas(list(range(brokers)), partitions, 3)
    for replicas in assignment.values():
        assert len(set(replicas)) == 3
    leaders = Counter(replicas[0] for replicas in assignment.values())
    hosted = Counter(b for replicas in assignment.values() for b in replicas)
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert max(hosted.values()) - min(hosted.values()) <= 1


def test_new_partitions_continue_the_pattern() -> None:
    whole = assign_replicas([0, 1, 2], 6, 2, start_index=2, replica_shift=1)
    tail = assign_replicas([0, 1, 2], 3, 2, start_index=2, replica_shift=1, first_partition=3)
    assert tail == {p: whole[p] for p in (3, 4, 5)}


def test_refuses_more_replicas_than_live_brokers() -> None:
    with pytest.raises(TopicError, match="replication factor: 4 larger than available brokers: 3"):
        assign_replicas([0, 1, 2], 1, 4)
    with pytest.raises(ConfigError, match="replication factor: 0"):
        assign_replicas([0, 1, 2], 1, 0)
