"""The role of one replica of a replicated partition on this broker, as an explicit state machine.

States (only :meth:`Role.transition` changes them; anything else is a bug and raises)::

    OFFLINE --state node names us leader--> LEADER
    OFFLINE --state node names a registered leader--> TRUNCATING
    LEADER --new leader epoch naming us--> LEADER (its HW restarts from the checkpointed one)
    LEADER --another leader named--> TRUNCATING
    TRUNCATING --the leader answered where our logs diverge, log cut there--> FETCHING
    TRUNCATING | FETCHING --another leader or leader epoch--> TRUNCATING
    TRUNCATING | FETCHING --state node names us leader--> LEADER
    any --leader -1 or not registered, or the replica left this broker--> OFFLINE

What each state means for the caller:

* OFFLINE: no leader to follow (leader -1, or the named leader is not registered yet); the HW consumers see
  is the one last checkpointed. A replica is created OFFLINE and dropped from OFFLINE.
* LEADER: :attr:`Role.leading` holds the followers' fetch offsets and the HW (:mod:`.partition_state`);
  acks=all produces wait in :attr:`Role.waiters`.
* TRUNCATING: a follower of :attr:`Role.following` whose log may hold a tail the leader does not have:
  before fetching, the replica fetcher asks the leader where our latest leader epoch ends
  (OffsetForLeaderEpoch, KIP-101) and the log is cut there. Nothing fetched is appended in this phase.
* FETCHING: a follower appending the leader's batches, keeping the HW the leader sends.

The manager (:mod:`.manager`) takes the transitions; the replica fetcher only reads the state through
:class:`~.replica_fetcher.FetchPosition`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from metaq.broker.replication.partition_state import LeaderState

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

OFFLINE = "Offline"
LEADER = "Leader"
TRUNCATING = "Truncating"
FETCHING = "Fetching"

FOLLOWING = frozenset({TRUNCATING, FETCHING})

_ALLOWED = {
    OFFLINE: {LEADER, TRUNCATING},
    LEADER: {LEADER, TRUNCATING, OFFLINE},
    TRUNCATING: {FETCHING, TRUNCATING, LEADER, OFFLINE},
    FETCHING: {TRUNCATING, LEADER, OFFLINE},
}


@dataclass
class Waiter:
    """An acks=all produce waiting for the ISR to reach ``required`` (its last offset + 1)."""

    required: int
    min_isr: int
    future: asyncio.Future[int]


@dataclass
class Following:
    """What a follower follows: the leader broker and its epoch, and the HW the leader last sent."""

    leader: int
    leader_epoch: int
    hw: int

    def is_(self, leader: int, leader_epoch: int) -> bool:
        """Whether this is still the role a fetch to ``leader`` at ``leader_epoch`` was made for."""
        return self.leader == leader and self.leader_epoch == leader_epoch


@dataclass
class Role:
    """One replica's role. ``leading`` is set exactly in LEADER, ``following`` exactly in TRUNCATING and
    FETCHING: :meth:`transition` keeps both consistent with ``state``."""

    key: TopicPartition
    state: str = OFFLINE
    leading: LeaderState | None = None
    following: Following | None = None
    waiters: list[Waiter] = field(default_factory=list)

    def is_(self, *states: str) -> bool:
        return self.state in states

    def transition(self, state: str, *, leading: LeaderState | None = None, following: Following | None = None,
                   why: str = "") -> None:
        """Take ``state`` with its data (``leading`` for LEADER, ``following`` for the follower phases).

        Raises RuntimeError on a transition the module docstring does not allow, or data that does not
        belong to the state: both are bugs of the caller."""
        if state not in _ALLOWED[self.state]:
            raise RuntimeError(f"{self.key[0]}-{self.key[1]}: illegal role transition {self.state} -> {state}")
        if (leading is not None) != (state == LEADER) or (following is not None) != (state in FOLLOWING):
            raise RuntimeError(f"{self.key[0]}-{self.key[1]}: role {state} given the wrong data")
        log.info("%s-%d: replica %s -> %s%s", *self.key, self.state, state, f" ({why})" if why else "")
        self.state, self.leading, self.following = state, leading, following
