"""Kafka's AclAuthorizer decision rules over an immutable set of ACLs: pure code, no ZooKeeper.

    snapshot = AclSnapshot({ResourcePattern(ResourceType.TOPIC, "orders"): {AclEntry("User:alice", "*",
                            AclOperation.READ, AclPermission.ALLOW)}})
    Rules(frozenset(), allow_if_no_acl=False).authorize(snapshot, "User:alice", "10.0.0.1",
                                                        AclOperation.DESCRIBE, ResourceType.TOPIC, "orders")  # True

The ACLs that apply to a resource are those of its literal pattern, of the literal wildcard ``*`` and of every
prefixed pattern its name starts with. A super user may do anything. Otherwise a matching Deny wins; then, if
no ACL at all applies to the resource, ``allow.everyone.if.no.acl.found`` decides; else a matching Allow is
needed. An ACL matches a principal given exactly or as ``User:*``, a host given exactly or as ``*``, and an
operation given exactly or as ``All``; an Allow of Read, Write, Delete or Alter also allows Describe, and an
Allow of AlterConfigs allows DescribeConfigs (Kafka's implied operations).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from zk_layout.acl_formats import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
)

_IMPLIED: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


class AclSnapshot:
    """Every ACL, indexed for the per-request lookup; never changed once built (the cache swaps snapshots)."""

    def __init__(self, acls: Mapping[ResourcePattern, Iterable[AclEntry]] | None = None) -> None:
        self.by_pattern: dict[ResourcePattern, frozenset[AclEntry]] = {
            pattern: frozenset(entries) for pattern, entries in (acls or {}).items() if entries}
        self._prefixes: dict[ResourceType, dict[str, frozenset[AclEntry]]] = {}
        for pattern, entries in self.by_pattern.items():
            if pattern.pattern_type is PatternType.PREFIXED:
                self._prefixes.setdefault(pattern.resource_type, {})[pattern.name] = entries

    def replaced(self, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> AclSnapshot:
        """A new snapshot with the ACLs of ``pattern`` replaced (removed if ``entries`` is empty)."""
        acls = dict(self.by_pattern)
        acls[pattern] = frozenset(entries)
        return AclSnapshot(acls)

    def applicable(self, resource_type: ResourceType, name: str) -> Iterator[AclEntry]:
        """The ACLs that apply to one resource: literal, literal wildcard and every matching prefix."""
        for literal in (name, WILDCARD):
            yield from self.by_pattern.get(ResourcePattern(resource_type, literal), ())
        prefixes = self._prefixes.get(resource_type)
        if prefixes:
            for end in range(1, len(name) + 1):
                yield from prefixes.get(name[:end], ())

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.by_pattern.values())


def _applies_to(entry: AclEntry, principal: str, host: str) -> bool:
    return entry.principal in (principal, WILDCARD_PRINCIPAL) and entry.host in (host, WILDCARD)


def _allows(entry: AclEntry, operation: AclOperation) -> bool:
    return (entry.operation in (operation, AclOperation.ALL)
            or entry.operation in _IMPLIED.get(operation, frozenset()))


def _denies(entry: AclEntry, operation: AclOperation) -> bool:
    return entry.operation in (operation, AclOperation.ALL)


@dataclass(frozen=True)
class Rules:
    """The two broker settings that shape a decision: ``super.users`` and ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str]
    allow_if_no_acl: bool = False

    def authorize(self, snapshot: AclSnapshot, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = list(snapshot.applicable(resource_type, name))
        mine = [entry for entry in acls if _applies_to(entry, principal, host)]
        if any(entry.permission is AclPermission.DENY and _denies(entry, operation) for entry in mine):
            return False
        if not acls and self.allow_if_no_acl:
            return True
        return any(entry.permission is AclPermission.ALLOW and _allows(entry, operation) for entry in mine)

    def authorize_any(self, snapshot: AclSnapshot, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether ``operation`` is allowed on at least one resource of the type (Kafka's
        ``authorizeByResourceType``, used for an idempotent producer's InitProducerId): some Allow pattern
        that no Deny covers (a Deny on the wildcard, on the same literal or on a prefix of its name)."""
        if principal in self.super_users:
            return True
        mine = {pattern: [e for e in entries if _applies_to(e, principal, host)]
                for pattern, entries in snapshot.by_pattern.items() if pattern.resource_type is resource_type}
        denied = [pattern for pattern, entries in mine.items()
                  if any(e.permission is AclPermission.DENY and _denies(e, operation) for e in entries)]
        if any(p.name == WILDCARD and p.pattern_type is PatternType.LITERAL for p in denied):
            return False
        if not mine and self.allow_if_no_acl:
            return True
        for pattern, entries in mine.items():
            if not any(e.permission is AclPermission.ALLOW and _allows(e, operation) for e in entries):
                continue
            if not any(_covers(deny, pattern) for deny in denied):
                return True
        return False


def _covers(deny: ResourcePattern, allow: ResourcePattern) -> bool:
    if deny.pattern_type is PatternType.PREFIXED:
        return allow.name.startswith(deny.name)
    return deny.name == allow.name and allow.pattern_type is PatternType.LITERAL


# -- filters of DescribeAcls and DeleteAcls ----------------------------------------------------------


@dataclass(frozen=True)
class AclFilter:
    """An AclBindingFilter: None and the ANY values match everything; pattern type MATCH selects the patterns
    that would apply to the named resource (its literal, the wildcard, its prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def invalid(self) -> str | None:
        """Why the filter is unusable (an UNKNOWN value), or None."""
        for what, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                            ("operation", self.operation), ("permission type", self.permission)):
            if value.value == 0:
                return f"unknown {what} in the ACL filter"
        return None

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type is PatternType.PREFIXED:
                return self.name.startswith(pattern.name)
            return pattern.name in (self.name, WILDCARD)
        if self.pattern_type is not PatternType.ANY and self.pattern_type is not pattern.pattern_type:
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AclEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission in (AclPermission.ANY, entry.permission))

    def select(self, snapshot: AclSnapshot) -> list[tuple[ResourcePattern, AclEntry]]:
        return [(pattern, entry) for pattern, entries in sorted(snapshot.by_pattern.items())
                if self.matches_pattern(pattern) for entry in sorted(entries) if self.matches_entry(entry)]
