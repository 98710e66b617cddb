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
