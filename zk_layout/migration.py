"""The live migration of a consumer group between ZooKeeper and broker coordination (part of
:class:`zk_layout.store.ZkLayout`); docs/broker-coordinated-consumer.md, "Live migration of a ZooKeeper group".

Two kinds of node, both metaq's own (Kafka has no such thing; Kafka 0.8 consumers ignore them):

- ``/consumers/<g>/migration`` (persistent), the marker ``metaq groups migrate`` writes::

      {"version": 1, "to": "kafka", "epoch": 3, "state": "MIGRATING", "member_by_member": false, "members": []}

  ``state``: ``BRIDGING`` (towards ZooKeeper only: broker-coordinated members first become bridge members),
  ``MIGRATING`` (members switch: all of them, or with ``member_by_member`` those named in ``members``), ``DONE``.
  It stays after DONE, so that members started later and ``metaq groups describe`` know where the group went.
- ``/consumers/<g>/migration/<consumerId>`` (ephemeral), each member's current mode::

      {"version": 1, "coordination": "bridge", "epoch": 3}

  ``coordination``: ``zookeeper``, ``bridge`` (broker-coordinated while holding ZooKeeper owner nodes) or
  ``kafka``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from metaq.errors import MalformedNodeError, StaleVersionError
from zk_layout import paths
from zk_layout._nodes import Watch, _Nodes

TO_KAFKA = "kafka"
TO_ZOOKEEPER = "zookeeper"
DIRECTIONS = (TO_KAFKA, TO_ZOOKEEPER)

BRIDGING = "BRIDGING"
MIGRATING = "MIGRATING"
DONE = "DONE"
MARKER_STATES = (BRIDGING, MIGRATING, DONE)

ZOOKEEPER_MODE = "zookeeper"
BRIDGE_MODE = "bridge"
KAFKA_MODE = "kafka"
MODES = (ZOOKEEPER_MODE, BRIDGE_MODE, KAFKA_MODE)


def _dumps(body: object) -> bytes:
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")


@dataclass(frozen=True)
class MigrationMarker:
    """The ``/consumers/<g>/migration`` node (module docstring)."""

    to: str
    epoch: int
    state: str
    member_by_member: bool = False
    members: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.to not in DIRECTIONS:
            raise ValueError(f"migration target must be one of {DIRECTIONS}, got {self.to!r}")
        if self.state not in MARKER_STATES:
            raise ValueError(f"migration state must be one of {MARKER_STATES}, got {self.state!r}")

    def with_state(self, state: str) -> MigrationMarker:
        return replace(self, state=state)

    def with_member(self, consumer_id: str) -> MigrationMarker:
        return replace(self, members=tuple(sorted({*self.members, consumer_id})))

    def encode(self) -> bytes:
        return _dumps({"version": 1, "to": self.to, "epoch": self.epoch, "state": self.state,
                       "member_by_member": self.member_by_member, "members": list(self.members)})

    @classmethod
    def decode(cls, path: str, raw: bytes) -> MigrationMarker:
        try:
            body = json.loads(raw.decode("utf-8"))
            return cls(str(body["to"]), int(body["epoch"]), str(body["state"]), bool(body.get("member_by_member")),
                       tuple(str(m) for m in body.get("members", ())))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MalformedNodeError(path, raw, f"not a migration marker ({e})") from e


@dataclass(frozen=True)
class MemberMode:
    """A ``/consumers/<g>/migration/<consumerId>`` node: the member's mode and the marker epoch it acted on."""

    coordination: str
    epoch: int

    def encode(self) -> bytes:
        return _dumps({"version": 1, "coordination": self.coordination, "epoch": self.epoch})

    @classmethod
    def decode(cls, path: str, raw: bytes) -> MemberMode:
        try:
            body = json.loads(raw.decode("utf-8"))
            mode = str(body["coordination"])
            if mode not in MODES:
                raise ValueError(f"coordination {mode!r}")
            return cls(mode, int(body.get("epoch", 0)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise MalformedNodeError(path, raw, f"not a migration member mode ({e})") from e


class _Migration(_Nodes):
    def migration_marker(self, group: str, watch: Watch | None = None) -> tuple[MigrationMarker, int] | None:
        """The marker and its zkVersion, or None; ``watch`` fires when it is created, changed or deleted."""
        path = paths.migration_path(group)
        node = self._read(path, watch)
        if node is None:
            return None
        return MigrationMarker.decode(self.full_path(path), node[0]), node[1].version

    def write_migration_marker(self, group: str, marker: MigrationMarker, version: int | None) -> int:
        """Create the marker (``version`` None: StaleVersionError if one exists) or replace the one at
        ``version`` (StaleVersionError if it changed meanwhile: two commands at once). Returns the new
        zkVersion."""
        path = paths.migration_path(group)
        with self._translated("write", path):
            try:
                if version is None:
                    self._client.create(path, marker.encode(), makepath=True, acl=self._acl(path))
                    return 0
                stat = self._client.set(path, marker.encode(), version=version)
                return int(stat.version)
            except (NodeExistsError, BadVersionError, NoNodeError) as e:
                raise StaleVersionError(f"{self.full_path(path)} changed meanwhile (another migrate command?)") from e

    def set_member_mode(self, group: str, consumer_id: str, mode: MemberMode) -> None:
        """Create or update this member's ephemeral mode node (under an existing marker)."""
        path = paths.migration_member_path(group, consumer_id)
        self._create_ephemeral(path, mode.encode(), f"migration mode of {consumer_id}",
                               lambda _old: "a previous session of this consumer")

    def delete_member_mode(self, group: str, consumer_id: str) -> None:
        self._delete(paths.migration_member_path(group, consumer_id))

    def member_modes(self, group: str, watch: Watch | None = None) -> dict[str, MemberMode]:
        """consumer id -> mode of every member that wrote one (malformed nodes are left out)."""
        root = paths.migration_path(group)
        ids = self._children(root, watch)
        reads = self._read_many({cid: paths.migration_member_path(group, cid) for cid in ids})
        result: dict[str, MemberMode] = {}
        for cid, read in reads.items():
            if isinstance(read, Exception):
                continue
            try:
                result[cid] = MemberMode.decode(self.full_path(paths.migration_member_path(group, cid)), read[0])
            except MalformedNodeError:
                continue
        return result

    def read_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The committed offsets of ``partitions`` with pipelined reads, neither fencing nor watching (what a
        plain member of a migrated group compares with the coordinator's); no node, a fence's ``-1`` or a node
        that does not parse: left out."""
        nodes = {key: paths.offset_path(group, *key) for key in partitions}
        result: dict[tuple[str, int], int] = {}
        with self._translated("read", paths.offsets_path(group)):
            for key, read in self._read_many(nodes).items():
                if isinstance(read, Exception):
                    continue
                try:
                    offset = int(read[0].decode("ascii").strip())
                except (ValueError, UnicodeDecodeError):
                    continue
                if offset >= 0:
                    result[key] = offset
        return result

    def remove_owner_nodes(self, group: str) -> int:
        """Delete every owner node of the group (after a migration to broker coordination is DONE: no member
        claims them any more); returns how many were deleted."""
        deleted = 0
        for topic, partition in self._topic_partitions(paths.owners_path(group), group, paths.topic_owners_path):
            if self._delete(paths.owner_path(group, topic, partition)):
                deleted += 1
        return deleted
