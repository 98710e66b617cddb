"""The states of a ZooKeeper-coordinated member (:class:`metaq.consumer.rebalance.ZKRebalancerListener`) and the
one function that changes them.

States of the member (only ``_set_state`` changes them)::

    STARTING --first rebalance--> STABLE | FAILED
    STABLE --watch fired--> REBALANCING --ok--> STABLE
                                        --retries used up--> FAILED (reported; retried with backoff)
                                        --login refused--> FAILED (reported at once; no retry timer)
    any --ZooKeeper SUSPENDED--> SUSPENDED --CONNECTED (same session)--> previous state
    any --session LOST--> LOST (ownership void, owns nothing) --re-registered--> REBALANCING --ok--> STABLE
    any --shutdown--> CLOSED (terminal)
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

STARTING = "STARTING"
REBALANCING = "REBALANCING"
STABLE = "STABLE"
FAILED = "FAILED"
SUSPENDED = "SUSPENDED"
LOST = "LOST"
CLOSED = "CLOSED"

EXECUTOR_TICK_S = 1.0  # the executor wakes at least this often to check shutdown and self-check timers


class ZkMemberStates:
    """The state of a :class:`~metaq.consumer.rebalance.ZKRebalancerListener` and its transition function."""

    state: str
    _consumer_id: str

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("consumer %s: %s -> %s", self._consumer_id, self.state, state)
        self.state = state
