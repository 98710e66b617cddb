"""Replicated partitions on three real broker processes and a real ZooKeeper (docs/architecture.md,
"Replication"): assignment, the controller's failover, followers, the high watermark and acks=all."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.batches import good_batch
from metaq.testing.broker import BrokerCluster, request
from metaq.testing.wait import wait_until
from zk_layout import PartitionState, ZkLayout

SESSION_MS = 4000
FAST = {"zookeeper.session.timeout.ms": SESSION_MS, "replica.lag.time.max.ms": 3000,
        "replica.fetch.wait.max.ms": 200, "replica.fetch.backoff.ms": 200,
        "replica.high.watermark.checkpoint.interval.ms": 500}


@pytest.fixture
def three(broker_cluster: BrokerCluster) -> Callable[..., list[BrokerProcess]]:
    def start(**properties: Any) -> list[BrokerProcess]:
        return [broker_cluster.add(i, **{**FAST, **properties}) for i in range(3)]

    return start


def _state(zk_layout: ZkLayout, topic: str, partition: int = 0) -> PartitionState:
    state = zk_layout.partition_state(topic, partition)
    assert state is not None
    return state


def _rf3_topic(zk_layout: ZkLayout, brokers: list[BrokerProcess], topic: str, **config: str) -> int:
    """Create a one-partition RF-3 topic; wait until every broker serves it; return its leader."""
    create_topic(zk_layout, topic, 1, replication_factor=3, config=config)
    for b in brokers:
        wait_until(lambda b=b: _metadata(b.bootstrap, topic) is not None, 20, f"{topic} on broker {b.broker_id}")
    return _state(zk_layout, topic).leader


def _metadata(bootstrap: str, topic: str) -> Any:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return meta.partitions[0]


def _produce_all(bootstrap: str, topic: str, values: list[bytes], **conf: Any) -> list[peers.Msg]:
    items = [(b"k", v, 1_700_000_000_000 + i) for i, v in enumerate(values)]
    return peers.confluent_produce(bootstrap, topic, 0, items, acks="all", **conf)


def _raw_produce(bootstrap: str, topic: str, acks: int, timeout_ms: int = 5000) -> tuple[int, int]:
    req = ProduceRequest[7](transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=good_batch(3))])])
    part = request(bootstrap, req, ProduceResponse, 7, timeout=30).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def _consumer_fetch(bootstrap: str, topic: str, offset: int = 0) -> tuple[int, int, bytes]:
    """(error, high watermark, record bytes) of a consumer's Fetch v4."""
    req = FetchRequest[4](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                          topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                              FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=offset,
                                                                     partition_max_bytes=1 << 20)])])
    part = request(bootstrap, req, FetchResponse, 4).responses[0].partitions[0]
    return part.error_code, part.high_watermark, bytes(part.records or b"")


def _latest(bootstrap: str, topic: str) -> int:
    req = ListOffsetsRequest[1](replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    part = request(bootstrap, req, ListOffsetsResponse, 1).topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def _connect(zk_layout: ZkLayout) -> str:
    """The test's zookeeper.connect, chroot included."""
    host, port = zk_layout.client.hosts[0]
    return f"{host}:{port}{zk_layout.client.chroot or ''}"


def _metaq_json(zk_layout: ZkLayout, *args: str) -> Any:
    """Run the metaq CLI against the test's ZooKeeper and parse its --json output."""
    out = subprocess.run([sys.executable, "-m", "metaq", *args, "--zookeeper", _connect(zk_layout), "--json"],
                         capture_output=True, check=True, timeout=60).stdout
    return json.loads(out)


def _unhealthy(zk_layout: ZkLayout) -> list[tuple[str, int, int | None, str]]:
    found = _metaq_json(zk_layout, "topics", "list", "--under-replicated")["partitions"]
    return [(p["topic"], p["partition"], p["leader"], p["status"]) for p in found]


@pytest.fixture
def cleanup() -> Iterator[list[BrokerProcess]]:
    paused: list[BrokerProcess] = []
    yield paused
    for b in paused:
        if b.proc is not None and b.proc.poll() is None:
            b.resume()


def test_rf3_topic_is_assigned_and_described_with_its_isr(three, zk_layout: ZkLayout) -> None:
    brokers = three()
    create_topic(zk_layout, "rf3", 3, replication_factor=3)
    assignment = zk_layout.topic_assignment("rf3")
    assert assignment is not None
    assert all(sorted(r) == [0, 1, 2] for r in assignment.partitions.values())
    assert sorted(r[0] for r in assignment.partitions.values()) == [0, 1, 2]  # one preferred leader each
    for p in range(3):
        state = _state(zk_layout, "rf3", p)
        assert state.leader == assignment.partitions[p][0] and sorted(state.isr) == [0, 1, 2]
    wait_until(lambda: _metadata(brokers[1].bootstrap, "rf3") is not None, 20, "rf3 visible")
    meta = _metadata(brokers[1].bootstrap, "rf3")
    assert sorted(meta.replicas) == [0, 1, 2] and sorted(meta.isrs) == [0, 1, 2]
    holder = zk_layout.controller()
    assert holder is not None and zk_layout.controller_epoch() == 1
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": brokers[2].bootstrap})
    wait_until(lambda: admin.list_topics(timeout=10).controller_id == holder.broker_id, 20, "the controller named")
    out = subprocess.run([peers.KCAT, "-b", brokers[2].bootstrap, "-L", "-t", "rf3", "-J"], capture_output=True,
                         check=True, timeout=30).stdout
    listed = json.loads(out)["topics"][0]["partitions"]
    assert len(listed) == 3
    for part in listed:
        assert sorted(r["id"] for r in part["replicas"]) == [0, 1, 2]
        assert sorted(r["id"] for r in part["isrs"]) == [0, 1, 2]


def test_cli_creates_replicated_topics_and_refuses_more_replicas_than_brokers(three, zk_layout: ZkLayout) -> None:
    three()
    created = _metaq_json(zk_layout, "topics", "create", "--topic", "cli", "--partitions", "3",
                          "--replication-factor", "3")
    assert created["partitions"] == 3
    assignment = zk_layout.topic_assignment("cli")
    assert assignment is not None and all(len(r) == 3 for r in assignment.partitions.values())
    refused = subprocess.run([sys.executable, "-m", "metaq", "topics", "create", "--topic", "big",
                              "--replication-factor", "4", "--zookeeper", _connect(zk_layout)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "replication factor: 4 larger than available brokers: 3" in refused.stderr
    assert zk_layout.topic_assignment("big") is None


def test_leader_kill_elects_from_isr_and_keeps_every_acknowledged_record(three, zk_layout: ZkLayout,
                                                                      broker_cluster: BrokerCluster) -> None:
    brokers = three()
    leader = _rf3_topic(zk_layout, brokers, "failover")
    first = _produce_all(brokers[0].bootstrap, "failover", [b"a%d" % i for i in range(200)])
    assert [m.offset for m in first] == list(range(200))
    # every follower has them before the leader dies (acks=all answered once the ISR had them)
    epoch = _state(zk_layout, "failover").leader_epoch
    killed_at = time.monotonic()
    brokers[leader].kill()
    wait_until(lambda: _state(zk_layout, "failover").leader not in (leader, -1), 30, "a new leader")
    elected_after = time.monotonic() - killed_at
    state = _state(zk_layout, "failover")
    assert state.leader_epoch == epoch + 1 and leader not in state.isr
    assert elected_after < SESSION_MS / 1000 + 10  # session timeout plus the controller's work (loaded host)
    survivor = brokers[state.leader]
    second = _produce_all(survivor.bootstrap, "failover", [b"b%d" % i for i in range(100)],
                          retries=100, **{"retry.backoff.ms": 200})
    assert [m.offset for m in second] == list(range(200, 300))
    got = peers.confluent_consume(survivor.bootstrap, "failover", 0, confluent_kafka.OFFSET_BEGINNING, 300)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in first + second]

    # the old leader returns as a follower, catches up and rejoins the ISR
    brokers[leader].start()
    wait_until(lambda: sorted(_state(zk_layout, "failover").isr) == [0, 1, 2], 60, "the old leader back in the ISR")
    assert _state(zk_layout, "failover").leader == state.leader
    # followers keep the high watermark they hear from the leader
    checkpoint = brokers[leader].data_dir / f"logs-{leader}" / "replication-offset-checkpoint"
    wait_until(lambda: checkpoint.exists() and "failover 0 300\n" in checkpoint.read_text(), 30, "the HW checkpoint")
    # ... holding the same records at the same offsets: kill the others, it is the only one left to lead
    for b in brokers:
        if b.broker_id != leader:
            b.kill()
    wait_until(lambda: _state(zk_layout, "failover").leader == leader, 30, "the old leader leads again")
    got = peers.confluent_consume(brokers[leader].bootstrap, "failover", 0, confluent_kafka.OFFSET_BEGINNING, 300)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in first + second]


def test_consumers_never_read_above_the_high_watermark(three, zk_layout: ZkLayout, cleanup) -> None:
    brokers = three(**{"zookeeper.session.timeout.ms": 15000, "replica.lag.time.max.ms": 30000})
    leader = _rf3_topic(zk_layout, brokers, "hw")
    bootstrap = brokers[leader].bootstrap
    followers = [b for b in brokers if b.broker_id != leader]
    for b in followers:
        b.pause()
        cleanup.append(b)
    error, offset = _raw_produce(bootstrap, "hw", acks=1)
    assert (error, offset) == (0, 0)  # the leader wrote it ...
    error, hw, records = _consumer_fetch(bootstrap, "hw")
    assert (error, hw, records) == (0, 0, b"")  # ... but no follower has it: consumers do not see it
    assert _latest(bootstrap, "hw") == 0
    for b in followers:
        b.resume()
    wait_until(lambda: _consumer_fetch(bootstrap, "hw")[1] == 3, 30, "the high watermark reaches 3")
    assert len(_consumer_fetch(bootstrap, "hw")[2]) > 0
    assert _latest(bootstrap, "hw") == 3


def test_a_restarted_follower_rejoins_the_isr_on_the_fetch_that_catches_it_up(three, zk_layout: ZkLayout) -> None:
    """Kafka expands the ISR on the follower's fetch (maybeExpandIsr), not at the periodic lag check: with
    replica.lag.time.max.ms 10 minutes (a check every 5 minutes), a killed and restarted follower is back in
    the ISR as soon as it has caught up, so acks=all does not run with a smaller ISR for minutes."""
    brokers = three(**{"replica.lag.time.max.ms": 600000})
    leader = _rf3_topic(zk_layout, brokers, "rejoin")
    follower = brokers[(leader + 1) % 3]
    _produce_all(brokers[leader].bootstrap, "rejoin", [b"a%d" % i for i in range(100)])
    follower.kill()
    wait_until(lambda: follower.broker_id not in _state(zk_layout, "rejoin").isr, 30, "the controller shrinks the ISR")
    _produce_all(brokers[leader].bootstrap, "rejoin", [b"b%d" % i for i in range(100)])  # the follower lacks these
    follower.start()
    wait_until(lambda: sorted(_state(zk_layout, "rejoin").isr) == [0, 1, 2], 60, "the follower back in the ISR")
    assert _state(zk_layout, "rejoin").leader == leader


def test_min_insync_replicas_refuses_acks_all_when_the_isr_shrank_to_the_leader(three, zk_layout: ZkLayout) -> None:
    """Jepsen 2013: with the ISR down to the leader alone, an acks=all write must fail, not be acknowledged
    and then lost when another replica takes over."""
    brokers = three()
    leader = _rf3_topic(zk_layout, brokers, "jepsen", **{"min.insync.replicas": "2"})
    bootstrap = brokers[leader].bootstrap
    assert _raw_produce(bootstrap, "jepsen", acks=-1) == (0, 0)
    followers = [b for b in brokers if b.broker_id != leader]
    for b in followers:
        b.kill()
    wait_until(lambda: _state(zk_layout, "jepsen").isr == (leader,), 30, "the ISR shrinks to the leader")
    wait_until(lambda: _raw_produce(bootstrap, "jepsen", acks=-1)[0] == 19, 10, "NOT_ENOUGH_REPLICAS")
    assert _unhealthy(zk_layout) == [("jepsen", 0, leader, "under-replicated")]
    assert _raw_produce(bootstrap, "jepsen", acks=1)[0] == 0  # acks=1 is the client's choice to risk it
    # the leader dies too: the followers come back, but neither was in the ISR: offline, nothing elected
    brokers[leader].kill()
    for b in followers:
        b.start()
    wait_until(lambda: _state(zk_layout, "jepsen").leader == -1, 60,  # the session expiry, then a controller
              "offline without unclean election")
    # a topic created now gets its first state in a controller pass that saw the followers registered, the same
    # pass that decides "jepsen": once that state exists, that pass elected nobody
    create_topic(zk_layout, "jepsen-probe", 1, assignment={0: [followers[0].broker_id]})
    wait_until(lambda: zk_layout.partition_state("jepsen-probe", 0) is not None, 30, "a controller pass")
    assert _state(zk_layout, "jepsen").leader == -1
    assert _unhealthy(zk_layout) == [("jepsen", 0, None, "offline")]
    described = _metaq_json(zk_layout, "topics", "describe", "jepsen")["topics"][0]["partitions"][0]
    assert (described["status"], described["isr"]) == ("offline", [leader])
    brokers[leader].start()
    wait_until(lambda: _state(zk_layout, "jepsen").leader == leader, 30, "the last ISR member leads again")
    got = peers.confluent_consume(brokers[leader].bootstrap, "jepsen", 0, confluent_kafka.OFFSET_BEGINNING, 3)
    assert [m.offset for m in got] == [0, 1, 2]  # the acknowledged batch


def test_a_stalled_follower_leaves_the_isr_after_the_lag_time_and_rejoins(three, zk_layout: ZkLayout,
                                                                         cleanup) -> None:
    """SIGSTOP a follower for longer than replica.lag.time.max.ms but shorter than its ZooKeeper session:
    the leader (not the controller) shrinks the ISR, and the acks=all produce that waited for it completes."""
    brokers = three(**{"zookeeper.session.timeout.ms": 30000, "replica.lag.time.max.ms": 2000})
    leader = _rf3_topic(zk_layout, brokers, "lag")
    stalled = next(b for b in brokers if b.broker_id != leader)
    stalled.pause()
    cleanup.append(stalled)
    error, offset = _raw_produce(brokers[leader].bootstrap, "lag", acks=-1, timeout_ms=25000)
    assert (error, offset) == (0, 0)  # answered once the ISR no longer waited for the stalled follower
    state = _state(zk_layout, "lag")
    assert stalled.broker_id not in state.isr and len(state.isr) == 2
    assert zk_layout.broker(stalled.broker_id) is not None  # still registered: the leader shrank the ISR
    stalled.resume()
    wait_until(lambda: sorted(_state(zk_layout, "lag").isr) == [0, 1, 2], 30, "the follower rejoins the ISR")
    assert _state(zk_layout, "lag").leader_epoch == state.leader_epoch


def test_a_returning_leader_truncates_what_it_alone_had_by_leader_epoch(broker_cluster: BrokerCluster,
                                                                       zk_layout: ZkLayout, cleanup) -> None:
    """KIP-101: the old leader wrote records (acks=1) that no follower had, died, and a follower took over
    and wrote other records at the same offsets. Back as a follower, the old leader must cut its own tail
    (found with OffsetForLeaderEpoch) so that every offset holds one record on every replica."""
    brokers = [broker_cluster.add(0, **{**FAST, "zookeeper.session.timeout.ms": 4000}),
               *(broker_cluster.add(i, **{**FAST, "zookeeper.session.timeout.ms": 20000,
                                          "replica.lag.time.max.ms": 30000}) for i in (1, 2))]
    brokers[0].stop()  # broker 0 must lead with a long lag time too, so that its ISR does not shrink
    brokers[0].properties["replica.lag.time.max.ms"] = 30000
    brokers[0].start()
    create_topic(zk_layout, "diverge", 1, assignment={0: [0, 1, 2]})
    for b in brokers:
        wait_until(lambda b=b: _metadata(b.bootstrap, "diverge") is not None, 20, f"visible on {b.broker_id}")
    first = _produce_all(brokers[0].bootstrap, "diverge", [b"a%d" % i for i in range(10)])
    assert [m.offset for m in first] == list(range(10))
    followers = brokers[1:]
    for b in followers:
        b.pause()
        cleanup.append(b)
    time.sleep(1.0)  # the followers' pending long polls get their (empty) answers before the next writes
    for _ in range(2):  # offsets 10..15 on the leader alone
        assert _raw_produce(brokers[0].bootstrap, "diverge", acks=1)[0] == 0
    brokers[0].kill()
    for b in followers:
        b.resume()
    wait_until(lambda: _state(zk_layout, "diverge").leader == 1, 30, "broker 1 leads")
    second = _produce_all(brokers[1].bootstrap, "diverge", [b"b%d" % i for i in range(4)],
                          retries=100, **{"retry.backoff.ms": 200})
    end = second[-1].offset + 1
    assert second[0].offset < 16  # the new leader reuses offsets the old one had written
    truth = peers.confluent_consume(brokers[1].bootstrap, "diverge", 0, confluent_kafka.OFFSET_BEGINNING, end)
    assert [m.offset for m in truth] == list(range(end))
    brokers[0].start()
    wait_until(lambda: sorted(_state(zk_layout, "diverge").isr) == [0, 1, 2], 60, "broker 0 back in the ISR")
    for b in followers:
        b.kill()
    wait_until(lambda: _state(zk_layout, "diverge").leader == 0, 30, "broker 0 leads again")
    got = peers.confluent_consume(brokers[0].bootstrap, "diverge", 0, confluent_kafka.OFFSET_BEGINNING, end)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in truth]
    assert got[:10] == first and got[-4:] == second
    assert _latest(brokers[0].bootstrap, "diverge") == end  # what only broker 0 had is gone


def test_sigterm_moves_leadership_away_before_the_broker_stops(three, zk_layout: ZkLayout) -> None:
    """Controlled shutdown: the stopping leader leaves /brokers/ids first, so the controller elects another
    ISR member at once (not after the session timeout) and the partition is never offline."""
    brokers = three(**{"zookeeper.session.timeout.ms": 30000})
    leader = _rf3_topic(zk_layout, brokers, "rolling")
    first = _produce_all(brokers[leader].bootstrap, "rolling", [b"a%d" % i for i in range(50)])
    seen: list[int] = []
    done = threading.Event()

    def watch_leader() -> None:
        while not done.is_set():
            seen.append(_state(zk_layout, "rolling").leader)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch_leader, name="test-leader-watch")
    watcher.start()
    started = time.monotonic()
    try:
        assert brokers[leader].stop() == 0
        stopped_after = time.monotonic() - started
    finally:
        done.set()
        watcher.join()
    state = _state(zk_layout, "rolling")
    assert state.leader not in (leader, -1) and leader not in state.isr
    assert -1 not in seen  # never offline
    assert stopped_after < 20  # well inside the 30 s session timeout an unclean stop would cost
    survivor = brokers[state.leader]
    second = _produce_all(survivor.bootstrap, "rolling", [b"b%d" % i for i in range(50)])
    got = peers.confluent_consume(survivor.bootstrap, "rolling", 0, confluent_kafka.OFFSET_BEGINNING, 100)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in first + second]

    # back, in sync, and made leader again by a preferred leader election (it is the first replica)
    brokers[leader].start()
    wait_until(lambda: sorted(_state(zk_layout, "rolling").isr) == [0, 1, 2], 60, "the restarted broker in sync")
    elected = _metaq_json(zk_layout, "topics", "elect-leaders", "rolling")
    assert elected == {"leaders": [{"topic": "rolling", "partition": 0, "leader": leader}]}
    assert _state(zk_layout, "rolling").leader_epoch == state.leader_epoch + 1
    assert zk_layout.preferred_election_request() is None  # the controller deleted the request
    got = peers.confluent_consume(brokers[leader].bootstrap, "rolling", 0, confluent_kafka.OFFSET_BEGINNING, 100)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in first + second]


def test_acks_all_under_load_survives_a_leader_kill(three, zk_layout: ZkLayout) -> None:
    """confluent-kafka produces acks=all without pause while the leader is killed (kill -9): after the
    client's own retries nothing failed, and every acknowledged record is at its acknowledged offset on
    the new leader."""
    brokers = three()
    leader = _rf3_topic(zk_layout, brokers, "load", **{"min.insync.replicas": "2"})
    bootstrap = ",".join(b.bootstrap for b in brokers)
    acked: dict[int, bytes] = {}
    errors: list[object] = []

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = msg.value()

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                         "message.timeout.ms": 60000, "retry.backoff.ms": 200,
                                         "enable.idempotence": False})
    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            producer.produce("load", value=b"v%d" % sent, partition=0, on_delivery=on_delivery)
            sent += 1
            producer.poll(0.005)

    produce_for(2.0)
    brokers[leader].kill()
    produce_for(2.0)
    wait_until(lambda: _state(zk_layout, "load").leader not in (leader, -1), 30, "a new leader")
    produce_for(2.0)
    assert producer.flush(90) == 0
    assert not errors, errors[:3]
    assert len(acked) == sent  # one delivery report per record, each at its own offset
    new_leader = brokers[_state(zk_layout, "load").leader]
    end = max(acked) + 1
    got = peers.confluent_consume(new_leader.bootstrap, "load", 0, confluent_kafka.OFFSET_BEGINNING, end, timeout=60)
    stored = {m.offset: m.value for m in got}
    assert all(stored.get(offset) == value for offset, value in acked.items())


def test_a_zombie_leader_acknowledges_nothing_with_acks_all(three, zk_layout: ZkLayout, cleanup) -> None:
    """SIGSTOP the leader past its ZooKeeper session: another ISR member leads. Resumed, the old leader
    (a zombie until it reads the new state) must not acknowledge an acks=all write, and once it follows
    again every replica agrees with the new leader."""
    brokers = three()
    leader = _rf3_topic(zk_layout, brokers, "zombie")
    first = _produce_all(brokers[leader].bootstrap, "zombie", [b"a%d" % i for i in range(20)])
    zombie = brokers[leader]
    zombie.pause()
    cleanup.append(zombie)
    wait_until(lambda: _state(zk_layout, "zombie").leader not in (leader, -1), 30, "a new leader")
    new_leader = brokers[_state(zk_layout, "zombie").leader]
    second = _produce_all(new_leader.bootstrap, "zombie", [b"b%d" % i for i in range(20)])
    zombie.resume()
    error, _ = _raw_produce(zombie.bootstrap, "zombie", acks=-1, timeout_ms=3000)
    assert error in (6, 7, 19, 20)  # NOT_LEADER, timed out, or too few replicas: never acknowledged
    wait_until(lambda: sorted(_state(zk_layout, "zombie").isr) == [0, 1, 2], 60, "the old leader rejoins")
    for b in brokers:
        if b is not zombie:
            b.kill()
    wait_until(lambda: _state(zk_layout, "zombie").leader == leader, 30, "the old leader leads again")
    got = peers.confluent_consume(zombie.bootstrap, "zombie", 0, confluent_kafka.OFFSET_BEGINNING, 40)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in first + second]
    assert _latest(zombie.bootstrap, "zombie") == 40


def _replica_logs(brokers: list[BrokerProcess], topic: str) -> dict[int, dict[int, bytes | None]]:
    """offset -> value of every record each (stopped) broker's log of ``topic``-0 holds, read from disk."""
    from metaq.broker.log.config import LogConfig
    from metaq.broker.log.partition_log import PartitionLog
    from tests.broker import decode

    logs = {}
    for b in brokers:
        plog = PartitionLog.open(b.data_dir / f"logs-{b.broker_id}" / f"{topic}-0", topic, 0, LogConfig(),
                                 recover=True)
        try:
            piece = plog.read(plog.log_start_offset, 1 << 30)
            logs[b.broker_id] = {o: v for o, _, v in decode(piece.read_bytes())} if piece is not None else {}
        finally:
            plog.close()
    return logs


def test_ten_leader_kills_under_acks_all_load_lose_nothing_acknowledged(three, zk_layout: ZkLayout) -> None:
    """kill -9 the leader, restart it, ten times, under a steady acks=all load with min.insync.replicas 2.
    Afterwards every replica's log holds every acknowledged record at its acknowledged offset, and all
    replicas agree on every offset they all have."""
    brokers = three()
    _rf3_topic(zk_layout, brokers, "loop", **{"min.insync.replicas": "2"})
    acked: dict[int, bytes] = {}
    errors: list[object] = []
    stop = threading.Event()

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = msg.value()

    def produce() -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
                                             "retry.backoff.ms": 200, "enable.idempotence": False})
        n = 0
        while not stop.is_set():
            producer.produce("loop", value=b"v%d" % n, partition=0, on_delivery=on_delivery)
            n += 1
            producer.poll(0.01)
        unflushed.append(producer.flush(120))

    unflushed: list[int] = []
    thread = threading.Thread(target=produce, name="test-loop-producer")
    thread.start()
    try:
        for _ in range(10):
            leader = _state(zk_layout, "loop").leader
            brokers[leader].kill()
            wait_until(lambda leader=leader: _state(zk_layout, "loop").leader not in (leader, -1), 30, "new leader")
            brokers[leader].start()
            wait_until(lambda: sorted(_state(zk_layout, "loop").isr) == [0, 1, 2], 60, "full ISR again")
    finally:
        stop.set()
        thread.join(180)
    assert unflushed == [0] and not errors, (unflushed, errors[:3])
    assert len(acked) > 100
    for b in brokers:
        b.stop()
    logs = _replica_logs(brokers, "loop")
    for broker_id, records in logs.items():
        missing = [o for o, v in acked.items() if records.get(o) != v]
        assert not missing, f"broker {broker_id} lacks acknowledged offsets {missing[:10]}"
    common = set.intersection(*(set(r) for r in logs.values()))
    assert all(len({logs[b][o] for b in logs}) == 1 for o in common)


def test_auto_leader_rebalance_gives_leadership_back_to_the_preferred_replica(three, zk_layout: ZkLayout) -> None:
    brokers = three(**{"leader.imbalance.check.interval.seconds": 2})
    preferred = _rf3_topic(zk_layout, brokers, "rebalance")
    brokers[preferred].kill()
    wait_until(lambda: _state(zk_layout, "rebalance").leader not in (preferred, -1), 30, "a new leader")
    brokers[preferred].start()
    wait_until(lambda: _state(zk_layout, "rebalance").leader == preferred, 60, "the preferred leader back")
    assert sorted(_state(zk_layout, "rebalance").isr) == [0, 1, 2]


def test_a_follower_behind_the_leaders_log_start_restarts_there_and_rejoins(three, zk_layout: ZkLayout,
                                                                           cleanup) -> None:
    """The leader deletes records (DeleteRecords, bounded by its high watermark) that a stalled, shrunk-out
    follower never fetched: resumed, the follower restarts its log at the leader's log start and rejoins."""
    brokers = three(**{"zookeeper.session.timeout.ms": 30000, "replica.lag.time.max.ms": 2000})
    leader = _rf3_topic(zk_layout, brokers, "start")
    stalled = next(b for b in brokers if b.broker_id != leader)
    stalled.pause()
    cleanup.append(stalled)
    wait_until(lambda: stalled.broker_id not in _state(zk_layout, "start").isr, 30, "the ISR shrinks")
    acked = _produce_all(brokers[leader].bootstrap, "start", [b"a%d" % i for i in range(10)])
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": brokers[leader].bootstrap})
    tp = confluent_kafka.TopicPartition("start", 0, 8)
    assert admin.delete_records([tp])[tp].result(timeout=30).low_watermark == 8
    beyond = confluent_kafka.TopicPartition("start", 0, 11)
    with pytest.raises(confluent_kafka.KafkaException):  # above the high watermark (10): refused
        admin.delete_records([beyond])[beyond].result(timeout=30)
    stalled.resume()
    wait_until(lambda: sorted(_state(zk_layout, "start").isr) == [0, 1, 2], 60, "the follower rejoins")
    for b in brokers:
        if b is not stalled:
            b.kill()
    wait_until(lambda: _state(zk_layout, "start").leader == stalled.broker_id, 60, "the follower leads")
    got = peers.confluent_consume(stalled.bootstrap, "start", 0, confluent_kafka.OFFSET_BEGINNING, 2)
    assert [(m.offset, m.value) for m in got] == [(m.offset, m.value) for m in acked[8:]]
