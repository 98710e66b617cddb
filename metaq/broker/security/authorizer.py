"""The broker's ACL authorizer: Kafka's ZooKeeper-mode AclAuthorizer, same nodes, same rules.

    authorizer = Authorizer(layout, Rules(frozenset({"User:admin"}), allow_if_no_acl=False))
    authorizer.start()          # loads every ACL, then follows the change notifications
    authorizer.authorize("User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")

The cache is an immutable :class:`AclSnapshot` swapped on each change, so a request's check is a few dict
lookups without a lock. Changes come from any broker or tool through ``/kafka-acl-changes`` and
``/kafka-acl-extended-changes`` (see :mod:`zk_layout.acls`): the watch only wakes the named worker thread,
which re-reads the resource each new notification names, and purges notifications older than 15 minutes as
Kafka does. ACLs this broker writes itself (CreateAcls, DeleteAcls) are in its cache at once.

Enabled by ``authorizer.class.name`` (see :data:`AUTHORIZER_CLASS_NAMES`); empty, the default, means no
authorization at all, as in Kafka.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from metaq.errors import ConfigError, MalformedNodeError, MetaqError
from metaq.retry import zookeeper_follower
from zk_layout import ZkLayout
from zk_layout.acl_formats import (
    CLUSTER_NAME,
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
)

from .acl_rules import AclFilter, AclSnapshot, Rules

log = logging.getLogger(__name__)

AUTHORIZER_CLASS_NAMES: Final = frozenset({
    "kafka.security.authorizer.AclAuthorizer",  # Kafka 2.4+ (ZooKeeper mode)
    "kafka.security.auth.SimpleAclAuthorizer",  # Kafka up to 2.3, same ZooKeeper nodes
    "metaq.broker.security.authorizer.Authorizer",
})
"""Values of ``authorizer.class.name`` that enable this authorizer; any other non-empty value is an error."""

CHANGE_EXPIRATION_MS: Final = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener.changeExpirationMs
SAFETY_RELOAD_S: Final = 60.0  # re-read the notifications even without a watch event, in case one was missed
_STORES: Final = (PatternType.LITERAL, PatternType.PREFIXED)


def check_authorizer_class(value: str) -> str | None:
    """Config check for ``authorizer.class.name``."""
    if not value or value in AUTHORIZER_CLASS_NAMES:
        return None
    return f"must be empty (no authorization) or one of {', '.join(sorted(AUTHORIZER_CLASS_NAMES))}"


def check_super_users(value: str) -> str | None:
    """Config check for ``super.users``."""
    try:
        parse_super_users(value)
    except ConfigError as e:
        return f"has {str(e).split(': ', 1)[-1]}"
    return None


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users=User:admin;User:broker`` (Kafka separates them with ';')."""
    users = [user.strip() for user in value.split(";") if user.strip()]
    for user in users:
        kind, sep, name = user.partition(":")
        if not sep or not kind or not name:
            raise ConfigError(f"config 'super.users': entry {user!r}, which is not a principal like User:admin")
    return frozenset(users)


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry


class Authorizer:
    """ACL decisions from a cache of ZooKeeper's ACLs; thread-safe."""

    def __init__(self, layout: ZkLayout, rules: Rules) -> None:
        self._layout = layout
        self.rules = rules
        self._snapshot = AclSnapshot()
        self._lock = threading.Lock()  # serializes snapshot swaps (reads need none)
        self._last: dict[PatternType, int] = {store: -1 for store in _STORES}
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._retry = zookeeper_follower("acl_changes")
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Load every ACL (blocking), then follow changes in a named daemon thread."""
        for store in _STORES:
            names = self._layout.acl_changes(store, self._kick)
            self._last[store] = max((_sequence(name) for name in names), default=-1)
        self._reload_all()
        self._thread = threading.Thread(target=self._run, name="metaq-broker-acl-changes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _kick(self, *_: Any) -> None:
        """Watch callback (kazoo's thread): wake the worker; never blocks."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(SAFETY_RELOAD_S)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                self.process_changes()
            except MetaqError as e:
                log.warning("reading ACL changes from ZooKeeper failed (will retry): %s", e)
                self._stopped.wait(self._retry.delay(1))
                self._wake.set()

    def process_changes(self) -> None:
        """Apply every notification newer than the last one seen, then purge the expired ones."""
        for store in _STORES:
            names = self._layout.acl_changes(store, self._kick)
            fresh = [name for name in names if _sequence(name) > self._last[store]]
            for name in fresh:
                self._apply_change(store, name)
                self._last[store] = _sequence(name)
            if fresh:
                self._purge(store, names)

    def _apply_change(self, store: PatternType, name: str) -> None:
        """Re-read the resource a notification names. A malformed node is logged (naming it) and skipped, the
        ACLs read before kept: retrying cannot fix it, and dropping them could lift a Deny."""
        try:
            change = self._layout.acl_change(store, name)
        except MalformedNodeError as e:
            log.error("%s; reloading every ACL instead", e)
            try:
                self._reload_all()
            except MalformedNodeError as again:
                log.error("%s; keeping the ACLs read before", again)
            return
        if change is None:
            return
        try:
            self._reload(change[0])
        except MalformedNodeError as e:
            log.error("%s; keeping the ACLs of %s read before", e, change[0])

    def _purge(self, store: PatternType, names: list[str]) -> None:
        now = int(time.time() * 1000)
        for name in names:
            created = self._layout.acl_change_ctime(store, name)
            if created is not None and now - created <= CHANGE_EXPIRATION_MS:
                return  # later ones are younger still
            self._layout.delete_acl_change(store, name)

    def _reload_all(self) -> None:
        acls = self._layout.all_acls()
        with self._lock:
            self._snapshot = AclSnapshot(acls)
        log.info("loaded %d ACLs on %d resource patterns", len(self._snapshot), len(acls))

    def _reload(self, pattern: ResourcePattern) -> None:
        self._store(pattern, self._layout.acls(pattern))

    def _store(self, pattern: ResourcePattern, entries: frozenset[AclEntry]) -> None:
        with self._lock:
            self._snapshot = self._snapshot.replaced(pattern, entries)
        log.info("ACLs of %s reloaded: %d entries", pattern, len(entries))

    # -- decisions ---------------------------------------------------------------------------------

    @property
    def snapshot(self) -> AclSnapshot:
        return self._snapshot

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        allowed = self.rules.authorize(self._snapshot, principal, host, operation, resource_type, name)
        if not allowed:
            log.debug("denied %s from %s: %s on %s %s", principal, host, operation.kafka_name,
                      resource_type.kafka_name, name)
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        return self.rules.authorize_any(self._snapshot, principal, host, operation, resource_type)

    # -- administration (blocking: ZooKeeper writes) -----------------------------------------------

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [AclBinding(pattern, entry) for pattern, entry in acl_filter.select(self._snapshot)]

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACLs, grouped by resource (one conditional write each)."""
        grouped: dict[ResourcePattern, set[AclEntry]] = {}
        for binding in bindings:
            grouped.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in grouped.items():
            added = frozenset(entries)

            def with_added(current: frozenset[AclEntry], added: frozenset[AclEntry] = added) -> frozenset[AclEntry]:
                return current | added

            self._store(pattern, self._layout.update_acls(pattern, with_added))

    def delete(self, acl_filter: AclFilter) -> list[AclBinding]:
        """Remove the ACLs ``acl_filter`` matches; returns those removed."""
        removed: list[AclBinding] = []
        patterns = sorted(p for p in self._snapshot.by_pattern if acl_filter.matches_pattern(p))
        for pattern in patterns:
            gone: set[AclEntry] = set()

            def without(current: frozenset[AclEntry], gone: set[AclEntry] = gone) -> frozenset[AclEntry]:
                gone.clear()
                gone.update(entry for entry in current if acl_filter.matches_entry(entry))
                return current - gone

            self._store(pattern, self._layout.update_acls(pattern, without))
            removed.extend(AclBinding(pattern, entry) for entry in sorted(gone))
        return removed


def validate_binding(binding: AclBinding) -> None:
    """Kafka's checks of an ACL to create: the Cluster's only name, and a concrete permission."""
    if binding.pattern.resource_type is ResourceType.CLUSTER and binding.pattern.name != CLUSTER_NAME:
        raise ConfigError(f"the only valid name for the Cluster resource is {CLUSTER_NAME}")
    if binding.entry.permission not in (AclPermission.ALLOW, AclPermission.DENY):
        raise ConfigError("permission type must be Allow or Deny")


def _sequence(name: str) -> int:
    digits = name.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1
