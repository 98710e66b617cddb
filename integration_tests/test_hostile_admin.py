"""Hostile admin input against a real broker (third round): what one request, ZooKeeper node or ops command can
do is bounded, and a well-behaved client keeps working beside it.

The well-behaved client is confluent-kafka (librdkafka): it commits, produces and reads back.
"""

from __future__ import annotations

import subprocess
import sys

import confluent_kafka
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.broker.replication.election import initial_state
from metaq.broker.topics import create_topic
from metaq.errors import ErrorCode, MalformedNodeError
from metaq.testing.broker import request, topic_leaders
from metaq.testing.probes import RssSampler, WellBehavedClient
from metaq.testing.wait import wait_until
from zk_layout import PartitionState, ZkLayout


def metaq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=60)


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def test_internal_topics_are_never_deleted(broker: BrokerProcess, make_topic, zk_connect: str,
                                           zk_layout: ZkLayout) -> None:
    make_topic("kept")
    make_topic("doomed")
    peers.confluent_commit(broker.bootstrap, "g", "kept", 42)
    [offsets_dir] = (broker.data_dir / "logs-0").glob("__consumer_offsets-*")  # the group's partition

    # the ops command refuses, and marks nothing (before: "Deleted topic __consumer_offsets", exit 0)
    result = metaq("topics", "delete", "__consumer_offsets", "doomed", "--zookeeper", zk_connect)
    assert result.returncode == 1, result.stdout
    assert "__consumer_offsets is an internal topic" in result.stderr and "Traceback" not in result.stderr
    assert zk_layout.topics_marked_for_deletion() == []

    # hand-written markers: an internal topic's and an invalid name's are removed and logged; they do not
    # block the deletion of a real topic marked beside them
    client = zk_layout.client
    for name in ("__consumer_offsets", "__transaction_state", "no valid name"):
        client.create(f"/admin/delete_topics/{name}", b"", makepath=True)
    client.create("/admin/delete_topics/doomed", b"")
    wait_until(lambda: zk_layout.topics_marked_for_deletion() == [], 30, "every marker handled")
    assert zk_layout.topic_assignment("doomed") is None
    assert zk_layout.topic_assignment("__consumer_offsets") is not None
    log = broker.log_tail(400)
    assert "ignored and removed the deletion request /admin/delete_topics/__consumer_offsets" in log
    assert "ignored and removed the deletion request /admin/delete_topics/no valid name" in log
    assert offsets_dir.exists()
    assert committed(broker.bootstrap, "g", "kept") == 42
    peers.confluent_produce(broker.bootstrap, "kept", 0, [(b"k", b"v", 1_700_000_000_000)])


# --- partition counts ----------------------------------------------------------------------------


def _create(bootstrap: str, name: str, partitions: int) -> tuple[int, str | None]:
    req = CreateTopicsRequest[4](topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=30000, validate_only=False)
    [result] = request(bootstrap, req, CreateTopicsResponse, 4, timeout=60).topics
    return result.error_code, result.error_message


def _grow(bootstrap: str, name: str, count: int) -> tuple[int, str | None]:
    req = CreatePartitionsRequest[1](topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=name, count=count, assignments=None)], timeout_ms=30000, validate_only=False)
    [result] = request(bootstrap, req, CreatePartitionsResponse, 1, timeout=60).results
    return result.error_code, result.error_message


def test_partition_counts_are_bounded_per_request_and_per_cluster(broker_cluster, make_topic,
                                                                  zk_layout: ZkLayout) -> None:
    broker = broker_cluster.add(0, **{"metaq.max.partitions.per.request": 40, "metaq.max.partitions": 101,
                                      "offsets.topic.num.partitions": 1})
    make_topic("probe")
    assert broker.pid is not None
    with RssSampler(broker.pid) as rss, WellBehavedClient(broker.bootstrap, "probe") as client:
        # before: 1,000,000 partitions took 51 s of CPU and +1 GB; 2^31-1 a MemoryError
        for count in (1_000_000, 2**31 - 1):
            code, message = _create(broker.bootstrap, "huge", count)
            assert code == ErrorCode.POLICY_VIOLATION and "metaq.max.partitions.per.request" in (message or "")
            code, message = _grow(broker.bootstrap, "probe", count)
            assert code == ErrorCode.POLICY_VIOLATION and "metaq.max.partitions.per.request" in (message or "")
        # legal requests up to the cluster's bound (probe 1 + __consumer_offsets 1 + 40 + 40 + 19 = 101), then
        # refused
        assert _create(broker.bootstrap, "a", 40) == (0, None)
        assert _create(broker.bootstrap, "b", 40) == (0, None)
        assert _grow(broker.bootstrap, "probe", 20) == (0, None)
        wait_until(lambda: len(topic_leaders(broker.bootstrap, "probe")) == 20, 30, "probe grown")
        code, message = _create(broker.bootstrap, "c", 2)
        assert code == ErrorCode.POLICY_VIOLATION and "metaq.max.partitions" in (message or ""), message
        code, message = _grow(broker.bootstrap, "a", 41)
        assert code == ErrorCode.POLICY_VIOLATION and "metaq.max.partitions" in (message or ""), message
    assert zk_layout.topic_assignment("huge") is None and zk_layout.topic_assignment("c") is None
    assert not client.failures, client.failures[:3]
    assert rss.growth_mb < 40, f"broker RSS grew {rss.growth_mb:.0f} MB"


def initial_states(assignment: dict[int, tuple[int, ...]]) -> dict[int, PartitionState]:
    """First states as the controller writes them (its own rule, every replica live)."""
    states = {p: initial_state(r, r, controller_epoch=1) for p, r in assignment.items()}
    return {p: state for p, state in states.items() if state is not None}


def test_a_topic_too_large_for_one_zookeeper_request_is_written_in_several(zk_layout: ZkLayout) -> None:
    """6,000 partitions' nodes are ~1.2 MB of multi-op: before, one request over jute.maxbuffer, and the server
    closed the session's connection (ConnectionLoss)."""
    session = zk_layout.client.client_id
    zk_layout.create_topic("wide", {p: (0,) for p in range(6000)}, initial_states({p: (0,) for p in range(6000)}))
    assert sorted(zk_layout.remaining_partition_nodes("wide")) == list(range(6000))
    assert len(zk_layout.topic_assignment("wide").partitions) == 6000
    assert zk_layout.partition_state("wide", 5999) is not None

    # growing: the nodes of an earlier attempt that failed half-way are removed first; the topic node is
    # written last, so the assignment names only partitions whose nodes exist
    zk_layout.client.create("/brokers/topics/wide/partitions/6001/state", b"junk", makepath=True)
    grown = {p: (0,) for p in range(12000)}
    zk_layout.add_partitions("wide", grown, initial_states({p: (0,) for p in range(6000, 12000)}))
    assert sorted(zk_layout.remaining_partition_nodes("wide")) == list(range(12000))
    assert zk_layout.partition_state("wide", 6001) == initial_states({6001: (0,)})[6001]
    assert zk_layout.client.client_id == session and zk_layout.client.connected


# --- names ---------------------------------------------------------------------------------------


def _delete(bootstrap: str, name: str) -> int:
    req = DeleteTopicsRequest[4](topic_names=[name], timeout_ms=30000)
    [result] = request(bootstrap, req, DeleteTopicsResponse, 4, timeout=60).responses
    return int(result.error_code)


def test_long_topic_names_delete_cleanly_and_colliding_names_are_refused(broker: BrokerProcess, zk_connect: str,
                                                                         zk_layout: ZkLayout) -> None:
    logs = broker.data_dir / "logs-0"
    name = "l" * 240  # legal (up to 249); "<name>-0.<32 hex>-delete" would be 282 bytes
    for _ in range(2):  # before: ENAMETOOLONG half-way, and the re-created topic answered INCONSISTENT_TOPIC_ID
        assert _create(broker.bootstrap, name, 1) == (0, None)
        wait_until(lambda: topic_leaders(broker.bootstrap, name) == {0: 0}, 30, "the long-named topic")
        peers.confluent_produce(broker.bootstrap, name, 0, [(b"k", b"v", 1_700_000_000_000)])
        assert [m.value for m in peers.confluent_consume(broker.bootstrap, name, 0, 0, 1)] == [b"v"]
        assert _delete(broker.bootstrap, name) == 0
        wait_until(lambda: not [p for p in logs.iterdir() if p.name.startswith("lllll")], 30, "the log removed")
        assert zk_layout.topic_assignment(name) is None

    # a.b and a_b would share metric names: the second is refused, by the API and by the ops command
    assert _create(broker.bootstrap, "a.b", 1) == (0, None)
    code, message = _create(broker.bootstrap, "a_b", 1)
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION and message == "Topic 'a_b' collides with existing topics: a.b"
    result = metaq("topics", "create", "--topic", "a_b", "--partitions", "1", "--zookeeper", zk_connect)
    assert result.returncode == 1 and "collides with existing topics: a.b" in result.stderr
    assert zk_layout.topic_assignment("a_b") is None


# --- ZooKeeper garbage -----------------------------------------------------------------------------


def test_one_bad_zookeeper_node_affects_only_its_own_topic(broker_cluster, zk_connect: str,
                                                           zk_layout: ZkLayout) -> None:
    brokers = [broker_cluster.add(0), broker_cluster.add(1)]
    create_topic(zk_layout, "rep", 1, replication_factor=2)
    wait_until(lambda: all(topic_leaders(b.bootstrap, "rep") for b in brokers), 30, "rep served")
    client = zk_layout.client
    client.create("/brokers/topics/bad", b"{not json")  # before: no elections while it existed
    client.set("/controller", b"garbage")  # before: the controller stalled, never healing
    wait_until(lambda: _controller_ok(zk_layout), 30, "a controller elected over the garbage")
    assert "removed a /controller node that does not decode" in "".join(b.log_tail(300) for b in brokers)

    # the controller still moves leaders: the leader of rep-0 dies, the other replica takes over
    leader = topic_leaders(brokers[0].bootstrap, "rep")[0]
    brokers[leader].kill()
    survivor = brokers[1 - leader]
    wait_until(lambda: topic_leaders(survivor.bootstrap, "rep") == {0: survivor.broker_id}, 60, "a new leader")
    assert "leaving out a topic whose node does not decode" in "".join(b.log_tail(400) for b in brokers)

    # the ops tools list the rest and name the bad node (before: exit 1 for the whole cluster)
    listed = metaq("topics", "list", "--zookeeper", zk_connect)
    assert listed.returncode == 0, listed.stderr
    assert "rep" in listed.stdout and "/brokers/topics/bad" in listed.stdout
    described = metaq("topics", "describe", "--zookeeper", zk_connect)
    assert described.returncode == 0, described.stderr
    assert "Topic rep:" in described.stdout and "/brokers/topics/bad" in described.stderr


def _controller_ok(layout: ZkLayout) -> bool:
    try:
        return layout.controller() is not None
    except MalformedNodeError:
        return False
