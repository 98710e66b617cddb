"""zookeeper.set.acl against a real ZooKeeper: a group's nodes belong to the group's identity (and ops);
another tenant can neither claim, release, rewind nor delete them, while anyone can still read them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, Id, Permissions

from metaq.errors import ZooKeeperAuthError
from metaq.zksecurity import security_from_properties
from zk_layout import BrokerInfo, PartitionState, TopicCount, ZkLayout, paths
from zk_layout.znode_acls import ZnodeAcls, acl_for_path, digest_identity

OPS = ("ops", "ops-pw")
GROUP = "etl"
TOPIC = "clicks"
STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)


def _props(user: str | None, *, set_acl: bool = True, **extra: str) -> dict[str, str]:
    props = {"zookeeper.auth": f"digest:{user}:{user}-pw"} if user else {}
    if set_acl and user:
        props.update({"zookeeper.set.acl": "true", "zookeeper.acl.ops.identity": digest_identity(*OPS)})
    return {**props, **extra}


@pytest.fixture
def layout_as(make_zk_client: Callable[..., KazooClient]) -> Callable[..., ZkLayout]:
    """A ZkLayout over a new session authenticated as ``user`` (None: unauthenticated), with set.acl."""

    def make(user: str | None, **props: Any) -> ZkLayout:
        client = make_zk_client(security=security_from_properties(_props(user, **props)))
        return ZkLayout(client, stale_node_wait_s=0.5)

    return make


@pytest.fixture
def group_of_alice(layout_as: Callable[..., ZkLayout]) -> ZkLayout:
    """Group ``etl`` run by alice with set.acl: a member, partition 0 claimed, offsets committed for 0 and 1."""
    alice = layout_as("alice")
    alice.ensure_persistent_paths()
    alice.register_consumer(GROUP, "c1", TopicCount({TOPIC: 1}))
    assert alice.claim_partitions(GROUP, {(TOPIC, 0): "c1-0"}) == {}
    fenced = alice.fence_offsets(GROUP, [(TOPIC, 0), (TOPIC, 1)])
    committed, lost = alice.commit_fenced_offsets(GROUP, {key: (42, f.version) for key, f in fenced.items()})
    assert lost == set() and set(committed) == {(TOPIC, 0), (TOPIC, 1)}
    return alice


def _acl_set(client: KazooClient, path: str) -> set[tuple[Id, int]]:
    return {(acl.id, acl.perms) for acl in client.get_acls(path)[0]}


def test_group_nodes_belong_to_the_group_and_ops(group_of_alice: ZkLayout) -> None:
    client = group_of_alice.client
    alice = Id("digest", digest_identity("alice", "alice-pw")[len("digest:"):])
    ops = Id("digest", digest_identity(*OPS)[len("digest:"):])
    expected = {(alice, Permissions.ALL), (ops, Permissions.ALL), (Id("world", "anyone"), Permissions.READ)}
    for path in (paths.consumer_group_path(GROUP), paths.consumer_ids_path(GROUP),
                 paths.consumer_id_path(GROUP, "c1"), paths.owners_path(GROUP),
                 paths.topic_owners_path(GROUP, TOPIC), paths.owner_path(GROUP, TOPIC, 0),
                 paths.offsets_path(GROUP), paths.topic_offsets_path(GROUP, TOPIC),
                 paths.offset_path(GROUP, TOPIC, 0), paths.offset_path(GROUP, TOPIC, 1)):
        assert _acl_set(client, path) == expected, path
    assert client.get_acls(paths.CONSUMERS)[0] == list(OPEN_ACL_UNSAFE)  # other tenants can start groups


def test_another_identity_cannot_claim_release_rewind_or_delete(group_of_alice: ZkLayout,
                                                                layout_as: Callable[..., ZkLayout]) -> None:
    for bob in (layout_as("bob"), layout_as(None)):
        owner_node = group_of_alice.full_path(paths.owner_path(GROUP, TOPIC, 0))
        with pytest.raises(ZooKeeperAuthError, match=f"cannot delete {owner_node}: not allowed by its ACL") as e:
            bob.release_partition(GROUP, TOPIC, 0)
        assert e.value.path == owner_node
        with pytest.raises(ZooKeeperAuthError, match="cannot delete .*/owners/clicks/0"):
            bob.release_partitions(GROUP, {(TOPIC, 0): "c1-0"})
        with pytest.raises(ZooKeeperAuthError, match="cannot create .*/owners/clicks/1"):
            bob.claim_partition(GROUP, TOPIC, 1, "bob-0")
        with pytest.raises(ZooKeeperAuthError, match="cannot create .*/owners/clicks/1"):
            bob.claim_partitions(GROUP, {(TOPIC, 1): "bob-0"})
        with pytest.raises(ZooKeeperAuthError, match="cannot write .*/offsets/clicks/0"):
            bob.write_offset(GROUP, TOPIC, 0, 0)
        with pytest.raises(ZooKeeperAuthError, match="cannot (fence|write) .*/offsets/clicks/0"):
            bob.fence_offsets(GROUP, [(TOPIC, 0)])
        with pytest.raises(ZooKeeperAuthError, match="cannot write .*/offsets/clicks/1"):
            bob.commit_fenced_offsets(GROUP, {(TOPIC, 1): (0, 1)})
        with pytest.raises(ZooKeeperAuthError, match="cannot delete .*/consumers/etl"):
            bob.delete_group(GROUP)
        with pytest.raises(ZooKeeperAuthError, match="cannot create .*/ids/intruder"):
            bob.register_consumer(GROUP, "intruder", TopicCount({TOPIC: 1}))
    # nothing changed
    assert group_of_alice.offsets(GROUP) == {(TOPIC, 0): 42, (TOPIC, 1): 42}
    assert group_of_alice.owners(GROUP) == {(TOPIC, 0): "c1-0"}
    assert group_of_alice.consumer_ids(GROUP) == ["c1"]


def test_anyone_can_read_the_group(group_of_alice: ZkLayout, layout_as: Callable[..., ZkLayout]) -> None:
    reader = layout_as(None)  # a Burrow-style lag monitor with no credentials
    assert reader.offsets(GROUP) == {(TOPIC, 0): 42, (TOPIC, 1): 42}
    assert reader.owners(GROUP) == {(TOPIC, 0): "c1-0"}
    assert set(reader.consumer_registrations(GROUP)) == {"c1"}


def test_world_read_off_hides_the_group(layout_as: Callable[..., ZkLayout]) -> None:
    alice = layout_as("alice", **{"zookeeper.acl.world.read": "false"})
    alice.write_offset(GROUP, TOPIC, 0, 7)
    with pytest.raises(ZooKeeperAuthError, match="cannot (read|list) .*/consumers/etl/offsets"):
        layout_as(None).offsets(GROUP)
    assert alice.offsets(GROUP) == {(TOPIC, 0): 7}


def test_ops_identity_can_manage_the_group(group_of_alice: ZkLayout, layout_as: Callable[..., ZkLayout]) -> None:
    ops = layout_as(OPS[0], **{"zookeeper.auth": f"digest:{OPS[0]}:{OPS[1]}"})
    ops.write_offset(GROUP, TOPIC, 0, 7)  # metaq groups reset-offsets
    assert group_of_alice.read_offset(GROUP, TOPIC, 0) == 7
    assert ops.release_partition(GROUP, TOPIC, 0)  # metaq owners release
    assert ops.claim_partition(GROUP, TOPIC, 5, "ops-0")


def test_cluster_and_sensitive_nodes(layout_as: Callable[..., ZkLayout]) -> None:
    broker = layout_as("broker")
    broker.ensure_persistent_paths()
    broker.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))
    broker.create_topic(TOPIC, {0: [0]}, {0: STATE})
    world = Id("world", "anyone")
    client = broker.client
    for path in (paths.broker_path(0), paths.topic_path(TOPIC), paths.partition_state_path(TOPIC, 0),
                 paths.topic_config_path(TOPIC), paths.BROKER_IDS):
        assert (world, Permissions.READ) in _acl_set(client, path), path
        assert (world, Permissions.ALL) not in _acl_set(client, path), path
    assert world not in {acl_id for acl_id, _ in _acl_set(client, paths.CONFIG_USERS)}
    other = layout_as("mallory")
    assert other.broker(0) is not None  # readable by every client
    with pytest.raises(ZooKeeperAuthError, match="cannot write .*/partitions/0/state"):
        other.set_partition_state(TOPIC, 0, STATE)
    with pytest.raises(ZooKeeperAuthError, match="creating topic 'evil' failed: cannot create .*/config/topics/evil"):
        other.create_topic("evil", {0: [0]}, {0: STATE})


def test_acl_for_path_follows_the_client(layout_as: Callable[..., ZkLayout]) -> None:
    """What code creating nodes with the kazoo client itself (SCRAM users, ACL nodes) passes as acl=."""
    with_acl = layout_as("admin").client
    assert acl_for_path(with_acl, "/config/users/alice") == ZnodeAcls((digest_identity(*OPS),)).acl_for("sensitive")
    with_acl.create("/config/users/alice", b"{}", makepath=True, acl=acl_for_path(with_acl, "/config/users/alice"))
    with pytest.raises(ZooKeeperAuthError, match="cannot read .*/config/users/alice"):
        layout_as("mallory")._read("/config/users/alice")
    assert acl_for_path(layout_as("admin", set_acl=False).client, "/config/users/alice") is None


def test_without_set_acl_nothing_changes(layout_as: Callable[..., ZkLayout]) -> None:
    alice = layout_as("alice", set_acl=False)
    alice.write_offset(GROUP, TOPIC, 0, 1)
    assert alice.client.get_acls(paths.offset_path(GROUP, TOPIC, 0))[0] == list(OPEN_ACL_UNSAFE)
    layout_as("bob", set_acl=False).write_offset(GROUP, TOPIC, 0, 0)  # as open as before
    assert alice.read_offset(GROUP, TOPIC, 0) == 0


def test_kazoo_debug_log_does_not_show_the_password(make_zk_client: Callable[..., KazooClient],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kazoo.client")
    make_zk_client(security=security_from_properties({"zookeeper.auth": "digest:alice:n0t-in-logs"}))
    assert "auth='alice:***'" in caplog.text  # kazoo logged the Auth request, masked
    assert "n0t-in-logs" not in caplog.text
