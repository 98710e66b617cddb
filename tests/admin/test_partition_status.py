"""How `metaq topics describe` and `topics list --under-replicated` classify a partition."""

from __future__ import annotations

from metaq.admin.topics import OFFLINE, OK, UNDER_REPLICATED, partition_status


def test_partition_status() -> None:
    assert partition_status(0, (0, 1, 2), (0, 1, 2), {0, 1, 2}) == OK
    assert partition_status(0, (0,), (0,), {0}) == OK  # a single replica is never under-replicated
    assert partition_status(0, (0, 1, 2), (0, 1), {0, 1, 2}) == UNDER_REPLICATED  # out of the ISR
    assert partition_status(0, (0, 1, 2), (0, 1, 2), {0, 1}) == UNDER_REPLICATED  # in the ISR, but dead
    assert partition_status(None, (0, 1, 2), (0,), {1, 2}) == OFFLINE
    assert partition_status(0, (0, 1), (0, 1), {1}) == OFFLINE  # the leader's broker is gone
