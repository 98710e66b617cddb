"""``metaq groups migrate GROUP --to kafka|zookeeper``: the operator's side of a live migration.

docs/broker-coordinated-consumer.md, "Live migration of a ZooKeeper group", is the design; the members' side
is metaq.consumer.migration. The command only writes the marker ``/consumers/<g>/migration`` and waits for
what the members report (their mode nodes, and the coordinator's member list)::

    result = migrate_group(layout, "etl", "kafka", coordinators=BrokerGroups(layout))
    result.pause_s        # from the marker to every member reporting its new mode

Towards kafka: MIGRATING (every member, or one at a time, becomes a bridge member) -> every registration's
member reports ``bridge`` -> DONE (bridges become plain broker members and unregister) -> no registration
left -> the owner nodes are removed (offset nodes stay, for a rollback). Towards zookeeper: BRIDGING (every
broker member becomes a bridge) -> the coordinator's members are all bridges -> MIGRATING (bridges become
ZooKeeper members) -> every registration reports ``zookeeper`` and the coordinator has no member -> DONE.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from metaq.admin.broker_groups import CoordinatorGroups
from metaq.errors import MetaqError
from metaq.json_types import JsonObject
from zk_layout import ZkLayout
from zk_layout.migration import (
    BRIDGE_MODE,
    BRIDGING,
    DIRECTIONS,
    DONE,
    MIGRATING,
    TO_KAFKA,
    ZOOKEEPER_MODE,
    MemberMode,
    MigrationMarker,
)

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often the command re-reads the members' reports while waiting


class MigrationError(MetaqError):
    """The migration did not reach the next step in time (a member that cannot switch: a Kafka 0.8 consumer,
    a wildcard subscription, a member without ZooKeeper); the marker stays where it got to."""


@dataclass(frozen=True)
class MigrationStep:
    """One state the command wrote and how long the members took to follow it."""

    state: str
    seconds: float
    members: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        return {"state": self.state, "seconds": round(self.seconds, 3), "members": list(self.members)}


@dataclass
class MigrationResult:
    group: str
    to: str
    epoch: int
    steps: list[MigrationStep] = field(default_factory=list)
    owner_nodes_removed: int = 0

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)

    def to_json(self) -> JsonObject:
        return {"group": self.group, "to": self.to, "epoch": self.epoch, "state": DONE,
                "seconds": round(self.seconds, 3), "steps": [s.to_json() for s in self.steps],
                "owner_nodes_removed": self.owner_nodes_removed}


@dataclass(frozen=True)
class GroupModes:
    """What the command waits on: each registered member's mode, and the coordinator's members."""

    registered: tuple[str, ...]
    modes: Mapping[str, MemberMode]
    broker_members: int

    def mode_of(self, consumer_id: str) -> str | None:
        mode = self.modes.get(consumer_id)
        return None if mode is None else mode.coordination

    def all_registered_in(self, mode: str) -> bool:
        return all(self.mode_of(cid) == mode for cid in self.registered)

    def bridges(self) -> int:
        return sum(1 for m in self.modes.values() if m.coordination == BRIDGE_MODE)


@dataclass(frozen=True)
class MigrationView:
    """What ``metaq groups describe`` shows of a group's migration: the marker and each member's mode."""

    to: str
    epoch: int
    state: str
    member_by_member: bool
    modes: dict[str, str]

    def to_json(self) -> JsonObject:
        return {"to": self.to, "epoch": self.epoch, "state": self.state, "member_by_member": self.member_by_member,
                "members": dict(sorted(self.modes.items()))}

    def render(self) -> str:
        members = ", ".join(f"{cid} {mode}" for cid, mode in sorted(self.modes.items())) or "none reported"
        how = "member by member" if self.member_by_member else "all at once"
        return f"Migration to {self.to} (epoch {self.epoch}, {how}): {self.state}; member modes: {members}"


def migration_view(layout: ZkLayout, group: str) -> MigrationView | None:
    """The marker and the members' modes, or None if the group was never migrated."""
    found = layout.migration_marker(group)
    if found is None:
        return None
    marker = found[0]
    modes = {cid: mode.coordination for cid, mode in layout.member_modes(group).items()}
    return MigrationView(marker.to, marker.epoch, marker.state, marker.member_by_member, modes)


def read_modes(layout: ZkLayout, group: str, coordinators: CoordinatorGroups | None) -> GroupModes:
    registered = tuple(layout.consumer_ids(group))
    modes = layout.member_modes(group)
    members = 0
    if coordinators is not None:
        described = coordinators.list().groups.get(group)
        members = 0 if described is None else len(described.members)
    return GroupModes(registered, modes, members)


def migrate_group(layout: ZkLayout, group: str, to: str, *, member_by_member: bool = False,
                  coordinators: CoordinatorGroups | None = None, timeout_s: float = 120.0,
                  on_step: Callable[[MigrationStep], None] | None = None) -> MigrationResult:
    """Run the migration to ``to`` (kafka or zookeeper) to DONE; MigrationError if a step is not reached within
    ``timeout_s``. ``coordinators`` (the brokers' DescribeGroups) is needed towards zookeeper, to know when
    every broker member has become a bridge."""
    if to not in DIRECTIONS:
        raise MetaqError(f"--to must be one of {', '.join(DIRECTIONS)}, got {to!r}")
    if not layout.group_exists(group):
        raise MetaqError(f"group {group!r} has no /consumers node in ZooKeeper: nothing to migrate")
    found = layout.migration_marker(group)
    if found is not None and found[0].state != DONE and found[0].to != to:
        log.info("group %s: reversing the migration under way (to %s, %s)", group, found[0].to, found[0].state)
    epoch = 1 if found is None else found[0].epoch + 1
    first = BRIDGING if to != TO_KAFKA else MIGRATING
    marker = MigrationMarker(to, epoch, first, member_by_member)
    driver = _Driver(layout, group, marker, None if found is None else found[1], coordinators, timeout_s, on_step)
    result = MigrationResult(group, to, epoch)
    if to == TO_KAFKA:
        driver.write(marker)
        result.steps.append(driver.switch_members(BRIDGE_MODE))
        driver.write(driver.marker.with_state(DONE))
        result.steps.append(driver.wait(DONE, lambda m: not m.registered, "every member to leave ZooKeeper"))
        result.owner_nodes_removed = layout.remove_owner_nodes(group)
    else:
        driver.write(marker)
        result.steps.append(driver.wait(BRIDGING, lambda m: m.broker_members <= m.bridges()
                                        and all(x.coordination == BRIDGE_MODE for x in m.modes.values()),
                                        "every broker member to become a bridge"))
        driver.write(driver.marker.with_state(MIGRATING))
        result.steps.append(driver.switch_members(ZOOKEEPER_MODE))
        driver.write(driver.marker.with_state(DONE))
        result.steps.append(driver.wait(DONE, lambda m: m.broker_members == 0, "the broker group to empty"))
    return result


class _Driver:
    """The marker as this command last wrote it (version-checked: two commands at once fail) and the waits."""

    def __init__(self, layout: ZkLayout, group: str, marker: MigrationMarker, version: int | None,
                 coordinators: CoordinatorGroups | None, timeout_s: float,
                 on_step: Callable[[MigrationStep], None] | None) -> None:
        self._layout = layout
        self._group = group
        self.marker = marker
        self._version = version
        self._coordinators = coordinators
        self._timeout_s = timeout_s
        self._on_step = on_step

    def write(self, marker: MigrationMarker) -> None:
        self._version = self._layout.write_migration_marker(self._group, marker, self._version)
        self.marker = marker
        log.info("group %s: migration marker %s", self._group, marker)

    def wait(self, state: str, done: Callable[[GroupModes], bool], what: str) -> MigrationStep:
        started = time.monotonic()
        deadline = started + self._timeout_s
        while True:
            modes = read_modes(self._layout, self._group, self._coordinators)
            if done(modes):
                step = MigrationStep(state, time.monotonic() - started, modes.registered)
                if self._on_step is not None:
                    self._on_step(step)
                return step
            if time.monotonic() > deadline:
                waiting = {cid: modes.mode_of(cid) for cid in modes.registered}
                raise MigrationError(f"group {self._group}: {what} took longer than {self._timeout_s:.0f}s "
                                     f"(marker {self.marker.state}; registered members' modes {waiting}, "
                                     f"{modes.broker_members} broker member(s))")
            time.sleep(POLL_S)

    def switch_members(self, mode: str) -> MigrationStep:
        """MIGRATING: all at once, or (member by member) each registration named in the marker in turn, the
        next one once the last reported its new mode (members registered meanwhile are named too)."""
        if not self.marker.member_by_member:
            return self.wait(self.marker.state, lambda m: bool(m.registered) and m.all_registered_in(mode),
                             f"every member to become a {mode} member")
        started = time.monotonic()
        while True:
            pending = [cid for cid in self._layout.consumer_ids(self._group) if cid not in self.marker.members]
            if not pending:
                break
            self.write(self.marker.with_member(pending[0]))
            self.wait(self.marker.state, partial(_switched, pending[0], mode),
                      f"{pending[0]} to become a {mode} member")
        return MigrationStep(self.marker.state, time.monotonic() - started, self.marker.members)


def _switched(consumer_id: str, mode: str, modes: GroupModes) -> bool:
    """The member reports ``mode``, or is gone."""
    return consumer_id not in modes.registered or modes.mode_of(consumer_id) == mode
