"""Kafka's ACL decision rules (metaq/broker/security/acl_rules.py), pure logic: every rule the broker enforces,
including super.users and host matching, which the PLAINTEXT integration tests cannot reach."""

from __future__ import annotations

import pytest

from metaq.broker.security.acl_rules import AclFilter, AclSnapshot, Rules
from metaq.broker.security.authorizer import AUTHORIZER_CLASS_NAMES, check_authorizer_class, parse_super_users
from metaq.errors import ConfigError
from zk_layout.acl_formats import (
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALICE = "User:alice"
HOST = "10.0.0.1"


def allow(principal: str, op: AclOperation, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, AclPermission.ALLOW)


def deny(principal: str, op: AclOperation, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, AclPermission.DENY)


def literal(name: str, rtype: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name)


def prefixed(name: str, rtype: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(rtype, name, PatternType.PREFIXED)


def decide(acls: dict[ResourcePattern, set[AclEntry]], op: AclOperation, name: str = "orders", *,
           principal: str = ALICE, host: str = HOST, rtype: ResourceType = TOPIC,
           rules: Rules = Rules(frozenset())) -> bool:
    return rules.authorize(AclSnapshot(acls), principal, host, op, rtype, name)


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not decide({}, Op.READ)
    assert decide({}, Op.READ, rules=Rules(frozenset(), allow_if_no_acl=True))
    # an ACL of anyone else on the resource means "ACLs exist": allow.everyone no longer applies
    assert not decide({literal("orders"): {allow("User:bob", Op.READ)}}, Op.READ,
                      rules=Rules(frozenset(), allow_if_no_acl=True))


def test_literal_wildcard_and_prefixed_patterns_apply() -> None:
    assert decide({literal("orders"): {allow(ALICE, Op.READ)}}, Op.READ)
    assert not decide({literal("orders"): {allow(ALICE, Op.READ)}}, Op.READ, "orders2")
    assert decide({literal("*"): {allow(ALICE, Op.READ)}}, Op.READ, "anything")
    assert decide({prefixed("ord"): {allow(ALICE, Op.READ)}}, Op.READ, "orders")
    assert not decide({prefixed("ord"): {allow(ALICE, Op.READ)}}, Op.READ, "or")
    assert not decide({prefixed("ord"): {allow(ALICE, Op.READ)}}, Op.READ, "payments")
    # resource types are separate namespaces
    assert not decide({literal("orders", GROUP): {allow(ALICE, Op.READ)}}, Op.READ)


def test_deny_beats_allow_from_any_pattern() -> None:
    acls = {literal("*"): {allow(ALICE, Op.ALL)}, prefixed("ord"): {deny(ALICE, Op.WRITE)}}
    assert decide(acls, Op.READ)
    assert not decide(acls, Op.WRITE)
    assert decide(acls, Op.WRITE, "payments")
    assert not decide({literal("orders"): {allow(ALICE, Op.READ), deny("User:*", Op.ALL)}}, Op.READ)


def test_principal_wildcard_and_host_match() -> None:
    assert decide({literal("orders"): {allow("User:*", Op.READ)}}, Op.READ)
    assert not decide({literal("orders"): {allow("User:bob", Op.READ)}}, Op.READ)
    assert decide({literal("orders"): {allow(ALICE, Op.READ, HOST)}}, Op.READ)
    assert not decide({literal("orders"): {allow(ALICE, Op.READ, "10.0.0.2")}}, Op.READ)
    # a Deny from another host does not apply
    assert decide({literal("orders"): {allow(ALICE, Op.READ), deny(ALICE, Op.READ, "10.0.0.2")}}, Op.READ)


def test_implied_operations_are_allow_only() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL):
        assert decide({literal("orders"): {allow(ALICE, op)}}, Op.DESCRIBE), op
    assert not decide({literal("orders"): {allow(ALICE, Op.CREATE)}}, Op.DESCRIBE)
    assert decide({literal("orders"): {allow(ALICE, Op.ALTER_CONFIGS)}}, Op.DESCRIBE_CONFIGS)
    assert not decide({literal("orders"): {allow(ALICE, Op.DESCRIBE)}}, Op.READ)
    # a Deny of Read does not deny Describe (Kafka implies operations on the Allow side only)
    assert decide({literal("orders"): {allow(ALICE, Op.ALL), deny(ALICE, Op.READ)}}, Op.DESCRIBE)
    assert not decide({literal("orders"): {allow(ALICE, Op.ALL), deny(ALICE, Op.ALL)}}, Op.DESCRIBE)


def test_super_users_bypass_every_acl() -> None:
    rules = Rules(parse_super_users("User:admin; User:broker"))
    acls = {literal("orders"): {deny("User:*", Op.ALL)}}
    assert decide(acls, Op.WRITE, principal="User:admin", rules=rules)
    assert decide({}, Op.CLUSTER_ACTION, "kafka-cluster", principal="User:broker", rtype=CLUSTER, rules=rules)
    assert not decide(acls, Op.WRITE, principal="User:admins", rules=rules)


def test_authorize_any_for_idempotent_producers() -> None:
    rules = Rules(frozenset())

    def any_write(acls: dict[ResourcePattern, set[AclEntry]]) -> bool:
        return rules.authorize_any(AclSnapshot(acls), ALICE, HOST, Op.WRITE, TOPIC)

    assert not any_write({})
    assert any_write({literal("orders"): {allow(ALICE, Op.WRITE)}})
    assert not any_write({literal("orders"): {allow(ALICE, Op.WRITE), deny(ALICE, Op.WRITE)}})
    assert not any_write({prefixed("ord"): {allow(ALICE, Op.WRITE)}, literal("*"): {deny(ALICE, Op.ALL)}})
    assert not any_write({literal("orders"): {allow(ALICE, Op.WRITE)}, prefixed("o"): {deny(ALICE, Op.WRITE)}})
    assert any_write({literal("orders"): {allow(ALICE, Op.WRITE)}, literal("x"): {deny(ALICE, Op.WRITE)}})
    assert not any_write({literal("orders"): {allow(ALICE, Op.READ)}})


def test_filters_of_describe_and_delete() -> None:
    snapshot = AclSnapshot({literal("orders"): {allow(ALICE, Op.READ), deny("User:bob", Op.WRITE)},
                            prefixed("ord"): {allow(ALICE, Op.WRITE)},
                            literal("*"): {allow("User:*", Op.DESCRIBE)},
                            literal("etl", GROUP): {allow(ALICE, Op.READ)}})
    assert len(AclFilter().select(snapshot)) == 5
    assert [(p.name, e.operation) for p, e in AclFilter(TOPIC, "orders", PatternType.MATCH).select(snapshot)] == [
        ("*", Op.DESCRIBE), ("ord", Op.WRITE), ("orders", Op.READ), ("orders", Op.WRITE)]
    assert [p.name for p, _ in AclFilter(TOPIC, "ord", PatternType.PREFIXED).select(snapshot)] == ["ord"]
    assert [p.name for p, _ in AclFilter(TOPIC, "ord", PatternType.LITERAL).select(snapshot)] == []
    assert [e.principal for _, e in AclFilter(principal="User:bob").select(snapshot)] == ["User:bob"]
    assert [p.resource_type for p, _ in AclFilter(GROUP).select(snapshot)] == [GROUP]
    assert [e.permission for _, e in AclFilter(permission=AclPermission.DENY).select(snapshot)] == [
        AclPermission.DENY]
    assert AclFilter(operation=Op.UNKNOWN).invalid() is not None
    assert AclFilter().invalid() is None


def test_settings_are_checked() -> None:
    assert check_authorizer_class("") is None
    assert all(check_authorizer_class(name) is None for name in AUTHORIZER_CLASS_NAMES)
    assert "must be empty" in (check_authorizer_class("com.example.Custom") or "")
    with pytest.raises(ConfigError, match="'admin'"):
        parse_super_users("User:a;admin")
    assert parse_super_users("") == frozenset()
