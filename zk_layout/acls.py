"""ACLs as Kafka's ZooKeeper-mode AclAuthorizer stores them; part of :class:`zk_layout.store.ZkLayout`.

* ``/kafka-acl/<Type>/<name>`` (literal patterns, ``*`` = every resource of the type) and
  ``/kafka-acl-extended/prefixed/<Type>/<prefix>`` (KIP-290), data ``{"version":1,"acls":[...]}``;
* after each change a sequential ``/kafka-acl-changes/acl_changes_<seq>`` (literal) or
  ``/kafka-acl-extended-changes/acl_changes_<seq>`` (prefixed) node names the resource, so every broker re-reads
  it (codecs in :mod:`zk_layout.acl_formats`).

A resource's ACLs are rewritten conditionally on the zkVersion read, together with its change notification
in one transaction, and retried on a race: two writers never lose each other's ACLs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from metaq.errors import ConfigError, StaleVersionError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import Watch, _Nodes
from zk_layout.acl_formats import (
    AclEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    decode_extended_change,
    decode_literal_change,
    encode_acls,
    encode_extended_change,
    encode_literal_change,
)

log = logging.getLogger(__name__)

UPDATE_ATTEMPTS = 20
"""Conditional rewrites of one resource before giving up: each lost race means another writer succeeded."""

_STORES = {PatternType.LITERAL: paths.ACL_LITERAL, PatternType.PREFIXED: paths.ACL_PREFIXED}
_CHANGE_STORES = {PatternType.LITERAL: paths.ACL_CHANGES, PatternType.PREFIXED: paths.ACL_EXTENDED_CHANGES}

AclUpdate = Callable[[frozenset[AclEntry]], frozenset[AclEntry]]


def acl_path(pattern: ResourcePattern) -> str:
    return paths.acl_resource_path(_STORES[pattern.pattern_type], pattern.resource_type.kafka_name, pattern.name)


class _Acls(_Nodes):
    def acls(self, pattern: ResourcePattern) -> frozenset[AclEntry]:
        """The ACLs of one resource pattern (empty if it has none)."""
        return self._versioned_acls(pattern)[0]

    def _versioned_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int | None]:
        path = acl_path(pattern)
        node = self._read(path)
        if node is None:
            return frozenset(), None
        return decode_acls(self.full_path(path), node[0]), node[1].version

    def all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        """Every resource pattern with ACLs. Unknown resource type directories (a newer Kafka's) are skipped
        with a warning; a malformed resource node raises :class:`MalformedNodeError` naming it."""
        result: dict[ResourcePattern, frozenset[AclEntry]] = {}
        for pattern_type, root in _STORES.items():
            for type_name in self._children(root):
                try:
                    resource_type = ResourceType.parse(type_name, "resource type")
                except ConfigError:
                    log.warning("ignoring %s/%s: not a resource type metaq knows", self.full_path(root), type_name)
                    continue
                for name in self._children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    acls = self.acls(pattern)
                    if acls:
                        result[pattern] = acls
        return result

    def update_acls(self, pattern: ResourcePattern, update: AclUpdate) -> frozenset[AclEntry]:
        """Replace the ACLs of ``pattern`` by ``update(current)``, conditionally on the node's zkVersion, with
        its change notification in the same transaction; an empty result deletes the node. Returns the ACLs
        written (no write, no notification if ``update`` changes nothing)."""
        path = acl_path(pattern)
        for _ in range(UPDATE_ATTEMPTS):
            current, version = self._versioned_acls(pattern)
            new = frozenset(update(current))
            if new == current:
                return current
            if self._write_acls(pattern, path, new, version):
                log.info("ACLs of %s are now %s", pattern, [entry.describe() for entry in sorted(new)] or "none")
                return new
        raise StaleVersionError(f"{self.full_path(path)} kept changing: gave up after {UPDATE_ATTEMPTS} attempts")

    def _write_acls(self, pattern: ResourcePattern, path: str, acls: frozenset[AclEntry], version: int | None) -> bool:
        """One conditional attempt; False if another writer got there first."""
        change_root = _CHANGE_STORES[pattern.pattern_type]
        self._ensure(change_root)
        if version is None:
            self._ensure(path.rsplit("/", 1)[0])
        change = (encode_literal_change(pattern) if pattern.pattern_type is PatternType.LITERAL
                  else encode_extended_change(pattern))
        with self._translated("write", path):
            tx = self._client.transaction()
            if version is None:
                tx.create(path, encode_acls(acls), acl=self._acl(path))
            elif acls:
                tx.set_data(path, encode_acls(acls), version=version)
            else:
                tx.delete(path, version=version)
            tx.create(f"{change_root}/{paths.ACL_CHANGE_PREFIX}", change, sequence=True, acl=self._acl(change_root))
            results = tx.commit()
        self._raise_if_no_auth(tx, results, f"writing the ACLs of {pattern}: ")
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        if isinstance(failure, BadVersionError | NodeExistsError | NoNodeError):
            return False
        if failure is not None:
            raise ZooKeeperError(f"writing the ACLs of {pattern} to {self.full_path(path)} failed: {failure!r}") \
                from failure
        return True

    # -- change notifications ----------------------------------------------------------------------

    def acl_changes(self, pattern_type: PatternType, watch: Watch | None = None) -> list[str]:
        """Notification names of the literal or the extended (prefixed) change store, oldest first."""
        return self._children(_CHANGE_STORES[pattern_type], watch)

    def acl_change(self, pattern_type: PatternType, name: str) -> tuple[ResourcePattern, int] | None:
        """The resource a notification names and its creation time (ms); None if purged meanwhile."""
        path = f"{_CHANGE_STORES[pattern_type]}/{name}"
        node = self._read(path)
        if node is None:
            return None
        decode = decode_literal_change if pattern_type is PatternType.LITERAL else decode_extended_change
        return decode(self.full_path(path), node[0]), node[1].ctime

    def acl_change_ctime(self, pattern_type: PatternType, name: str) -> int | None:
        """A notification's creation time (ms), readable even if its data is not; None if it is gone."""
        node = self._read(f"{_CHANGE_STORES[pattern_type]}/{name}")
        return None if node is None else int(node[1].ctime)

    def delete_acl_change(self, pattern_type: PatternType, name: str) -> bool:
        return self._delete(f"{_CHANGE_STORES[pattern_type]}/{name}")
