"""The replica role state machine (metaq/broker/replication/roles.py): the transitions its docstring allows,
the data each state carries, and the log line of every transition."""

from __future__ import annotations

import logging

import pytest

from metaq.broker.replication.partition_state import LeaderState
from metaq.broker.replication.roles import FETCHING, LEADER, OFFLINE, TRUNCATING, Following, Role


def _leading(epoch: int = 3) -> LeaderState:
    return LeaderState(0, epoch, 0, 0)


def test_a_follower_truncates_then_fetches_then_leads_and_goes_offline(caplog: pytest.LogCaptureFixture) -> None:
    role = Role(("t", 0))
    assert role.is_(OFFLINE) and role.leading is None and role.following is None
    following = Following(leader=1, leader_epoch=2, hw=5)
    with caplog.at_level(logging.INFO, logger="metaq.broker.replication.roles"):
        role.transition(TRUNCATING, following=following, why="follower of broker 1")
        role.transition(FETCHING, following=following)
        role.transition(LEADER, leading=_leading())
        role.transition(OFFLINE)
    assert [r.getMessage() for r in caplog.records] == [
        "t-0: replica Offline -> Truncating (follower of broker 1)", "t-0: replica Truncating -> Fetching",
        "t-0: replica Fetching -> Leader", "t-0: replica Leader -> Offline"]
    assert role.is_(OFFLINE) and role.leading is None and role.following is None


def test_a_new_leader_or_epoch_restarts_the_truncation_and_a_new_epoch_keeps_a_leader_leading() -> None:
    role = Role(("t", 0))
    role.transition(TRUNCATING, following=Following(1, 2, 0))
    role.transition(FETCHING, following=role.following)
    role.transition(TRUNCATING, following=Following(2, 3, 0))
    assert role.following == Following(2, 3, 0)
    role.transition(LEADER, leading=_leading(4))
    role.transition(LEADER, leading=_leading(5))
    assert role.leading is not None and role.leading.leader_epoch == 5 and role.following is None


@pytest.mark.parametrize("path", [[FETCHING], [LEADER, FETCHING], [OFFLINE], [TRUNCATING, FETCHING, FETCHING]])
def test_transitions_the_docstring_does_not_allow_raise(path: list[str]) -> None:
    role = Role(("t", 0))
    with pytest.raises(RuntimeError, match="illegal role transition"):
        for state in path:
            role.transition(state, leading=_leading() if state == LEADER else None,
                            following=Following(1, 2, 0) if state in (TRUNCATING, FETCHING) else None)


def test_a_state_given_the_data_of_another_raises_and_stays_unchanged() -> None:
    role = Role(("t", 0))
    with pytest.raises(RuntimeError, match="wrong data"):
        role.transition(LEADER, following=Following(1, 2, 0))
    with pytest.raises(RuntimeError, match="wrong data"):
        role.transition(TRUNCATING, leading=_leading())
    assert role.is_(OFFLINE) and role.leading is None and role.following is None


def test_following_recognises_the_role_a_fetch_was_made_for() -> None:
    following = Following(leader=1, leader_epoch=2, hw=0)
    assert following.is_(1, 2)
    assert not following.is_(1, 3) and not following.is_(2, 2)
