"""ClusterClient against a real ZooKeeper and real broker processes: leader look-up, a leader that moves,
ListOffsets batched per leader, and connection settings."""

from __future__ import annotations

import threading
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.metadata import MetadataRequest

from metaq.client import cluster as cluster_module
from metaq.client.cluster import EARLIEST, LATEST, ClusterClient, Leader, NoLeader
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.errors import BrokerConnectionError
from metaq.testing.broker import BrokerCluster
from metaq.testing.wait import wait_until
from zk_layout import BrokerInfo, PartitionState, ZkLayout

BASE_TS = 1_700_000_000_000


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    """``count`` records with timestamps BASE_TS + 1000 * i."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=BASE_TS + 1000 * i)
    assert producer.flush(30) == 0


def leaders_in_zookeeper(layout: ZkLayout, topic: str, partitions: int) -> dict[int, int]:
    return {p: layout.partition_state(topic, p).leader for p in range(partitions)}


@pytest.fixture
def two_brokers(broker_cluster: BrokerCluster) -> BrokerCluster:
    broker_cluster.add(0)
    broker_cluster.add(1)
    return broker_cluster


@pytest.fixture
def client(zk_layout: ZkLayout):
    with ClusterClient(zk_layout, ConnectionSettings(client_id="cluster-test", request_timeout_ms=5000)) as c:
        yield c


def test_leaders_are_the_brokers_zookeeper_names(two_brokers, make_topic, zk_layout, client) -> None:
    topic = make_topic("cc-leaders", partitions=4)
    expected = leaders_in_zookeeper(zk_layout, topic, 4)
    assert set(expected.values()) == {0, 1}
    keys = [(topic, p) for p in range(4)]
    ports = {b.broker_id: b.port for b in two_brokers.brokers}
    for fresh in (False, True):
        found = client.leaders(keys, fresh=fresh)
        assert found == {(topic, p): Leader("127.0.0.1", ports[b], b) for p, b in expected.items()}
    info = client.topic(topic)
    assert info.partitions == info.available == (0, 1, 2, 3) and info.partition_set == {0, 1, 2, 3}
    assert client.leader_for(topic, 9) is None


def test_partitions_without_a_live_leader_say_why(zk_layout, client) -> None:
    zk_layout.create_topic("cc-orphans", {0: [7], 1: [7], 2: [8]}, {
        0: PartitionState(leader=-1, leader_epoch=0, isr=(), controller_epoch=1),
        1: PartitionState(leader=7, leader_epoch=0, isr=(7,), controller_epoch=1)})
    zk_layout.register_broker(BrokerInfo(id=8, host=None, port=-1, endpoints=("SSL://127.0.0.1:9999",),
                                         timestamp_ms=0))
    keys = [("cc-orphans", 0), ("cc-orphans", 1), ("cc-orphans", 2), ("cc-nothing", 0)]
    expected = {("cc-orphans", 0): NoLeader("no leader"), ("cc-orphans", 1): NoLeader("leader 7 is not registered", 7),
                ("cc-orphans", 2): NoLeader("no leader"), ("cc-nothing", 0): NoLeader("no leader")}
    assert client.leaders(keys) == expected
    fresh = client.leaders(keys[:2], fresh=True)
    assert fresh == {k: expected[k] for k in keys[:2]}
    answers = client.list_offsets(keys, LATEST)
    assert {k: (a.offset, a.error, a.no_leader) for k, a in answers.items()} == {
        k: (None, v.reason, True) for k, v in expected.items()}
    # the producer's guess: without a state node, the first live replica leads (8 has no PLAINTEXT address)
    guessing = ClusterClient(zk_layout, assume_preferred_leader=True)
    assert guessing.leaders([("cc-orphans", 2)]) == {
        ("cc-orphans", 2): NoLeader("leader 8 has no PLAINTEXT listener", 8)}
    # an SSL client uses broker 8's SSL listener
    ssl_client = ClusterClient(zk_layout, ConnectionSettings(security=SecurityConfig(security_protocol="SSL")),
                               assume_preferred_leader=True)
    assert ssl_client.leaders([("cc-orphans", 2)]) == {("cc-orphans", 2): Leader("127.0.0.1", 9999, 8)}


def test_list_offsets_sends_one_request_per_leader_and_timestamp(two_brokers, make_topic, zk_layout, client,
                                                                 monkeypatch) -> None:
    topic = make_topic("cc-batched", partitions=4)
    owner = leaders_in_zookeeper(zk_layout, topic, 4)
    bootstrap = {b.broker_id: b.bootstrap for b in two_brokers.brokers}
    for p in range(4):
        produce(bootstrap[owner[p]], topic, p, 10 + p)
    sent: list[tuple[int, list[tuple[str, int]], int]] = []
    real = cluster_module.send_list_offsets

    def spy(conn: Any, keys: Any, timestamp: int, isolation_level: int = 0) -> Any:
        keys = list(keys)
        sent.append((conn.port, keys, timestamp))
        return real(conn, keys, timestamp, isolation_level)

    monkeypatch.setattr(cluster_module, "send_list_offsets", spy)
    keys = [(topic, p) for p in range(4)]
    starts, ends, at_time = client.list_offsets_at(keys, [EARLIEST, LATEST, BASE_TS + 5500])
    assert {k: a.offset for k, a in starts.items()} == {k: 0 for k in keys}
    assert {k: a.offset for k, a in ends.items()} == {(topic, p): 10 + p for p in range(4)}
    assert {k: a.offset for k, a in at_time.items()} == {k: 6 for k in keys}  # first record at or after
    assert {k: a.broker_id for k, a in ends.items()} == {(topic, p): owner[p] for p in range(4)}
    port_of = {b.broker_id: b.port for b in two_brokers.brokers}
    per_broker = {b: [k for k in keys if owner[k[1]] == b] for b in (0, 1)}
    assert sorted(sent, key=lambda s: (s[0], s[2])) == sorted(
        [(port_of[b], per_broker[b], ts) for b in (0, 1) for ts in (EARLIEST, LATEST, BASE_TS + 5500)],
        key=lambda s: (s[0], s[2]))
    sent.clear()
    assert client.list_offsets(keys, BASE_TS + 10**9)[(topic, 0)].offset == -1  # after the last record
    assert len(sent) == 2  # still one request per leader, on the connections already open


def test_a_moved_leader_is_read_again_after_not_leader(two_brokers, make_topic, zk_layout, client) -> None:
    topic = make_topic("cc-move", partitions=2)
    partition = next(p for p, b in leaders_in_zookeeper(zk_layout, topic, 2).items() if b == 0)
    key = (topic, partition)
    produce(two_brokers.brokers[0].bootstrap, topic, partition, 3)
    assert client.list_offsets([key], LATEST)[key].offset == 3
    zk_layout.set_partition_state(topic, partition, PartitionState(leader=1, leader_epoch=1, isr=(1,),
                                                                   controller_epoch=1))
    assert client.leader_for(topic, partition).broker_id == 0  # cached for metadata.max.age.ms (5 min)
    seen: list[tuple[int | None, int]] = []

    def answered_by_the_new_leader() -> bool:
        answer = client.list_offsets([key], LATEST)[key]
        seen.append((answer.broker_id, answer.error_code))
        return answer.broker_id == 1 and answer.offset is not None

    wait_until(answered_by_the_new_leader, 20, lambda: f"broker 1 to answer ListOffsets (answers: {seen})")
    assert (0, 6) in seen, seen  # broker 0 said NOT_LEADER_OR_FOLLOWER ...
    assert seen[-1] == (1, 0), seen  # ... so the topic was read again, and broker 1 answered
    assert client.leader_for(topic, partition).broker_id == 1


def test_a_lost_connection_drops_the_topic_from_the_cache(broker_cluster, make_topic, zk_layout, client) -> None:
    broker = broker_cluster.add(0)
    topic = make_topic("cc-lost", partitions=1)
    key = (topic, 0)
    assert client.list_offsets([key], EARLIEST)[key].offset == 0
    read_at = client.topic(topic).read_at
    broker.stop()
    answer = client.list_offsets([key], EARLIEST)[key]
    assert answer.offset is None and answer.error.startswith("broker 0: ") and not answer.no_leader
    assert client.topic(topic).read_at > read_at  # read again at once, not after metadata.max.age.ms


def test_threads_share_one_client(broker, make_topic, client) -> None:
    topic = make_topic("cc-threads", partitions=3)
    for p in range(3):
        produce(broker.bootstrap, topic, p, 5)
    keys = [(topic, p) for p in range(3)]
    results: list[dict[Any, Any]] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            for _ in range(20):
                results.append({k: a.offset for k, a in client.list_offsets(keys, LATEST).items()})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=ask, name=f"cc-ask-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(results) == 80 and all(r == {k: 5 for k in keys} for r in results)


def test_requests_share_one_connection_per_broker_and_reconnect(broker, make_topic, client) -> None:
    topic = make_topic("cc-request", partitions=2)
    leader = client.leader_for(topic, 0)
    fields = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    answer = client.request(leader, MetadataRequest, fields)
    assert [t.name for t in answer.topics] == [topic]
    conn = client._connection(leader)
    client.list_offsets([(topic, 0), (topic, 1)], LATEST)
    assert client._connection(leader) is conn and conn.is_connected  # the same connection for every request
    broker.stop()
    with pytest.raises(BrokerConnectionError):
        client.request(leader, MetadataRequest, fields)
    broker.start()
    answer = client.request(client.leader(topic, 0, fresh=True), MetadataRequest, fields)
    assert [p.error_code for t in answer.topics for p in t.partitions] == [0, 0]
