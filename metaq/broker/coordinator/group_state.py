"""One consumer group's membership, as Kafka's GroupMetadata.

States (only ``transition`` changes them; anything else is a bug and raises)::

    Empty ---------------join---------------> PreparingRebalance
    PreparingRebalance --all rejoined and none pending/timeout--> CompletingRebalance  (or Empty if nobody rejoined)
    CompletingRebalance --leader's SyncGroup--> Stable
    CompletingRebalance --member joins/leaves/dies--> PreparingRebalance
    Stable --member joins/leaves/dies, leader rejoins, protocols change--> PreparingRebalance
    any --offsets partition unloaded--> Dead (terminal)
    (new) Empty --restored from the offsets log (Group.restore)--> Stable

Members waiting in JoinGroup or SyncGroup hold an asyncio future that the coordinator resolves. A *pending*
member (KIP-394: handed an id with MEMBER_ID_REQUIRED, not yet back with it) holds up the join phase until it
joins or its session timeout passes, as Kafka's GroupMetadata.hasAllMembersJoined
(docs/broker-coordinated-consumer.md, "Joins wait for pending members").
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

log = logging.getLogger(__name__)

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

_ALLOWED = {
    EMPTY: {PREPARING_REBALANCE, DEAD},
    PREPARING_REBALANCE: {COMPLETING_REBALANCE, EMPTY, DEAD},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE, STABLE, DEAD},
    STABLE: {PREPARING_REBALANCE, DEAD},
    DEAD: set(),
}
_LOADED = {EMPTY: {STABLE}}
"""The one edge of :meth:`Group.restore`: a group loaded as stored at its last completed rebalance."""


@dataclass
class JoinResult:
    error_code: int
    generation_id: int = -1
    protocol_name: str | None = ""
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSummary:
    """What DescribeGroups answers: as Kafka's GroupMetadata.summary, member metadata, assignments and the
    protocol name only for a Stable group."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberSummary]


def protocols_bytes(protocols: list[tuple[str, bytes]]) -> int:
    """The size of a member's JoinGroup protocols: names and metadata."""
    return sum(len(name) + len(metadata) for name, metadata in protocols)


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat: float = 0.0
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[tuple[int, bytes]] | None = None

    @property
    def metadata_bytes(self) -> int:
        return protocols_bytes(self.protocols)

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


class Group:
    """One consumer group's membership (module docstring): owns the group's state (changed by
    :meth:`transition` only), generation, protocol, leader, its members (with their JoinGroup and SyncGroup
    waiters) and static-member ids, and the join timer of a rebalance in progress. The coordinator decides
    and stores; a Group only keeps what was decided consistent."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # ids handed out with MEMBER_ID_REQUIRED -> the loop time they expire at (their session timeout)
        self.pending_members: dict[str, float] = {}
        self.metadata_bytes = 0  # the members' protocol names and metadata (bounded, see CoordinatorConfig)
        self.join_timer: asyncio.TimerHandle | None = None
        # loop time until which the initial rebalance delay of an empty group may be extended, None when it is
        # not running; while it runs only its timer completes the join (group.initial.rebalance.delay.ms)
        self.initial_delay_until: float | None = None

    @classmethod
    def restore(cls, group_id: str, generation_id: int, protocol_type: str, protocol_name: str | None,
                leader_id: str | None, members: list[Member]) -> Group:
        """The group as stored at its last completed rebalance, Stable: a coordinator that takes it over
        (the offsets partition's leadership moved) keeps its members and their assignment, as Kafka's
        GroupMetadataManager loads it, instead of starting a generation the old members know nothing of."""
        group = cls(group_id)
        for member in members:
            group.add(member)
        group.generation_id, group.protocol_type, group.protocol_name = generation_id, protocol_type, protocol_name
        if leader_id in group.members:
            group.leader_id = leader_id
        group._change(STABLE, _LOADED)
        return group

    def transition(self, state: str) -> None:
        self._change(state, _ALLOWED)

    def _change(self, state: str, allowed: dict[str, set[str]]) -> None:
        """The one place the state changes: ``allowed`` is :data:`_ALLOWED`, or :data:`_LOADED` for a group
        restored from the offsets log."""
        if state not in allowed[self.state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state} -> {state}")
        log.info("group %s: %s -> %s (generation %d)", self.group_id, self.state, state, self.generation_id)
        self.state = state

    def is_(self, *states: str) -> bool:
        return self.state in states

    # -- members -----------------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        replaced = self.members.get(member.member_id)
        self.metadata_bytes += member.metadata_bytes - (replaced.metadata_bytes if replaced is not None else 0)
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.metadata_bytes -= member.metadata_bytes
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def add_pending(self, member_id: str, expires_at: float) -> None:
        """A member id handed out with MEMBER_ID_REQUIRED: the join phase waits for it until ``expires_at``."""
        self.pending_members[member_id] = expires_at

    def remove_pending(self, member_id: str) -> bool:
        """Forget a pending member id (it left, or expired); False if it was not pending."""
        return self.pending_members.pop(member_id, None) is not None

    def expired_pending(self, now: float) -> list[str]:
        """The pending member ids whose session timeout has passed at loop time ``now``."""
        return [member_id for member_id, expires_at in self.pending_members.items() if expires_at <= now]

    def set_protocols(self, member: Member, protocols: list[tuple[str, bytes]]) -> None:
        """A member's new JoinGroup protocols (keeping the group's metadata_bytes right)."""
        self.metadata_bytes += protocols_bytes(protocols) - member.metadata_bytes
        member.protocols = protocols

    def supports(self, protocol_type: str, protocols: list[str]) -> bool:
        """A joining member must speak the group's protocol type and share a protocol with every member."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        common = set(protocols)
        for member in self.members.values():
            common &= set(member.protocol_names())
        return bool(common)

    def select_protocol(self) -> str:
        """The protocol every member supports that gets the most votes (each member votes its first)."""
        common: set[str] | None = None
        for member in self.members.values():
            names = set(member.protocol_names())
            common = names if common is None else common & names
        candidates = common or set()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            for name in member.protocol_names():
                if name in candidates:
                    votes[name] += 1
                    break
        return max(sorted(candidates), key=lambda name: votes[name])

    def all_rejoined(self) -> bool:
        """Every member waits in JoinGroup and none is pending: a pending member is one more member about to
        join, and completing without it would make it start the next generation at once."""
        return not self.pending_members and all(
            m.join_waiter is not None and not m.join_waiter.done() for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def describe(self) -> GroupSummary:
        protocol = self.protocol_name if self.is_(STABLE) else None
        stable = protocol is not None
        members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                 m.metadata_for(protocol) if protocol is not None else b"",
                                 m.assignment if stable else b"")
                   for m in self.members.values()]
        return GroupSummary(self.group_id, self.state, self.protocol_type or "", protocol or "", members)

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members of a ``consumer`` group subscribe to (from their protocol metadata); None when
        unknown (another protocol type, or metadata that does not decode), which OffsetDelete takes as "every
        topic", as Kafka's ``isSubscribedToTopic`` does."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            chosen = [md for name, md in member.protocols if self.protocol_name in (None, name)]
            for metadata in chosen or [b""]:
                try:
                    topics.update(ConsumerProtocolSubscription.decode(metadata).topics)
                except (struct.error, ValueError, UnicodeDecodeError):
                    return None
        return topics

    def summary(self) -> dict[str, Any]:
        return {"state": self.state, "generation": self.generation_id, "protocol": self.protocol_name,
                "leader": self.leader_id, "members": sorted(self.members)}
