"""``metaq acls add|list|remove``: the brokers' ACLs in ZooKeeper, like ``kafka-acls --authorizer-properties
zookeeper.connect=...``.

    metaq acls add --zookeeper Z --allow-principal User:alice --operation Read --topic orders --group etl
    metaq acls add --zookeeper Z --allow-principal User:alice --operation Write --topic orders- \\
        --resource-pattern-type prefixed
    metaq acls add --zookeeper Z --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --cluster
    metaq acls list --zookeeper Z [--topic orders] [--principal User:alice] [--resource-pattern-type match]
    metaq acls remove --zookeeper Z --allow-principal User:alice --operation Read --topic orders
    metaq acls remove --zookeeper Z --topic orders          # every ACL of the resource

Writes are conditional on each resource node's version and announced with a change notification, so every
broker applies them without a restart (metaq/broker/security/authorizer.py).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from metaq.cli.output import add_parser, emit, open_admin, table, usage_error
from metaq.cli.subparsers import SubParsers

if TYPE_CHECKING:  # imported where used: the zk_layout package imports kazoo, which `metaq acls --help` never needs
    from zk_layout.acl_formats import AclEntry, PatternType, ResourcePattern, ResourceType

# the Kafka names of zk_layout.acl_formats.AclOperation above Any, for --help (tests/test_cli_startup.py checks them)
OPERATION_NAMES = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                   "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens")


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("acls", help="add, list and remove the brokers' ACLs (like kafka-acls)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = add_parser(actions, "add", "add ACLs to resources")
    _entry_options(add)
    _resource_options(add, "literal")
    add.set_defaults(func=_add)
    listing = add_parser(actions, "list", "list ACLs (all, or those of the resources given)")
    _resource_options(listing, "any")
    listing.add_argument("--principal", action="append", default=[], help="only the ACLs of this principal")
    listing.set_defaults(func=_list)
    remove = add_parser(actions, "remove", "remove ACLs (without principals, every ACL of the resources)")
    _entry_options(remove)
    _resource_options(remove, "literal")
    remove.set_defaults(func=_remove)


def _entry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                        help="e.g. User:alice, or User:* for everyone (repeatable)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="hosts the allow principals may connect from (default: * = any)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="hosts the deny principals are denied from (default: * = any)")
    operations = ", ".join(OPERATION_NAMES)
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help=f"{operations} (repeatable; add: default All; remove: default every operation)")


def _resource_options(parser: argparse.ArgumentParser, default_pattern: str) -> None:
    parser.add_argument("--topic", action="append", default=[], help="a topic, a prefix, or * (repeatable)")
    parser.add_argument("--group", action="append", default=[], help="a consumer group, a prefix, or *")
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    parser.add_argument("--resource-pattern-type", default=default_pattern,
                        choices=["literal", "prefixed"] + (["any", "match"] if default_pattern == "any" else []),
                        help=f"how the resource names match (default {default_pattern})")


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    from zk_layout.acl_formats import CLUSTER_NAME, ResourceType

    named = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _patterns(args: argparse.Namespace) -> list[ResourcePattern]:
    from zk_layout.acl_formats import PatternType, ResourcePattern, ResourceType

    resources = _resources(args)
    if not resources:
        usage_error(args, "give at least one resource: --topic, --group, --transactional-id or --cluster")
    pattern_type = PatternType.parse(args.resource_pattern_type, "--resource-pattern-type")
    if pattern_type is PatternType.PREFIXED and any(t is ResourceType.CLUSTER for t, _ in resources):
        usage_error(args, "--cluster takes no prefix: use --resource-pattern-type literal")
    return [ResourcePattern(rtype, name, pattern_type) for rtype, name in resources]


def _entries(args: argparse.Namespace, *, default_all: bool) -> list[AclEntry] | None:
    """The ACL entries the options describe; None (remove) when no principal is given."""
    from zk_layout.acl_formats import WILDCARD, AclEntry, AclOperation, AclPermission

    if not args.allow_principal and not args.deny_principal:
        if default_all:
            usage_error(args, "give at least one --allow-principal or --deny-principal")
        if args.operation or args.allow_host or args.deny_host:
            usage_error(args, "--operation and the host options need --allow-principal or --deny-principal")
        return None
    operations = [AclOperation.parse(op, "--operation") for op in args.operation]
    if not operations:
        operations = [AclOperation.ALL] if default_all else [op for op in AclOperation if op.value > 1]
    entries = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermission.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermission.DENY)):
        entries += [AclEntry(principal, host, op, permission)
                    for principal in principals for host in (hosts or [WILDCARD]) for op in operations]
    return entries


def _add(args: argparse.Namespace) -> int:
    patterns = _patterns(args)
    entries = frozenset(_entries(args, default_all=True) or ())
    with open_admin(args) as admin:
        written = {pattern: admin.layout.update_acls(pattern, lambda current: current | entries)
                   for pattern in patterns}
    emit(args, {"acls": [_json(p, e) for p, acls in written.items() for e in sorted(acls)]},
         lambda: "\n".join(_render(p, acls) for p, acls in written.items()))
    return 0


def _remove(args: argparse.Namespace) -> int:
    patterns = _patterns(args)
    entries = _entries(args, default_all=False)
    removed: dict[ResourcePattern, frozenset[AclEntry]] = {}
    with open_admin(args) as admin:
        for pattern in patterns:
            before = admin.layout.acls(pattern)
            after = admin.layout.update_acls(
                pattern, lambda current: frozenset() if entries is None else current - frozenset(entries))
            removed[pattern] = before - after
    emit(args, {"removed": [_json(p, e) for p, gone in removed.items() for e in sorted(gone)]},
         lambda: "\n".join(f"Removed {len(gone)} ACLs from {_name(p)}" for p, gone in removed.items()))
    return 0


def _list(args: argparse.Namespace) -> int:
    from metaq.broker.security.acl_rules import AclFilter, AclSnapshot

    pattern_type = filter_pattern_type(args.resource_pattern_type)
    filters = [AclFilter(rtype, name, pattern_type) for rtype, name in _resources(args)] or [AclFilter()]
    with open_admin(args) as admin:
        snapshot = AclSnapshot(admin.layout.all_acls())
    rows = sorted({binding for f in filters for binding in f.select(snapshot)
                   if not args.principal or binding[1].principal in args.principal})
    emit(args, {"acls": [_json(p, e) for p, e in rows]},
         lambda: table(["RESOURCE", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                       [(_name(p), p.pattern_type.kafka_name, e.principal, e.host, e.operation.kafka_name,
                         e.permission.kafka_name) for p, e in rows]) if rows else "No ACLs.")
    return 0


def filter_pattern_type(text: str) -> PatternType:
    """``--resource-pattern-type`` of a listing, a filter: ``any`` (the default, every pattern) and ``match``
    are filter values that :meth:`PatternType.parse` (concrete patterns only) refuses."""
    from zk_layout.acl_formats import PatternType

    if text.lower() == "any":
        return PatternType.ANY
    parsed: PatternType = PatternType.parse(text, "--resource-pattern-type")
    return parsed


def _name(pattern: ResourcePattern) -> str:
    return f"{pattern.resource_type.kafka_name}:{pattern.name}"


def _render(pattern: ResourcePattern, acls: frozenset[AclEntry]) -> str:
    """kafka-acls' listing of one resource."""
    lines = [f"Current ACLs for resource `{pattern.resource_type.kafka_name}:{pattern.pattern_type.name}:"
             f"{pattern.name}`:"]
    lines += [f"    {entry.describe()}" for entry in sorted(acls)]
    return "\n".join(lines)


def _json(pattern: ResourcePattern, entry: AclEntry) -> dict[str, str]:
    return {"resourceType": pattern.resource_type.kafka_name, "name": pattern.name,
            "patternType": pattern.pattern_type.kafka_name, **entry.to_json()}

