"""ACL nodes against a real ZooKeeper: conditional updates (two writers never lose an ACL), malformed nodes
named by path, and the broker's Authorizer cache following change notifications."""

from __future__ import annotations

import json
import threading

import pytest

from metaq.broker.security.acl_rules import AclFilter, Rules
from metaq.broker.security.authorizer import Authorizer
from metaq.errors import MalformedNodeError
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout
from zk_layout.acl_formats import (
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders")
ORD_PREFIX = ResourcePattern(ResourceType.TOPIC, "ord", PatternType.PREFIXED)


def entry(principal: str, op: AclOperation = AclOperation.READ,
          permission: AclPermission = AclPermission.ALLOW) -> AclEntry:
    return AclEntry(principal, "*", op, permission)


def test_updates_write_nodes_and_notifications(zk_layout: ZkLayout) -> None:
    zk_layout.update_acls(ORDERS, lambda current: current | {entry("User:alice")})
    zk_layout.update_acls(ORD_PREFIX, lambda current: current | {entry("User:bob")})
    assert zk_layout.all_acls() == {ORDERS: {entry("User:alice")}, ORD_PREFIX: {entry("User:bob")}}
    client = zk_layout.client
    assert client.exists("/kafka-acl/Topic/orders") and client.exists("/kafka-acl-extended/prefixed/Topic/ord")
    assert len(zk_layout.acl_changes(PatternType.LITERAL)) == 1
    [name] = zk_layout.acl_changes(PatternType.PREFIXED)
    change = zk_layout.acl_change(PatternType.PREFIXED, name)
    assert change is not None and change[0] == ORD_PREFIX
    # no change, no write and no notification; removing the last ACL deletes the node
    zk_layout.update_acls(ORDERS, lambda current: current)
    assert len(zk_layout.acl_changes(PatternType.LITERAL)) == 1
    zk_layout.update_acls(ORDERS, lambda current: frozenset())
    assert client.exists("/kafka-acl/Topic/orders") is None
    assert len(zk_layout.acl_changes(PatternType.LITERAL)) == 2


def test_concurrent_writers_never_lose_an_acl(zk_layout: ZkLayout, make_zk_client) -> None:
    layouts = [ZkLayout(make_zk_client()) for _ in range(4)]
    per_writer = 10

    def write(index: int) -> None:
        for i in range(per_writer):
            layouts[index].update_acls(ORDERS, lambda current, i=i: current | {entry(f"User:w{index}-{i}")})

    threads = [threading.Thread(target=write, args=(i,), name=f"acl-writer-{i}") for i in range(len(layouts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(zk_layout.acls(ORDERS)) == len(layouts) * per_writer


def test_a_malformed_resource_node_names_its_path(zk_layout: ZkLayout) -> None:
    zk_layout.client.create("/kafka-acl/Group/etl", b'{"version":1,"acls":"nope"}', makepath=True)
    with pytest.raises(MalformedNodeError, match="/kafka-acl/Group/etl"):
        zk_layout.all_acls()


def test_authorizer_cache_follows_changes_from_any_writer(zk_layout: ZkLayout, make_zk_client) -> None:
    zk_layout.update_acls(ORDERS, lambda current: current | {entry("User:alice")})
    authorizer = Authorizer(ZkLayout(make_zk_client()), Rules(frozenset()))
    authorizer.start()
    try:
        def may(principal: str, name: str = "orders") -> bool:
            return authorizer.authorize(principal, "127.0.0.1", AclOperation.READ, ResourceType.TOPIC, name)

        assert may("User:alice") and not may("User:bob")
        zk_layout.update_acls(ORD_PREFIX, lambda current: current | {entry("User:bob")})
        wait_until(lambda: may("User:bob", "orders-eu"), 10, "the prefixed ACL applied")
        zk_layout.update_acls(ORDERS, lambda current: frozenset())
        wait_until(lambda: not may("User:alice"), 10, "the removal applied")
        # a notification that does not parse reloads everything rather than stopping the cache
        zk_layout.client.create("/kafka-acl-changes/acl_changes_", b"garbage", sequence=True)
        zk_layout.update_acls(ORDERS, lambda current: current | {entry("User:carol")})
        wait_until(lambda: may("User:carol"), 10, "later changes still applied")
        # a resource node rewritten with garbage keeps the ACLs read before, and later changes still apply
        zk_layout.client.set("/kafka-acl/Topic/orders", b"garbage")
        zk_layout.client.create("/kafka-acl-changes/acl_changes_", b"TOPIC:orders", sequence=True)
        zk_layout.update_acls(ResourcePattern(ResourceType.GROUP, "g"), lambda current: current | {entry("User:dan")})
        wait_until(lambda: authorizer.authorize("User:dan", "h", AclOperation.READ, ResourceType.GROUP, "g"), 10,
                   "a change after the malformed node applied")
        assert may("User:carol")
        zk_layout.client.delete("/kafka-acl/Topic/orders")
        assert {str(b.pattern) for b in authorizer.describe(AclFilter())} == {
            "Topic:LITERAL:orders", "Topic:PREFIXED:ord", "Group:LITERAL:g"}
    finally:
        authorizer.stop()


def test_acl_change_notification_json_is_kafkas(zk_layout: ZkLayout) -> None:
    zk_layout.update_acls(ORD_PREFIX, lambda current: current | {entry("User:bob")})
    [name] = zk_layout.client.get_children("/kafka-acl-extended-changes")
    assert json.loads(zk_layout.client.get(f"/kafka-acl-extended-changes/{name}")[0]) == {
        "version": 1, "resourceType": "TOPIC", "name": "ord", "patternType": "PREFIXED"}
