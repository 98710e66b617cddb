"""ZkLayout against a real ZooKeeper (one per session, a chroot per test)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_acl

from metaq.errors import (
    ConfigError,
    MalformedNodeError,
    StaleVersionError,
    TopicExistsError,
    ZooKeeperError,
    ZooKeeperUnavailableError,
)
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import expire_session
from metaq.zkclient import connect, session
from zk_layout import (
    BrokerInfo,
    PartitionState,
    TopicCount,
    ZkLayout,
    paths,
)

STATE = PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)




def test_persistent_paths_and_cluster_id(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.ensure_persistent_paths()
    for path in paths.PERSISTENT_PATHS:
        assert zk.exists(path) is not None
    assert zk_layout.cluster_id() is None
    cluster_id = zk_layout.ensure_cluster_id()
    assert len(cluster_id) == 22
    assert zk_layout.ensure_cluster_id() == cluster_id
    assert zk.get(paths.CLUSTER_ID)[0] == f'{{"version":"1","id":"{cluster_id}"}}'.encode()


def test_broker_registration_is_ephemeral(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    broker_client = make_zk_client()
    broker_layout = ZkLayout(broker_client)
    info = BrokerInfo.plaintext(1, "127.0.0.1", 9092, timestamp_ms=1700000000000)
    broker_layout.register_broker(info)
    assert zk_layout.broker_ids() == [1]
    assert zk_layout.brokers() == {1: info}
    assert broker_client.get(paths.broker_path(1))[1].ephemeralOwner == broker_client.client_id[0]

    broker_client.stop()  # closing the session deletes the node at once
    assert zk_layout.broker(1) is None
    assert zk_layout.broker_ids() == []


def test_broker_id_conflict_is_a_clear_error(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    ZkLayout(make_zk_client()).register_broker(BrokerInfo.plaintext(1, "10.0.0.1", 9092))
    other = ZkLayout(make_zk_client(), stale_node_wait_s=0.2)
    with pytest.raises(ZooKeeperError, match="broker id 1 already registered"):
        other.register_broker(BrokerInfo.plaintext(1, "10.0.0.2", 9092))


def test_reregistering_in_the_same_session_updates(zk_layout: ZkLayout) -> None:
    zk_layout.register_broker(BrokerInfo.plaintext(2, "h", 1, timestamp_ms=1))
    zk_layout.register_broker(BrokerInfo.plaintext(2, "h", 1, timestamp_ms=2))
    info = zk_layout.broker(2)
    assert info is not None and info.timestamp_ms == 2


def test_stale_registration_of_same_broker_is_waited_out(
    zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]
) -> None:
    """A restarted broker finds its previous session's node and waits for it to expire."""
    old = make_zk_client()
    ZkLayout(old).register_broker(BrokerInfo.plaintext(3, "h", 9092, timestamp_ms=1))
    threading.Timer(0.5, old.stop).start()  # the old session goes away while the new one is waiting
    started = time.monotonic()
    zk_layout.register_broker(BrokerInfo.plaintext(3, "h", 9092, timestamp_ms=2))
    assert 0.3 < time.monotonic() - started < 5
    info = zk_layout.broker(3)
    assert info is not None and info.timestamp_ms == 2


def test_server_side_expiry_removes_ephemerals(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    victim = make_zk_client()
    ZkLayout(victim).register_consumer("g", "g_c1", TopicCount({"t": 1}))
    assert zk_layout.consumer_ids("g") == ["g_c1"]
    expire_session(victim)
    wait_until(lambda: zk_layout.consumer_ids("g") == [])


def test_create_topic_in_one_transaction(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk_layout.create_topic("clicks", {0: [0], 1: [0], 2: [0]}, {0: STATE, 1: STATE, 2: STATE})
    assert zk_layout.topics() == ["clicks"]
    assignment = zk_layout.topic_assignment("clicks")
    assert assignment is not None and assignment.partitions == {0: (0,), 1: (0,), 2: (0,)}
    topic_id = assignment.topic_id
    assert assignment.version == 3 and topic_id is not None and re.fullmatch(r"[A-Za-z0-9_-]{22}", topic_id)
    assert zk.get(paths.topic_path("clicks"))[0] == (
        b'{"version":3,"partitions":{"0":[0],"1":[0],"2":[0]},"adding_replicas":{},"removing_replicas":{},'
        b'"topic_id":"' + topic_id.encode() + b'"}'
    )
    assert zk_layout.partition_state("clicks", 2) == STATE
    assert zk.get(paths.topic_config_path("clicks"))[0] == b'{"version":1,"config":{}}'

    with pytest.raises(TopicExistsError):
        zk_layout.create_topic("clicks", {0: [0]}, {0: STATE})


def test_failed_topic_transaction_leaves_nothing(zk_layout: ZkLayout, zk: KazooClient) -> None:
    """The config node is rewritten inside the transaction; when that write is refused, nothing is created."""
    read_only = [make_acl("world", "anyone", read=True)]
    zk.ensure_path(paths.CONFIG_TOPICS)
    zk.create(paths.topic_config_path("half"), b'{"version":1,"config":{}}', acl=read_only)
    with pytest.raises(ZooKeeperError, match="creating topic 'half' failed"):
        zk_layout.create_topic("half", {0: [0], 1: [0]}, {0: STATE, 1: STATE})
    assert zk.exists(paths.topic_path("half")) is None
    assert zk_layout.topics() == []


def test_create_topic_overwrites_leftover_config(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk.create(paths.topic_config_path("again"), b'{"version":1,"config":{"x":"y"}}', makepath=True)
    zk_layout.create_topic("again", {0: [0]}, {0: STATE}, config={"retention.ms": "1000"})
    topic_config = zk_layout.topic_config("again")
    assert topic_config is not None and topic_config.config == {"retention.ms": "1000"}


def test_create_topic_validates(zk_layout: ZkLayout) -> None:
    with pytest.raises(ConfigError):
        zk_layout.create_topic("bad/name", {0: [0]}, {})
    with pytest.raises(ConfigError):
        zk_layout.create_topic("gap", {0: [0], 2: [0]}, {})
    with pytest.raises(ConfigError):
        zk_layout.create_topic("t", {0: [0]}, {1: STATE})


def test_conditional_partition_state(zk_layout: ZkLayout) -> None:
    zk_layout.create_topic("t", {0: [0, 1]}, {0: STATE})
    versioned = zk_layout.partition_state_versioned("t", 0)
    assert versioned is not None
    state, version = versioned
    moved = PartitionState(leader=1, leader_epoch=1, isr=(1,), controller_epoch=1)
    assert zk_layout.set_partition_state("t", 0, moved, version=version) == version + 1
    with pytest.raises(StaleVersionError):
        zk_layout.set_partition_state("t", 0, state, version=version)
    assert zk_layout.partition_state("t", 0) == moved


def test_watch_fires_on_topic_creation(zk_layout: ZkLayout) -> None:
    fired = threading.Event()
    assert zk_layout.topics(watch=lambda _event: fired.set()) == []
    assert zk_layout.topic_assignment("later", watch=lambda _event: fired.set()) is None
    zk_layout.create_topic("later", {0: [0]}, {})
    assert fired.wait(5)


def test_offsets_round_trip(zk_layout: ZkLayout, zk: KazooClient) -> None:
    assert zk_layout.read_offset("etl", "clicks", 0) is None
    zk_layout.write_offset("etl", "clicks", 0, 4213)
    zk_layout.write_offset("etl", "clicks", 10, 7)
    zk_layout.write_offset("etl", "views", 2, 0)
    zk_layout.write_offset("etl", "clicks", 0, 4214)
    assert zk.get(paths.offset_path("etl", "clicks", 0))[0] == b"4214"
    assert zk_layout.offsets("etl") == {("clicks", 0): 4214, ("clicks", 10): 7, ("views", 2): 0}
    assert zk_layout.groups() == ["etl"]


def test_metaq_offsets_read_tolerantly(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk.create(paths.offset_path("g", "t", 0), b"1349857398021-10240", makepath=True)
    zk.create(paths.topic_offsets_path("g", "t") + "/0-1", b"-1-0")  # MetaQ partition name: skipped
    assert zk_layout.offsets("g") == {("t", 0): 10240}


def test_malformed_node_names_full_path(zk_layout: ZkLayout, zk: KazooClient) -> None:
    zk.create(paths.offset_path("g", "t", 0), b"not a number", makepath=True)
    with pytest.raises(MalformedNodeError) as e:
        zk_layout.read_offset("g", "t", 0)
    assert e.value.path == f"{zk.chroot}/consumers/g/offsets/t/0"


def test_consumer_registration_and_ownership(zk_layout: ZkLayout, make_zk_client: Callable[..., KazooClient]) -> None:
    count = TopicCount({"clicks": 2}, timestamp_ms=1700000000000)
    zk_layout.register_consumer("etl", "etl_host1-1700000000000-6b2a1f0c", count)
    assert zk_layout.consumer_registrations("etl") == {"etl_host1-1700000000000-6b2a1f0c": count}

    thread = "etl_host1-1700000000000-6b2a1f0c-0"
    assert zk_layout.claim_partition("etl", "clicks", 0, thread)
    assert zk_layout.claim_partition("etl", "clicks", 0, thread)  # idempotent for the owner
    rival = ZkLayout(make_zk_client())
    assert not rival.claim_partition("etl", "clicks", 0, "etl_other-1-00000000-0")
    assert not rival.release_partition("etl", "clicks", 0, "etl_other-1-00000000-0")
    assert zk_layout.owners("etl") == {("clicks", 0): thread}
    assert zk_layout.release_partition("etl", "clicks", 0, thread)
    assert zk_layout.owner("etl", "clicks", 0) is None


def test_chroot_isolation(zk_connect: str, zk_server: object) -> None:
    hosts = zk_connect.rsplit("/", 1)[0]
    with session(f"{zk_connect}/a/b") as a, session(f"{zk_connect}/c") as c:
        ZkLayout(a).write_offset("g", "t", 0, 1)
        assert ZkLayout(c).offsets("g") == {}
        assert ZkLayout(a).offsets("g") == {("t", 0): 1}
        assert a.exists("/consumers/g/offsets/t/0") is not None
    with session(hosts) as root:
        chroot = zk_connect[len(hosts) :]
        assert root.exists(f"{chroot}/a/b/consumers/g/offsets/t/0") is not None
        assert root.exists("/consumers/g") is None


def test_lost_connection_is_unavailable(zk_connect: str) -> None:
    client = connect(zk_connect)
    client.stop()
    with pytest.raises(ZooKeeperUnavailableError):
        ZkLayout(client).topics()
    client.close()


def test_fenced_offsets_lock_out_the_previous_owner(zk_layout: ZkLayout, zk: KazooClient) -> None:
    """A member that fenced a partition commits; the one fenced out afterwards commits nothing."""
    tp = ("t", 0)
    old = zk_layout.fence_offsets("g", [tp])[tp]
    assert old.offset is None  # created holding -1: "no offset", as Kafka 0.8 reads it
    assert zk.get("/consumers/g/offsets/t/0")[0] == b"-1"
    versions, lost = zk_layout.commit_fenced_offsets("g", {tp: (10, old.version)})
    assert not lost and zk_layout.read_offset("g", "t", 0) == 10
    new = zk_layout.fence_offsets("g", [tp])[tp]  # a new owner takes over
    assert new.offset == 10 and new.version > versions[tp]
    stale_versions, stale_lost = zk_layout.commit_fenced_offsets("g", {tp: (5, versions[tp])})
    assert stale_lost == {tp} and not stale_versions
    assert zk_layout.read_offset("g", "t", 0) == 10  # never moved backwards
    ok, none_lost = zk_layout.commit_fenced_offsets("g", {tp: (12, new.version), ("t", 1): (3, 99)})
    assert tp in ok and none_lost == {("t", 1)}
    assert zk_layout.read_offset("g", "t", 0) == 12
