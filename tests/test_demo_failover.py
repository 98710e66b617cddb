"""The demo's failover figures (metaq/cli/demo_failover.py): pure arithmetic over acknowledgement times and
the group's consume events."""

from __future__ import annotations

import pytest

from metaq.cli.demo_failover import Failover


def _failover() -> Failover:
    # broker 1 led partitions 0 and 2, killed at t=100; new leaders seen in ZooKeeper at t=104
    return Failover(victim=1, pid=None, killed_at=100.0, led={0: 1, 2: 1}, moved={0: 2, 2: 0}, elected_at=104.0)


def test_produce_resumed_counts_only_moved_partitions_acknowledged_after_the_election() -> None:
    acked_at = {(0, 5): 100.01,  # the old leader's answer, in flight at the kill
                (1, 9): 101.0,  # partition 1 never moved
                (2, 7): 104.5, (0, 6): 104.2}
    assert _failover().produce_resumed(acked_at) == pytest.approx(4.2)


def test_read_resumed_is_the_first_consume_of_a_record_acknowledged_by_a_new_leader() -> None:
    acked_at = {(0, 5): 100.01, (0, 6): 104.2, (1, 9): 101.0}
    events = [
        {"name": "records_consumed", "time": 103.0, "partitions": [{"partition": 0, "minOffset": 0, "maxOffset": 5}]},
        {"name": "records_consumed", "time": 104.1, "partitions": [{"partition": 1, "minOffset": 9, "maxOffset": 9}]},
        {"name": "offsets_committed", "time": 104.3, "offsets": []},
        {"name": "records_consumed", "time": 104.8, "partitions": [{"partition": 0, "minOffset": 6, "maxOffset": 6}]},
    ]
    assert _failover().read_resumed(events, acked_at) == pytest.approx(4.8)


def test_no_figures_before_an_election() -> None:
    f = Failover(victim=1, pid=None, killed_at=100.0, led={0: 1})
    assert f.produce_resumed({(0, 1): 105.0}) is None
    assert f.read_resumed([{"name": "records_consumed", "time": 106.0,
                            "partitions": [{"partition": 0, "minOffset": 1, "maxOffset": 1}]}], {(0, 1): 105.0}) is None
