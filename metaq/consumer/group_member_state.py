"""The states of a broker-coordinated member (:class:`metaq.consumer.coordination.GroupMember`), the one function
that changes them, the generation it joined and the coordinator's answers that end that generation.

States of the member (only ``_set_state`` changes them)::

    UNJOINED --first rebalance--> JOINING --JoinGroup answered--> SYNCING --SyncGroup answered--> STABLE
    STABLE --heartbeat: REBALANCE_IN_PROGRESS--> (pause fetchers, commit, revoke) JOINING
    SYNCING --REBALANCE_IN_PROGRESS / UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION--> JOINING
    any --fenced (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID on a heartbeat or a commit),
          no heartbeat answered for session.timeout.ms, or max.poll.interval.ms exceeded--> LOST
    LOST --(nothing committed) rejoin--> JOINING
    JOINING|SYNCING --rebalance.max.retries failed attempts--> FAILED (reported; retried with backoff)
    any --shutdown--> CLOSED (terminal)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from metaq.client.offsets_channel import look_again
from metaq.consumer.offset_store import TopicPartition
from metaq.errors import CoordinatorError, ErrorCode, MetaqError, for_code

log = logging.getLogger(__name__)

UNJOINED = "UNJOINED"
JOINING = "JOINING"
SYNCING = "SYNCING"
STABLE = "STABLE"
CLAIMING = "CLAIMING"  # a bridge member of a live migration claiming ZooKeeper owner nodes (metaq.consumer.migration)
LOST = "LOST"
FAILED = "FAILED"
CLOSED = "CLOSED"
FENCING_CODES = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID})
"""Answers that say this member's generation (or its membership) is over: what it owned is someone else's."""
REFUSED_COMMIT_CODES = FENCING_CODES | {ErrorCode.REBALANCE_IN_PROGRESS}
"""OffsetCommit answers after which the partitions are not ours to commit any more (never retried)."""
NO_MEMBER_ID = ""


@dataclass(frozen=True)
class Generation:
    """The group generation this member joined (Kafka's ``AbstractCoordinator.Generation``)."""

    generation_id: int
    member_id: str
    protocol: str | None


NO_GENERATION = Generation(-1, NO_MEMBER_ID, None)


class _Restart(Exception):
    """The protocol asks for another JoinGroup at once (not a failed attempt): a member id was assigned, a
    rebalance began during the SyncGroup, or the coordinator forgot this member."""


class GroupMemberError(MetaqError):
    """The coordinator refused this member for good (e.g. FENCED_INSTANCE_ID on JoinGroup: another process
    runs with the same ``group.instance.id``)."""


def _raise_for(code: int, context: str) -> None:
    if not code:
        return
    if look_again(code):
        raise CoordinatorError(code, context)
    cls = for_code(code)
    raise cls(f"{cls.message} ({code}) {context}")


def _grouped(keys: Iterable[TopicPartition]) -> dict[str, set[int]]:
    grouped: dict[str, set[int]] = {}
    for topic, partition in keys:
        grouped.setdefault(topic, set()).add(partition)
    return grouped


class MemberStates:
    """The state of a :class:`~metaq.consumer.coordination.GroupMember` and its transition function."""

    state: str
    generation_info: Generation
    _consumer_id: str
    _group: str

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("consumer %s: %s -> %s (group %s, generation %d)", self._consumer_id, self.state, state,
                     self._group, self.generation_info.generation_id)
        self.state = state
