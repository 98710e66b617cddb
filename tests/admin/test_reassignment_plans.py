"""Kafka's JSON plan formats as ``metaq topics reassign`` reads and writes them (metaq/admin/reassignment.py)."""

from __future__ import annotations

import json

import pytest

from metaq.admin.reassignment import format_plan, parse_plan, parse_topics_to_move
from metaq.errors import ConfigError


def test_a_plan_round_trips_in_kafkas_format() -> None:
    plan = {("t", 1): (3, 2), ("t", 0): (2, 3)}
    text = format_plan(plan)
    assert json.loads(text) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "t", "partition": 1, "replicas": [3, 2], "log_dirs": ["any", "any"]}]}
    assert parse_plan(text) == plan


@pytest.mark.parametrize("text", ['{"version":1}', "not json", '{"partitions":[]}',
                                  '{"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
                                  '{"topic":"t","partition":0,"replicas":[2]}]}'])
def test_a_plan_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_plan(text)


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == ["a", "b"]
    with pytest.raises(ConfigError):
        parse_topics_to_move('{"topics":[]}')


def test_throttles_of_a_move_are_kafkas() -> None:
    """Sources leader-throttled, destinations follower-throttled, every broker of both gets the rates (Kafka's
    calculateLeaderThrottles/calculateFollowerThrottles/calculateReassigningBrokers)."""
    from metaq.admin.reassign_throttle import reassignment_throttles

    throttles = reassignment_throttles({("t", 0): (1, 2), ("t", 1): (2, 1), ("u", 0): (4,)},
                                       {("t", 0): (2, 3), ("t", 1): (3, 2), ("u", 0): (4, 5)})
    assert throttles.leader == {"t": "0:1,0:2,1:1,1:2", "u": "0:4"}
    assert throttles.follower == {"t": "0:3,1:3", "u": "0:5"}
    assert throttles.brokers == {1, 2, 3, 4, 5}


def test_log_dirs_of_a_plan() -> None:
    from metaq.admin.reassignment import parse_log_dirs

    text = ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["/d1","any"]},'
            '{"topic":"t","partition":1,"replicas":[2]}]}')
    assert parse_log_dirs(text) == {("t", 0, 1): "/d1"}
    with pytest.raises(ConfigError, match="Size of replicas list"):
        parse_log_dirs('{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}')
