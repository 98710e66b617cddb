"""Changing a group's committed offsets: a plan first (the dry run), then :func:`apply_plan`.

    plan = plan_reset(layout, log_offsets, "etl", {"clicks": None}, ResetSpec.to_datetime("2024-05-01T12:00Z"))
    for change in plan.changes:
        print(change.topic, change.partition, change.current, "->", change.new, change.note)
    apply_plan(layout, plan)                 # GroupActiveError while the group has live members
    apply_plan(layout, plan, force=True)     # members lose the partitions' commit fences and rebalance

New offsets are clamped to ``[log start, log end]`` with a note, so a reset never leaves the group
out of range. Applying refuses while the group has live members (checked again at apply time), because a
member would go on from its own position and overwrite the change; Kafka's tools demand the same
("stop the group first"). Imports (:mod:`metaq.admin.transfer`) build the same kind of plan.

Given a :class:`~metaq.client.group_offsets.GroupOffsetsStore`, a group's current offset is
``max(zookeeper, kafka)`` (what its consumers resume from), and a group that has offsets in
``__consumer_offsets`` gets the new offsets committed there too, before ZooKeeper, so that a rewind is not
undone by that max. The coordinator refuses such a commit while a standard client group has live
protocol members; that refusal fails the apply (GroupActiveError) and nothing is written to ZooKeeper.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from metaq.admin.groups import merged_offset, topic_partitions
from metaq.admin.log_offsets import LogOffsets, TopicPartition, Watermarks
from metaq.admin.timefmt import format_ms
from metaq.client.group_offsets import LIVE_GROUP_ERRORS, GroupOffsetsStore, error_name
from metaq.errors import (
    ConfigError,
    GroupActiveError,
    GroupNotFoundError,
    MalformedNodeError,
    MetaqError,
    UnknownTopicError,
)
from metaq.json_types import JsonObject
from zk_layout import ZkLayout, validate_topic

EARLIEST = "earliest"
LATEST = "latest"
TO_OFFSET = "offset"
TO_DATETIME = "datetime"
SHIFT_BY = "shift"
TO_CURRENT = "current"
# java.time.Duration's text (what kafka-consumer-groups --by-duration parses): PnDTnHnMn.nS, e.g. PT10M, P1DT2H
_DURATION = re.compile(r"(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?"
                       r"(?:(?P<s>[-+]?\d+(?:\.\d{1,9})?)S)?)?", re.IGNORECASE)

Progress = Callable[[int], None]
"""Called with the number of items just done (a progress bar's ``update``)."""


@dataclass(frozen=True)
class ResetSpec:
    """Where to move offsets; ``value`` is the offset, the time in epoch ms, or the shift::

    ResetSpec.earliest(); ResetSpec.latest(); ResetSpec.to_offset(1200)
    ResetSpec.to_datetime("2024-05-01T12:00:00Z"); ResetSpec.shift_by(-100)
    """

    mode: str
    value: int | None = None

    @classmethod
    def earliest(cls) -> ResetSpec:
        return cls(EARLIEST)

    @classmethod
    def latest(cls) -> ResetSpec:
        return cls(LATEST)

    @classmethod
    def to_offset(cls, offset: int) -> ResetSpec:
        if offset < 0:
            raise ConfigError(f"--to-offset {offset}: an offset must be >= 0")
        return cls(TO_OFFSET, offset)

    @classmethod
    def to_datetime(cls, when: str | dt.datetime) -> ResetSpec:
        return cls(TO_DATETIME, parse_datetime(when))

    @classmethod
    def shift_by(cls, delta: int) -> ResetSpec:
        return cls(SHIFT_BY, delta)

    @classmethod
    def to_current(cls) -> ResetSpec:
        """The committed offset (a no-op write, e.g. to export a plan); the log end where there is none, as
        kafka-consumer-groups --to-current does."""
        return cls(TO_CURRENT)

    @classmethod
    def by_duration(cls, text: str, now_ms: int | None = None) -> ResetSpec:
        """``--by-duration PT10M``: the first offset at or after now minus the duration (a time reset)."""
        ms = parse_duration_ms(text)
        return cls(TO_DATETIME, (int(time.time() * 1000) if now_ms is None else now_ms) - ms)

    def describe(self) -> str:
        if self.mode == TO_DATETIME:
            return f"reset to {format_ms(self.value)}"
        if self.mode == SHIFT_BY:
            return f"shift by {self.value:+d}"
        if self.mode == TO_CURRENT:
            return "reset to current"
        return f"reset to {self.mode if self.value is None else f'offset {self.value}'}"


@dataclass(frozen=True)
class OffsetChange:
    """One partition of a plan. ``new`` is None when the partition is left as it is (``note`` says why)."""

    group: str
    topic: str
    partition: int
    current: int | None
    new: int | None
    log_start: int | None = None
    log_end: int | None = None
    note: str = ""

    def to_json(self) -> JsonObject:
        return {"group": self.group, "topic": self.topic, "partition": self.partition, "current": self.current,
                "new": self.new, "log_start_offset": self.log_start, "log_end_offset": self.log_end,
                "note": self.note}


@dataclass(frozen=True)
class OffsetPlan:
    """What an offset change would write, and the live members found when it was planned."""

    action: str
    changes: list[OffsetChange]
    live_members: dict[str, list[str]]

    @property
    def writes(self) -> list[OffsetChange]:
        return [c for c in self.changes if c.new is not None]

    @property
    def groups(self) -> list[str]:
        return sorted({c.group for c in self.changes})

    def to_json(self) -> JsonObject:
        return {"action": self.action, "live_members": self.live_members,
                "changes": [c.to_json() for c in self.changes]}


# -- pure parts -------------------------------------------------------------------------------------


def parse_datetime(when: str | dt.datetime) -> int:
    """ISO 8601 to epoch ms. Without a UTC offset the time is local, as Kafka's ``--to-datetime`` reads it."""
    if isinstance(when, str):
        try:
            when = dt.datetime.fromisoformat(when.strip())
        except ValueError as e:
            raise ConfigError(f"--to-datetime {when!r}: not an ISO 8601 time such as 2024-05-01T12:00:00Z") from e
    if when.tzinfo is None:
        when = when.astimezone()  # the local zone
    return int(when.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """java.time.Duration's ISO 8601 form (``PT10M``, ``P1DT2H30M``, ``PT0.5S``), which Kafka's --by-duration
    reads with Duration.parse, in ms; ConfigError otherwise, and for a negative duration (a time to come)."""
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or not any(match[g] for g in ("d", "h", "m", "s")):
        raise ConfigError(f"--by-duration {text!r}: expected an ISO 8601 duration such as PT10M, PT1H or P1DT12H")
    seconds = (int(match["d"] or 0) * 86400 + int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60
               + float(match["s"] or 0))
    ms = int(round(seconds * 1000)) * (-1 if match["sign"] == "-" else 1)
    if ms < 0:
        raise ConfigError(f"--by-duration {text!r}: the duration must not be negative")
    return ms


def parse_topic_selection(text: str) -> tuple[str, list[int] | None]:
    """``clicks`` -> (``clicks``, None: every partition); ``clicks:0,2`` -> (``clicks``, [0, 2])."""
    topic, colon, rest = text.partition(":")
    validate_topic(topic)
    if not colon:
        return topic, None
    try:
        partitions = sorted({int(p) for p in rest.split(",") if p.strip()})
    except ValueError as e:
        raise ConfigError(f"--topic {text!r}: partitions must be numbers, e.g. {topic}:0,1") from e
    if not partitions or partitions[0] < 0:
        raise ConfigError(f"--topic {text!r}: give partitions as {topic}:0,1")
    return topic, partitions


def target_offset(spec: ResetSpec, current: int | None, marks: Watermarks,
                  by_time: int | None = None) -> tuple[int | None, str]:
    """The new offset for one partition and a note; clamped to ``[log start, log end]``."""
    assert marks.start is not None and marks.end is not None
    if spec.mode == EARLIEST:
        wanted = marks.start
    elif spec.mode == LATEST:
        wanted = marks.end
    elif spec.mode == TO_OFFSET:
        wanted = int(spec.value or 0)
    elif spec.mode == TO_DATETIME:
        wanted = marks.end if by_time is None else by_time
    elif spec.mode == SHIFT_BY:
        if current is None:
            return None, "no committed offset to shift; left unchanged"
        wanted = current + int(spec.value or 0)
    elif spec.mode == TO_CURRENT:
        if current is None:
            return marks.end, "no committed offset: the log end"
        wanted = current
    else:
        raise ConfigError(f"unknown reset mode {spec.mode!r}")
    if wanted < marks.start:
        return marks.start, f"clamped to log start {marks.start} (asked for {wanted})"
    if wanted > marks.end:
        return marks.end, f"clamped to log end {marks.end} (asked for {wanted})"
    return wanted, ""


def zookeeper_offset(layout: ZkLayout, group: str, topic: str, partition: int) -> tuple[int | None, str]:
    """The offset in ZooKeeper and a note. A node that holds no offset (e.g. ``-5``) reads as none, with a
    note naming it: a reset or an import is how an operator repairs it, so it must not fail on it."""
    try:
        return layout.read_offset(group, topic, partition), ""
    except MalformedNodeError as e:
        return None, f"replaces malformed node {e.path} ({e.reason})"


def join_notes(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


# -- reset ------------------------------------------------------------------------------------------------


def plan_reset(
    layout: ZkLayout,
    log_offsets: LogOffsets,
    group: str,
    selection: Mapping[str, list[int] | None],
    spec: ResetSpec,
    *,
    create_group: bool = False,
    kafka: GroupOffsetsStore | None = None,
    all_topics: bool = False,
    requested: Mapping[TopicPartition, int] | None = None,
) -> OffsetPlan:
    """The dry run of a reset of ``selection`` (topic -> partitions, None for all; with ``all_topics``, every
    topic the group has offsets for). Nothing is written. ``requested``: a plan read from a file (partition ->
    offset; ``selection`` and ``spec`` are then ignored), each offset clamped to the log as ``--to-offset``,
    as kafka-consumer-groups --from-file does.

    A group that does not exist (in ZooKeeper, nor in ``kafka``) raises GroupNotFoundError unless
    ``create_group`` (to start a new group at a chosen position, e.g. latest)."""
    in_kafka = kafka_offsets_of(kafka, [group])[group]
    if not create_group and not in_kafka and not layout.group_exists(group):
        raise GroupNotFoundError(f"group {group!r} does not exist; to prepare offsets for a new group, "
                                 "use --create-group (create_group=True)")
    if requested is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in requested:
            by_topic.setdefault(topic, []).append(partition)
        selection = {t: sorted(ps) for t, ps in by_topic.items()}
    elif all_topics:  # kafka-consumer-groups --all-topics: every topic the group has offsets for, that exists
        known = set(layout.topics())
        selection = {t: None for t in sorted({t for t, _ in [*layout.offsets(group), *in_kafka]} & known)}
        if not selection:
            raise ConfigError(f"group {group!r} has no committed offsets of an existing topic: give --topic")
    keys = selected_partitions(layout, selection)
    marks = log_offsets.watermarks(keys)
    unknown = {k: m for k, m in marks.items() if not m.known}
    if unknown:
        (topic, partition), first = sorted(unknown.items())[0]
        raise MetaqError(f"cannot reset: the log offsets of {topic}-{partition} are unknown ({first.error})"
                         + (f" and of {len(unknown) - 1} more partitions" if len(unknown) > 1 else ""))
    by_time = (log_offsets.offsets_for_time(keys, int(spec.value or 0))
               if spec.mode == TO_DATETIME and requested is None else {})
    changes = []
    for topic, partition in keys:
        in_zookeeper, malformed = zookeeper_offset(layout, group, topic, partition)
        current, _ = merged_offset(in_zookeeper, in_kafka.get((topic, partition)))
        m = marks[(topic, partition)]
        wanted = spec if requested is None else ResetSpec.to_offset(requested[(topic, partition)])
        new, note = target_offset(wanted, current, m, by_time.get((topic, partition)))
        changes.append(OffsetChange(group, topic, partition, current, new, m.start, m.end, join_notes(note, malformed)))
    action = spec.describe() if requested is None else "reset from file"
    return OffsetPlan(action, changes, {group: layout.consumer_ids(group)})


def merge_plans(plans: Iterable[OffsetPlan]) -> OffsetPlan:
    """One plan of several groups' (``--all-groups``, several ``--group``), applied as one."""
    plans = list(plans)
    actions = sorted({p.action for p in plans})
    return OffsetPlan(", ".join(actions) or "reset", [c for p in plans for c in p.changes],
                      {g: ids for p in plans for g, ids in p.live_members.items()})


def selected_partitions(layout: ZkLayout, selection: Mapping[str, list[int] | None]) -> list[TopicPartition]:
    if not selection:
        raise ConfigError("give at least one --topic")
    existing = topic_partitions(layout, selection)
    keys = []
    for topic, wanted in selection.items():
        if topic not in existing:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        missing = sorted(set(wanted or []) - set(existing[topic]))
        if missing:
            raise ConfigError(f"topic {topic!r} has partitions 0..{len(existing[topic]) - 1}; "
                              f"{missing[0]} does not exist")
        keys += [(topic, p) for p in (existing[topic] if wanted is None else wanted)]
    return sorted(keys)


# -- applying ---------------------------------------------------------------------------------------------


def live_members(layout: ZkLayout, groups: Iterable[str]) -> dict[str, list[str]]:
    """group -> registered consumer ids, for the groups that have any."""
    found = {g: layout.consumer_ids(g) for g in groups}
    return {g: ids for g, ids in found.items() if ids}


def kafka_offsets_of(kafka: GroupOffsetsStore | None, groups: Iterable[str]) -> dict[str, dict[TopicPartition, int]]:
    """group -> its offsets in ``__consumer_offsets`` (empty without ``kafka`` or that topic). An unreachable
    coordinator raises: a plan that ignored the Kafka offsets could be undone by them."""
    groups = list(groups)
    if kafka is None or not kafka.available():
        return {g: {} for g in groups}
    return {g: kafka.fetch(g) for g in groups}


def apply_plan(layout: ZkLayout, plan: OffsetPlan, *, force: bool = False, progress: Progress | None = None,
               kafka: GroupOffsetsStore | None = None, kafka_groups: list[str] | None = None) -> list[OffsetChange]:
    """Write the plan's new offsets; returns what was written.

    Refuses (GroupActiveError) while a group in the plan has live members, unless ``force``: then the
    members' next commits fail their fence and they rebalance onto the new offsets. With ``kafka``, the
    writes of each group that has offsets in ``__consumer_offsets`` are committed there first (the groups
    are appended to ``kafka_groups``); a partition the coordinator refuses fails the apply before that
    group's ZooKeeper writes.
    """
    active = live_members(layout, plan.groups)
    if active and not force:
        group, ids = sorted(active.items())[0]
        raise GroupActiveError(
            f"group {group!r} has {len(ids)} live member{'s' if len(ids) > 1 else ''} ({', '.join(ids[:3])}"
            f"{', ...' if len(ids) > 3 else ''}); stop them first, or use --force to write anyway")
    in_kafka = kafka_offsets_of(kafka, plan.groups)
    written = []
    for group in plan.groups:
        writes = [c for c in plan.writes if c.group == group]
        if kafka is not None and in_kafka[group] and writes:
            _commit_to_kafka(kafka, group, {(c.topic, c.partition): c.new for c in writes if c.new is not None})
            if kafka_groups is not None:
                kafka_groups.append(group)
        for change in writes:
            assert change.new is not None
            layout.write_offset(change.group, change.topic, change.partition, change.new)
            written.append(change)
            if progress is not None:
                progress(1)
    return written


def _commit_to_kafka(kafka: GroupOffsetsStore, group: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Commit over the offsets channel; GroupActiveError / MetaqError naming the partitions refused."""
    codes = kafka.commit(group, offsets)
    failed = {key: code for key, code in sorted(codes.items()) if code}
    if not failed:
        return
    listed = ", ".join(f"{t}-{p}: {error_name(code)}" for (t, p), code in list(failed.items())[:5])
    more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
    if set(failed.values()) <= LIVE_GROUP_ERRORS:
        raise GroupActiveError(
            f"group {group!r} has live members in the Kafka group protocol: its coordinator refused the new "
            f"offsets ({listed}{more}); stop its consumers first (--force cannot override this). "
            "Nothing was written for this group")
    raise MetaqError(f"the coordinator of group {group!r} refused the new offsets of {len(failed)} partition(s) "
                     f"({listed}{more}); nothing was written for this group")
