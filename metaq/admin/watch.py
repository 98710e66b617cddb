"""A group watched over time, for ``metaq top``: consumption rates between refreshes, how long ago each
partition's offset last moved, and a rebalance log built from owner and member changes.

    watch, source = GroupWatch("etl"), AdminGroupSource(admin)
    view = watch.update(sample_group(source, "etl", taken_s=time.monotonic(), now_ms=epoch_ms))  # every refresh
    view.partitions[0].rate, view.log[-1].text       # 120.5 (messages/s), "rebalance: clicks/0 a -> b"

:func:`sample_group` reads one :class:`Sample` (ZooKeeper, the leaders' log offsets, ``__consumer_offsets``
and, for a group that exists only in the broker's coordinator, DescribeGroups); :class:`GroupWatch` is pure
and keeps what the view needs from earlier samples.

Owners of a ZooKeeper group are its owner nodes (a claim is identified by owner and node ctime, so a member
that re-claims the same partition in a rebalance shows too); owners of a protocol group come from the members'
assignments when DescribeGroups is offered. Rates are committed-offset (and log-end) growth over the last
``rate_window_s``: a group that commits every minute shows bursts, as Burrow's window does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from metaq.admin.groups import KAFKA, ORPHAN, GroupDescription, PartitionLag, consumer_id_of_owner
from metaq.admin.log_offsets import TopicPartition
from metaq.admin.protocol_groups import ProtocolGroup, ProtocolGroupReader
from metaq.errors import GroupNotFoundError
from metaq.json_types import JsonObject

if TYPE_CHECKING:
    from metaq.admin.client import Admin

ZOOKEEPER_GROUP = "zookeeper"
PROTOCOL_GROUP = "protocol"
MAX_PARTITIONS_SHOWN = 8


@dataclass(frozen=True)
class Sample:
    """One refresh. ``claims``: owner node ctime per owned partition (ZooKeeper groups); ``protocol``: the
    coordinator's view, for a group that has no ZooKeeper node."""

    taken_s: float  # monotonic seconds, for rates
    now_ms: int  # wall clock, for ages and the log
    description: GroupDescription
    claims: Mapping[TopicPartition, int] = field(default_factory=dict)
    protocol: ProtocolGroup | None = None

    @property
    def kind(self) -> str:
        return ZOOKEEPER_GROUP if self.protocol is None else PROTOCOL_GROUP

    def members(self) -> dict[str, str | None] | None:
        """member id -> host; None when the members cannot be known (no DescribeGroups)."""
        if self.protocol is None:
            return {m.consumer_id: m.host for m in self.description.members}
        if self.protocol.members is None:
            return None
        return {m.member_id: m.host for m in self.protocol.members}

    def owners(self) -> dict[TopicPartition, str]:
        """partition -> owner: the owner thread id (ZooKeeper) or the assigned member id (protocol)."""
        if self.protocol is None:
            return {(p.topic, p.partition): p.owner for p in self.description.partitions if p.owner is not None}
        return {tp: m.member_id for m in self.protocol.members or () for tp in m.assignment}


@dataclass(frozen=True)
class MemberRow:
    member_id: str
    host: str | None
    owns: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class PartitionRow:
    """A partition as ``describe`` gives it, with the owner, the rate and the commit age top adds.
    ``commit_observed`` is True when the age is the time since top saw the offset move (Kafka-stored offsets
    carry no commit time)."""

    lag: PartitionLag
    owner: str | None
    rate: float | None
    commit_age_ms: int | None
    commit_observed: bool = False


@dataclass(frozen=True)
class LogEntry:
    time_ms: int
    text: str


@dataclass(frozen=True)
class TopView:
    group: str
    kind: str
    sampled_ms: int
    members: list[MemberRow] | None  # None: unknown
    member_note: str | None
    partitions: list[PartitionRow]
    log: list[LogEntry]
    consume_rate: float | None
    produce_rate: float | None
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the last refresh failed: the view is the one before it

    @property
    def total_lag(self) -> int:
        return sum(r.lag.lag for r in self.partitions if r.lag.lag is not None and r.lag.lag > 0)

    @property
    def orphans(self) -> list[PartitionRow]:
        return [r for r in self.partitions if r.lag.status == ORPHAN]


def short_id(group: str, member_id: str) -> str:
    """A generated consumer id without its ``<group>_`` prefix, which every member of the group shares."""
    prefix = f"{group}_"
    return member_id[len(prefix):] if member_id.startswith(prefix) and len(member_id) > len(prefix) else member_id


class GroupWatch:
    """Turns successive samples into views; see the module docstring. Not thread-safe."""

    def __init__(self, group: str, *, rate_window_s: float = 10.0, log_size: int = 200) -> None:
        self.group = group
        self.rate_window_s = rate_window_s
        self._history: deque[Sample] = deque()
        self._log: deque[LogEntry] = deque(maxlen=log_size)
        self._moved_ms: dict[TopicPartition, int] = {}
        self._last: TopView | None = None

    def update(self, sample: Sample) -> TopView:
        previous = self._history[-1] if self._history else None
        self._log.extend(initial_entries(self.group, sample) if previous is None
                         else change_entries(self.group, previous, sample))
        self._track_moves(previous, sample)
        base = self._rate_base(sample)
        self._history.append(sample)
        owners = sample.owners()
        before = {} if base is None else {(q.topic, q.partition): q.offset for q in base.description.partitions}
        seconds = 0.0 if base is None else sample.taken_s - base.taken_s
        rows = [self._row(p, sample, owners.get((p.topic, p.partition)),
                          _rate(before.get((p.topic, p.partition)), p.offset, seconds))
                for p in sample.description.partitions]
        members = sample.members()
        self._last = TopView(
            group=self.group, kind=sample.kind, sampled_ms=sample.now_ms,
            members=None if members is None else member_rows(members, owners),
            member_note=None if sample.protocol is None else sample.protocol.note,
            partitions=rows, log=list(self._log),
            consume_rate=_total_rate(base, sample, "offset"), produce_rate=_total_rate(base, sample, "log_end"),
            notes=[n for n in [sample.description.kafka_note, _migration_note(sample.description)] if n])
        return self._last

    def failed(self, error: str, now_ms: int) -> TopView | None:
        """The last view marked with ``error`` (None before the first sample); logged once per new error."""
        if self._last is None:
            return None
        if self._last.error != error:
            self._log.append(LogEntry(now_ms, f"refresh failed: {error}"))
        self._last = TopView(**{**self._last.__dict__, "log": list(self._log), "error": error})
        return self._last

    def _track_moves(self, previous: Sample | None, sample: Sample) -> None:
        if previous is None:
            return
        before = {(p.topic, p.partition): p.offset for p in previous.description.partitions}
        for p in sample.description.partitions:
            key = (p.topic, p.partition)
            if key in before and p.offset is not None and p.offset != before[key]:
                self._moved_ms[key] = sample.now_ms

    def _rate_base(self, sample: Sample) -> Sample | None:
        """The oldest earlier sample within the rate window (the previous one if all are older)."""
        while len(self._history) > 1 and sample.taken_s - self._history[0].taken_s > self.rate_window_s:
            self._history.popleft()
        return self._history[0] if self._history else None

    def _row(self, p: PartitionLag, sample: Sample, owner: str | None, rate: float | None) -> PartitionRow:
        key = (p.topic, p.partition)
        if p.last_commit_ms is not None:
            return PartitionRow(p, owner, rate, max(0, sample.now_ms - p.last_commit_ms))
        moved = self._moved_ms.get(key)
        return PartitionRow(p, owner, rate, None if moved is None else sample.now_ms - moved, moved is not None)


def member_rows(members: Mapping[str, str | None], owners: Mapping[TopicPartition, str]) -> list[MemberRow]:
    """Each member with the partitions it owns (owner thread ids ``<member>-<n>`` count for ``<member>``)."""
    owns: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for key, owner in sorted(owners.items()):
        member = owner if owner in owns else consumer_id_of_owner(owner)
        if member in owns:
            owns[member].append(key)
    return [MemberRow(m, members[m], tuple(owns[m])) for m in sorted(members)]


def _rate(then: int | None, now: int | None, seconds: float) -> float | None:
    if then is None or now is None or seconds <= 0 or now < then:
        return None
    return (now - then) / seconds


def _migration_note(description: GroupDescription) -> str | None:
    """A live migration's marker and member modes (metaq.admin.migration), shown in the header."""
    return None if description.migration is None else description.migration.render()


def _total_rate(base: Sample | None, sample: Sample, attribute: str) -> float | None:
    """The summed rate of ``attribute`` (offset or log_end) over partitions known in both samples."""
    if base is None:
        return None
    then = {(p.topic, p.partition): getattr(p, attribute) for p in base.description.partitions}
    rates = [_rate(then.get((p.topic, p.partition)), getattr(p, attribute), sample.taken_s - base.taken_s)
             for p in sample.description.partitions]
    known = [r for r in rates if r is not None]
    return sum(known) if known else None


# -- the rebalance log ----------------------------------------------------------------------------------


def initial_entries(group: str, sample: Sample) -> list[LogEntry]:
    """What the first sample tells: the group's size and, from the owner nodes' ctime, the last rebalance."""
    members = sample.members()
    size = "members unknown" if members is None else f"{len(members)} member{'' if len(members) == 1 else 's'}"
    entries = []
    if sample.claims:
        owners = sample.owners()
        claimers = {consumer_id_of_owner(o) for o in owners.values()}
        entries.append(LogEntry(max(sample.claims.values()),
                                f"last rebalance: {len(owners)} partition(s) claimed by {len(claimers)} member(s)"))
    entries.append(LogEntry(sample.now_ms, f"watching {group} ({sample.kind} group): {size}, "
                                           f"{len(sample.description.partitions)} partition(s)"))
    entries += [LogEntry(sample.now_ms, orphan_text(group, p)) for p in sample.description.partitions
                if p.status == ORPHAN]
    return entries


def change_entries(group: str, before: Sample, after: Sample) -> list[LogEntry]:
    """Members that joined or left, partitions whose claim changed, and partitions that became orphans."""
    now = after.now_ms
    entries = []
    old, new = before.members(), after.members()
    if old is not None and new is not None:
        registered = {m.consumer_id: m.registered_ms for m in after.description.members}
        entries += [LogEntry(registered.get(m) or now, f"joined: {short_id(group, m)}")
                    for m in sorted(set(new) - set(old))]
        entries += [LogEntry(now, f"left: {short_id(group, m)}") for m in sorted(set(old) - set(new))]
    elif old is None and new is not None:
        entries.append(LogEntry(now, f"members known: {len(new)}"))
    text = moves_text(owner_moves(_claims(before), _claims(after)), lambda o: _label(group, o, after.kind))
    if text:
        entries.append(LogEntry(now, f"rebalance: {text}"))
    was_orphan = {(p.topic, p.partition) for p in before.description.partitions if p.status == ORPHAN}
    entries += [LogEntry(now, orphan_text(group, p)) for p in after.description.partitions
                if p.status == ORPHAN and (p.topic, p.partition) not in was_orphan]
    return entries


Claims = Mapping[TopicPartition, tuple[str, int | None]]  # partition -> (owner, claim time)
Move = tuple[TopicPartition, str | None, str | None]


def owner_moves(before: Claims, after: Claims) -> list[Move]:
    """(partition, old owner, new owner) for every partition whose claim (owner, claim time) changed."""
    moves = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            old, new = before.get(key), after.get(key)
            moves.append((key, None if old is None else old[0], None if new is None else new[0]))
    return moves


def moves_text(moves: list[Move], label: Callable[[str | None], str]) -> str:
    """``t/2,t/3 a -> b; t/0,t/1 re-claimed by a``: the partitions of each (old owner, new owner) pair, at most
    MAX_PARTITIONS_SHOWN of them; "re-claimed" when a rebalance gave them back to the member that had them."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for (t, p), a, b in moves:
        pairs.setdefault((label(a), label(b)), []).append(f"{t}/{p}")
    parts = []
    for (old, new), keys in pairs.items():
        shown = ",".join(keys[:MAX_PARTITIONS_SHOWN]) + (
            f" (+{len(keys) - MAX_PARTITIONS_SHOWN} more)" if len(keys) > MAX_PARTITIONS_SHOWN else "")
        parts.append(f"{shown} re-claimed by {new}" if old == new and old != "-" else f"{shown} {old} -> {new}")
    return "; ".join(parts)


def orphan_text(group: str, p: PartitionLag) -> str:
    owner = "-" if p.owner is None else short_id(group, p.owner)
    return f"orphan: {p.topic}/{p.partition} owned by {owner}, which is not a live member"


def _claims(sample: Sample) -> dict[TopicPartition, tuple[str, int | None]]:
    return {key: (owner, sample.claims.get(key)) for key, owner in sample.owners().items()}


def _label(group: str, owner: str | None, kind: str) -> str:
    """The member an owner stands for, short: a ZooKeeper owner thread id without ``-<n>`` and the group."""
    if owner is None:
        return "-"
    return short_id(group, consumer_id_of_owner(owner) if kind == ZOOKEEPER_GROUP else owner)


# -- gathering ------------------------------------------------------------------------------------------


class GroupSource(Protocol):
    """What :func:`sample_group` reads; :class:`~metaq.admin.Admin` and a ProtocolGroupReader provide it."""

    def describe(self, group: str) -> GroupDescription: ...

    def group_exists(self, group: str) -> bool: ...

    def claims(self, group: str) -> dict[TopicPartition, int]: ...

    def protocol_group(self, group: str) -> ProtocolGroup: ...


class AdminGroupSource:
    """:class:`GroupSource` over an :class:`~metaq.admin.Admin` (its ZooKeeper session and broker connections)."""

    def __init__(self, admin: Admin, protocol: ProtocolGroupReader | None = None) -> None:
        self._admin = admin
        self._protocol = protocol or ProtocolGroupReader(admin.layout, security=admin.security)

    def describe(self, group: str) -> GroupDescription:
        return self._admin.describe_group(group)

    def group_exists(self, group: str) -> bool:
        return self._admin.layout.group_exists(group)

    def claims(self, group: str) -> dict[TopicPartition, int]:
        return {key: node.ctime_ms for key, node in self._admin.layout.owner_nodes(group).items()}

    def protocol_group(self, group: str) -> ProtocolGroup:
        return self._protocol.describe(group)


def sample_group(source: GroupSource, group: str, *, taken_s: float, now_ms: int) -> Sample:
    """One refresh; GroupNotFoundError when neither ZooKeeper, ``__consumer_offsets`` nor the coordinator's
    DescribeGroups (a protocol group that has not committed yet) knows the group."""
    try:
        description = source.describe(group)
    except GroupNotFoundError:
        protocol = source.protocol_group(group)
        if not protocol.members:  # unknown (no DescribeGroups), or the coordinator does not know it either
            raise
        return Sample(taken_s, now_ms, GroupDescription(group, [], [], KAFKA), protocol=protocol)
    if source.group_exists(group):
        return Sample(taken_s, now_ms, description, source.claims(group))
    return Sample(taken_s, now_ms, description, protocol=source.protocol_group(group))


def to_json(view: TopView) -> JsonObject:
    """The view for scripts (``metaq top --once --json``)."""
    return {"group": view.group, "kind": view.kind, "sampled_ms": view.sampled_ms, "total_lag": view.total_lag,
            "members": None if view.members is None else [
                {"member_id": m.member_id, "host": m.host, "owns": [list(tp) for tp in m.owns]} for m in view.members],
            "members_note": view.member_note, "orphans": len(view.orphans),
            "partitions": [{**r.lag.to_json(), "owner": r.owner, "rate": r.rate, "commit_age_ms": r.commit_age_ms}
                           for r in view.partitions],
            "log": [{"time_ms": e.time_ms, "text": e.text} for e in view.log], "notes": view.notes}
