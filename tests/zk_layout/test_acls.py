"""ACL nodes: Kafka's exact bytes and strict decoding naming the node (the ZooKeeper side:
integration_tests/test_zk_layout_acls.py)."""

from __future__ import annotations

import pytest

from metaq.errors import ConfigError, MalformedNodeError
from zk_layout.acl_formats import (
    AclEntry,
    AclOperation,
    AclPermission,
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

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")
ORD_PREFIX = ResourcePattern(ResourceType.TOPIC, "ord", PatternType.PREFIXED)


def entry(principal: str, op: AclOperation = AclOperation.READ,
          permission: AclPermission = AclPermission.ALLOW) -> AclEntry:
    return AclEntry(principal, "*", op, permission)


def test_codecs_write_kafkas_bytes_and_read_them_back() -> None:
    acls = frozenset({entry("User:alice"), entry("User:bob", AclOperation.IDEMPOTENT_WRITE, AclPermission.DENY)})
    raw = encode_acls(acls)
    assert raw == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",'
                   b'"host":"*"},{"principal":"User:bob","permissionType":"Deny","operation":"IdempotentWrite",'
                   b'"host":"*"}]}')
    assert decode_acls("/kafka-acl/Topic/orders", raw) == acls
    assert encode_literal_change(ORDERS) == b"TOPIC:orders"
    assert decode_literal_change("/c", b"Topic:orders") == ORDERS  # Kafka 2.0's spelling reads too
    assert encode_extended_change(ORD_PREFIX) == \
        b'{"version":1,"resourceType":"TOPIC","name":"ord","patternType":"PREFIXED"}'
    assert decode_extended_change("/c", encode_extended_change(ORD_PREFIX)) == ORD_PREFIX


@pytest.mark.parametrize("raw, reason", [
    (b"", "not UTF-8 JSON"),
    (b"[]", "expected a JSON object"),
    (b'{"version":2,"acls":[]}', "unsupported version 2"),
    (b'{"version":1}', "missing list 'acls'"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read"}]}', "acls[0]"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Fly","host":"*"}]}',
     "operation 'Fly'"),
    (b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
     "principal 'alice'"),
])
def test_malformed_acl_nodes_are_refused_naming_the_node(raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedNodeError, match="/kafka-acl/Topic/orders") as info:
        decode_acls("/kafka-acl/Topic/orders", raw)
    assert reason in info.value.reason


def test_bad_patterns_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        ResourcePattern(ResourceType.TOPIC, "a/b")
    with pytest.raises(ConfigError):
        ResourcePattern(ResourceType.ANY, "orders")
    with pytest.raises(ConfigError):
        ResourcePattern(ResourceType.TOPIC, "*", PatternType.PREFIXED)
    with pytest.raises(MalformedNodeError, match="/kafka-acl-changes/acl_changes_0000000001"):
        decode_literal_change("/kafka-acl-changes/acl_changes_0000000001", b"no-separator")
