"""The assignors a broker-coordinated member offers, and what KIP-429's incremental (cooperative) protocol adds.

``ConsumerProtocolSubscription`` v1–v3 (Kafka's ``ConsumerProtocolSubscription.json``) carries, after the topics
and user data, the partitions the member owns now (v1), the generation it owned them in (v2) and a rack (v3):
the sticky leader needs them. metaq writes v3, as Java 3.9's ``ConsumerProtocol.serializeSubscription`` does,
with the cooperative-sticky user data (``CooperativeStickyAssignor.subscriptionUserData``: one int32, the
generation) so that leaders that read only v1 see the generation too; it reads v0 and up (a newer version is
read as v3, as Java does)::

    data = encode_subscription(["t"], owned=[("t", 0)], generation=3, user_data=sticky_user_data(3))
    decode_subscription(data).owned                               # (("t", 0),)
    assign("cooperative-sticky", {"m1": decode_subscription(data)}, {"t": 2}, {})   # {"m1": [("t", 0), ("t", 1)]}

:func:`assign` is the leader's dispatch over every assignor name (``range``, ``roundrobin``,
``cooperative-sticky``, ``metaq-consistent-hash``); :data:`COOPERATIVE` names the ones that revoke only what
moves (docs/broker-coordinated-consumer.md, "Incremental rebalancing").
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from metaq.consumer.group_protocol import RANGE, ROUNDROBIN, Member, range_assign, roundrobin_assign
from metaq.consumer.hash_ring import NAME as CONSISTENT_HASH
from metaq.consumer.hash_ring import consistent_hash_assign
from metaq.consumer.sticky import NO_GENERATION, StickyMember, cooperative_sticky_assign
from metaq.errors import ProtocolError

COOPERATIVE_STICKY = "cooperative-sticky"
ASSIGNOR_NAMES = (RANGE, ROUNDROBIN, COOPERATIVE_STICKY, CONSISTENT_HASH)
COOPERATIVE = frozenset({COOPERATIVE_STICKY})
"""Assignors whose rebalances are incremental: a member keeps what it is assigned again, revokes only the rest."""
SUBSCRIPTION_VERSION = 3

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class MemberSubscription:
    """One member's ``ConsumerProtocolSubscription``, decoded."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: tuple[TopicPartition, ...] = ()
    generation: int = NO_GENERATION  # the GenerationId field (v2+); -1 when absent
    rack: str | None = None


def sticky_user_data(generation: int) -> bytes:
    """``COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0``: the generation this member last got an assignment in."""
    return struct.pack(">i", generation)


def _user_data_generation(user_data: bytes | None) -> int | None:
    if user_data is None:
        return None
    if len(user_data) < 4:
        return NO_GENERATION  # Java: a user data that does not parse counts as DEFAULT_GENERATION
    return int(struct.unpack_from(">i", user_data)[0])


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def encode_subscription(topics: Iterable[str], *, owned: Iterable[TopicPartition] = (),
                        generation: int = NO_GENERATION, user_data: bytes | None = None) -> bytes:
    """``ConsumerProtocolSubscription`` v3 (no rack)."""
    out = [struct.pack(">h", SUBSCRIPTION_VERSION)]
    names = sorted(set(topics))
    out.append(struct.pack(">i", len(names)))
    out.extend(_string(t) for t in names)
    out.append(struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in owned:
        by_topic.setdefault(topic, []).append(partition)
    out.append(struct.pack(">i", len(by_topic)))
    for topic, partitions in sorted(by_topic.items()):
        out.append(_string(topic) + struct.pack(f">i{len(partitions)}i", len(partitions), *sorted(partitions)))
    out.append(struct.pack(">ih", generation, -1))
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def raw(self, length: int) -> bytes:
        if length < 0 or self.at + length > len(self.data):
            raise ValueError(f"{length} bytes wanted at {self.at} of {len(self.data)}")
        value = self.data[self.at:self.at + length]
        self.at += length
        return value

    def string(self) -> str | None:
        length = self.take(">h")
        return None if length < 0 else self.raw(length).decode()

    def array(self) -> int:
        return max(self.take(">i"), 0)


def decode_subscription(data: bytes) -> MemberSubscription:
    """Any version of ``ConsumerProtocolSubscription``; ProtocolError if the bytes are not one."""
    try:
        reader = _Reader(bytes(data))
        version = reader.take(">h")
        topics = tuple(t for t in (reader.string() for _ in range(reader.array())) if t is not None)
        length = reader.take(">i")
        user_data = None if length < 0 else reader.raw(length)
        owned: list[TopicPartition] = []
        generation, rack = NO_GENERATION, None
        if version >= 1:
            for _ in range(reader.array()):
                topic = reader.string() or ""
                owned.extend((topic, reader.take(">i")) for _ in range(reader.array()))
        if version >= 2:
            generation = reader.take(">i")
        if version >= 3:
            rack = reader.string()
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"a member's subscription does not decode as ConsumerProtocolSubscription: {e}") from e
    return MemberSubscription(topics, user_data, tuple(owned), generation, rack)


def _sticky_member(subscription: MemberSubscription) -> StickyMember:
    """``CooperativeStickyAssignor.memberData``: the GenerationId field if present, else the user data's."""
    field = subscription.generation if subscription.generation >= 0 else NO_GENERATION
    encoded = _user_data_generation(subscription.user_data)
    generation = field if field >= 0 else (encoded if encoded is not None else NO_GENERATION)
    return StickyMember(subscription.topics, subscription.owned, generation, field)


def assign(name: str, subscriptions: Mapping[str, MemberSubscription], partition_counts: Mapping[str, int],
           instance_ids: Mapping[str, str | None]) -> dict[str, list[TopicPartition]]:
    """The leader's assignment with the assignor ``name`` (the group's protocol) for every member."""
    if name in (RANGE, ROUNDROBIN):
        members = {m: Member(m, instance_ids.get(m), s.topics) for m, s in subscriptions.items()}
        return (range_assign if name == RANGE else roundrobin_assign)(members, partition_counts)
    if name == COOPERATIVE_STICKY:
        return cooperative_sticky_assign({m: _sticky_member(s) for m, s in subscriptions.items()}, partition_counts)
    if name == CONSISTENT_HASH:
        names = {m: i for m, i in instance_ids.items() if i is not None}
        return consistent_hash_assign({m: s.topics for m, s in subscriptions.items()}, partition_counts, names)
    raise ProtocolError(f"unknown assignor {name!r}; metaq knows {', '.join(ASSIGNOR_NAMES)}")


@dataclass(frozen=True)
class AssignmentChange:
    """What a member's new assignment changes (``ConsumerCoordinator.onJoinComplete``)."""

    kept: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]

    @classmethod
    def of(cls, owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition]) -> AssignmentChange:
        before, after = frozenset(owned), frozenset(assigned)
        return cls(before & after, after - before, before - after)
