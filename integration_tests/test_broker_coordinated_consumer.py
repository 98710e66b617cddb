"""``group.coordination=kafka``: metaq's consumer API on Kafka's group protocol, against a real metaq broker.

Members split the partitions through the broker's coordinator (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat), rebalance when one joins, leaves or is SIGKILLed (session expiry), commit with their generation
and resume from OffsetFetch; a metaq member and a confluent-kafka (librdkafka) member share a group; the
committed offsets are what ``metaq groups describe`` and confluent's ``committed()`` show.

One broker for the module, with group.min.session.timeout.ms lowered so that a dead member is noticed in ~2 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from metaq.admin.broker_groups import BrokerGroups
from metaq.broker.process import BrokerProcess
from metaq.childproc import die_with_parent
from metaq.cli.demo_harness import ConsumerProcess
from metaq.consumer import Consumer
from metaq.consumer.hash_ring import consistent_hash_assign
from metaq.consumer.listener import MessageConsumer
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.topic_filter import Whitelist
from metaq.errors import ConfigError
from metaq.producer import Producer
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.broker import SharedBroker
from metaq.testing.group import GroupHarness, SteadyProducer, StreamReader, check_delivery, owned_by_hooks
from metaq.testing.kafka_fixtures import kafka_matrix
from metaq.testing.kafka_versions import V2_8, V3_9
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import ZooKeeperEndpoint
from metaq.zkclient import session
from zk_layout import ZkLayout, split_connect

SESSION_MS = 2000
QUAD_PARTITIONS = 8
HEARTBEAT_MS = 300
BROKER = {"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 4}
MEMBER = {"group.coordination": "kafka", "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
          "max.poll.interval.ms": 10000, "auto.commit.interval.ms": 300, "auto.offset.reset": "smallest",
          "consumer.timeout.ms": 100, "rebalance.backoff.ms": 500, "rebalance.max.retries": 10}


@pytest.fixture(scope="module")
def coord(zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    hosts, base = split_connect(zk_server.connect_string)
    zk_connect = f"{hosts}{base}/metaq-coord-{uuid.uuid4().hex}"
    broker = BrokerProcess(zk_connect, 0, tmp_path_factory.mktemp("coord"), properties=BROKER).start()
    try:
        yield SharedBroker(broker, zk_connect)
    finally:
        broker.stop()


def _produce(zk_connect: str, topic: str, partitions: int, per_partition: int) -> set[tuple[int, int]]:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, f"m-{i}".encode(), partition=i % partitions)
                   for i in range(per_partition * partitions)]
        producer.flush()
        return {(f.result().partition, f.result().offset) for f in futures}


def _reader(coord: SharedBroker, group: str, topic: str, **properties: Any) -> StreamReader:
    return StreamReader({"group.id": group, "zookeeper.connect": coord.zk_connect, **MEMBER, **properties}, topic)


def _split(readers: list[StreamReader], partitions: int) -> bool:
    owned = [r.owned() for r in readers]
    union = set().union(*owned)
    return (union == set(range(partitions)) and sum(len(o) for o in owned) == partitions
            and all(r.consumer.state.state == "STABLE" for r in readers))


def test_a_wildcard_member_follows_the_topics_its_filter_matches(coord: SharedBroker) -> None:
    """create_message_streams_by_filter with group.coordination=kafka: the member subscribes to the topics the
    whitelist matches and, after metadata.max.age.ms, rejoins when a new matching topic appears."""
    first = coord.topic("wild-a", partitions=2)
    coord.topic("tame", partitions=1)
    acked = _produce(coord.zk_connect, first, 2, 5)
    consumer = Consumer({"group.id": "wild-g", "zookeeper.connect": coord.zk_connect, **MEMBER,
                         "metadata.max.age.ms": 500, "partition.assignment.strategy": "cooperative-sticky",
                         "consumer.timeout.ms": -1})
    try:
        [stream] = consumer.create_message_streams_by_filter(Whitelist("wild-.*"), 1)
        seen: list[tuple[str, int, int]] = []
        drain = threading.Thread(target=lambda: seen.extend((m.topic, m.partition, m.offset) for m in stream),
                                 name="wild-reader", daemon=True)
        drain.start()
        wait_until(lambda: {(p, o) for t, p, o in seen if t == first} >= acked, 30, "wild-a read")
        second = coord.topic("wild-b", partitions=2)
        more = _produce(coord.zk_connect, second, 2, 5)
        wait_until(lambda: {(p, o) for t, p, o in seen if t == second} >= more, 30, "the new topic wild-b read")
        assert sorted(consumer.state.owned) == [(first, 0), (first, 1), (second, 0), (second, 1)]
        assert {t for t, _, _ in seen} == {first, second}  # never the unmatched "tame"
    finally:
        consumer.shutdown()


def test_config_rejects_an_unknown_coordination() -> None:
    with pytest.raises(ConfigError, match="group.coordination"):
        Consumer({"group.id": "g", "zookeeper.connect": "127.0.0.1:1", "group.coordination": "etcd"})


def test_two_members_split_and_rebalance_on_leave(coord: SharedBroker) -> None:
    topic = coord.topic("split", partitions=6)
    group = "split-g"
    acked = _produce(coord.zk_connect, topic, 6, 20)
    a = _reader(coord, group, topic)
    b = _reader(coord, group, topic)
    try:
        wait_until(lambda: _split([a, b], 6) and a.owned() and b.owned(), 30, "two members to split 6 partitions")
        assert len(a.owned()) == len(b.owned()) == 3  # range: 3 + 3
        wait_until(lambda: set(a.seen) | set(b.seen) >= acked, 30, "every message read")
        more = _produce(coord.zk_connect, topic, 6, 10)
        wait_until(lambda: set(a.seen) | set(b.seen) >= more, 30, "the second batch read")
        b.close()  # commits, then LeaveGroup: the survivor takes everything now, not after the session timeout
        wait_until(lambda: _split([a], 6), 30, "the survivor to own all 6 partitions")
        last = _produce(coord.zk_connect, topic, 6, 10)
        wait_until(lambda: set(a.seen) >= last, 30, "the third batch read by the survivor")
        counts = Counter(a.seen + b.seen)
        assert set(counts) == acked | more | last
        assert [key for key, n in counts.items() if n > 1] == []  # clean hand-over: committed before revoking
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_metaq_and_librdkafka_members_share_a_group(coord: SharedBroker, assignor: str) -> None:
    """Same protocol type ("consumer") and assignor name: the coordinator puts a metaq member and a
    confluent-kafka member in one generation; each reads its half; the offsets metaq commits are what
    confluent's committed() and `metaq groups describe` show."""
    topic = coord.topic(f"mixed-{assignor}", partitions=6)
    group = f"mixed-{assignor}-g"
    acked = _produce(coord.zk_connect, topic, 6, 20)
    ends = {p: 1 + max(o for q, o in acked if q == p) for p in range(6)}
    a = _reader(coord, group, topic, **{"partition.assignment.strategy": assignor})
    wait_until(lambda: a.owned() == set(range(6)), 30, "the metaq member to own all 6 partitions")
    peer = confluent_kafka.Consumer({
        "bootstrap.servers": coord.broker.bootstrap, "group.id": group, "partition.assignment.strategy": assignor,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300})
    peer_seen: list[tuple[int, int]] = []
    peer_owned: set[int] = set()
    stop = threading.Event()

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        peer_owned.clear()
        peer_owned.update(tp.partition for tp in partitions)

    def poll() -> None:
        while not stop.is_set():
            message = peer.poll(0.1)
            if message is not None and message.error() is None:
                peer_seen.append((message.partition(), message.offset()))
                peer.commit(message=message, asynchronous=False)

    peer.subscribe([topic], on_assign=on_assign)
    poller = threading.Thread(target=poll, name="librdkafka-member", daemon=True)
    poller.start()
    try:
        wait_until(lambda: len(peer_owned) == len(a.owned()) == 3 and a.owned() | peer_owned == set(range(6))
                   and a.consumer.state.state == "STABLE", 60, "the metaq and librdkafka members to split 6 partitions")
        # what Kafka's RangeAssignor / RoundRobinAssignor give the member sorted first (member ids: client id
        # "mixed-..." for metaq, "rdkafka-..." for librdkafka)
        assert a.owned() == ({0, 1, 2} if assignor == "range" else {0, 2, 4})
        more = _produce(coord.zk_connect, topic, 6, 10)
        ends = {p: 1 + max(o for q, o in acked | more if q == p) for p in range(6)}
        wait_until(lambda: set(a.seen) | set(peer_seen) >= acked | more, 60, "every message read")
        counts = Counter(a.seen + peer_seen)
        assert [key for key, n in counts.items() if n > 1] == []  # metaq committed before handing over
        mine = sorted(a.owned())
        a.consumer.commit_offsets()
        stop.set()
        poller.join(5)
        committed = peer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(6)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == ends
        described = subprocess.run([sys.executable, "-m", "metaq", "groups", "describe", group, "--json",
                                    "--zookeeper", coord.zk_connect], capture_output=True, text=True, timeout=120)
        assert described.returncode == 0, described.stderr
        rows = {r["partition"]: r["offset"] for r in json.loads(described.stdout)["partitions"] if r["topic"] == topic}
        assert rows == ends, (mine, rows)
    finally:
        stop.set()
        a.close()
        peer.close()


def test_metaq_consistent_hash_assignor(coord: SharedBroker) -> None:
    """Two metaq members on the metaq-only protocol: the coordinator accepts it, the split is the hash ring's
    (computed here from the member ids, it equals what the leader assigned), and when one leaves the survivor
    takes the whole ring."""
    topic = coord.topic("ring", partitions=8)
    ring = {"partition.assignment.strategy": "metaq-consistent-hash"}
    a, b = _reader(coord, "ring-g", topic, **ring), _reader(coord, "ring-g", topic, **ring)
    try:
        wait_until(lambda: a.owned() | b.owned() == set(range(8)) and not a.owned() & b.owned()
                   and a.consumer.state.state == b.consumer.state.state == "STABLE", 30, "the ring to split 8")
        members = {r.consumer.member_id or "": r for r in (a, b)}
        expected = consistent_hash_assign({m: (topic,) for m in members}, {topic: 8})
        assert {m: {p for _, p in parts} for m, parts in expected.items()} == {m: r.owned() for m, r in members.items()}
        b.close()
        wait_until(lambda: a.owned() == set(range(8)), 30, "the survivor to own the ring")
    finally:
        a.close()
        b.close()


def test_static_member_restarts_without_a_rebalance(coord: SharedBroker) -> None:
    """group.instance.id: a static member that stops (no LeaveGroup) and comes back within session.timeout.ms
    gets its partitions back in the same generation; the other member never rebalances. A second process with
    the same instance id fences the first (FENCED_INSTANCE_ID: it owns nothing and stays out)."""
    topic = coord.topic("static", partitions=4)
    group = "static-g"
    acked = _produce(coord.zk_connect, topic, 4, 10)
    static = {"group.instance.id": "static-a", "session.timeout.ms": 15000}
    a = _reader(coord, group, topic, **static)
    b = _reader(coord, group, topic)
    try:
        wait_until(lambda: _split([a, b], 4) and a.owned() and b.owned(), 30, "two members to split 4 partitions")
        wait_until(lambda: set(a.seen) | set(b.seen) >= acked, 30, "every message read")
        generation, mine, theirs = b.consumer.state.generation, a.owned(), b.owned()
        a.close()
        a = _reader(coord, group, topic, **static)
        wait_until(lambda: a.owned() == mine, 30, "the restarted static member to own its partitions again")
        more = _produce(coord.zk_connect, topic, 4, 10)
        wait_until(lambda: set(a.seen) | set(b.seen) >= more, 30, "the second batch read")
        assert (b.consumer.state.generation, b.owned(), a.consumer.state.generation) == (generation, theirs, generation)
        assert [key for key, n in Counter(a.seen + b.seen).items() if n > 1] == []

        twin = _reader(coord, group, topic, **static)
        try:
            wait_until(lambda: a.consumer.state.state == "FAILED" and not a.owned(), 30,
                       "the first static member to be fenced by its twin")
            assert "FENCED_INSTANCE_ID" in (a.consumer.state.last_error or "")
            wait_until(lambda: twin.owned() | b.owned() == set(range(4)), 30, "the twin to take over")
        finally:
            twin.close()
    finally:
        a.close()
        b.close()


def _balanced(harness: GroupHarness, partitions: int, members: int) -> bool:
    owned = owned_by_hooks(harness)
    sizes = [len(parts) for parts in owned.values()]
    return (len(owned) == members and sum(sizes) == partitions and set().union(*owned.values()) == set(
        range(partitions)) and max(sizes) - min(sizes) <= 1)


def test_three_members_join_leave_and_kill(coord: SharedBroker, tmp_path: Path) -> None:
    """Separate processes under a steady producer: three members split 12 partitions, one leaves (SIGTERM),
    one joins, one is SIGKILLed (its partitions move after the session timeout). Every acknowledged message
    is read; duplicates only inside the killed member's uncommitted window; commits never go backwards."""
    topic = coord.topic("fleet", partitions=12)
    props = {k: v for k, v in MEMBER.items() if k != "consumer.timeout.ms"}
    harness = GroupHarness(coord.zk_connect, "fleet-g", topic, tmp_path, properties=props)
    producer = SteadyProducer(coord.zk_connect, topic, rate=300)
    producer.start()
    try:
        for _ in range(3):
            harness.add_member().wait_started()
        wait_until(lambda: _balanced(harness, 12, 3), 60, lambda: f"3 members to split 12: {owned_by_hooks(harness)}")
        harness.members[0].stop()
        wait_until(lambda: _balanced(harness, 12, 2), 60, lambda: f"2 members to split 12: {owned_by_hooks(harness)}")
        harness.add_member().wait_started()
        wait_until(lambda: _balanced(harness, 12, 3), 60, lambda: f"3 members again: {owned_by_hooks(harness)}")
        victim = harness.members[1]
        victim.kill()
        wait_until(lambda: _balanced(harness, 12, 2), 60,
                   lambda: f"the survivors to take over: {owned_by_hooks(harness)}")
        acked = producer.finish()
        wait_until(lambda: not check_delivery(harness.events(), acked).missing, 60, "every acked message read")
    finally:
        producer.finish()
        harness.stop_all()
    check_delivery(harness.events(), acked, failed_members=[victim.name]).assert_ok()


@kafka_matrix("broker-coordinated consumer group (group.coordination=kafka)", (V3_9, V2_8))
def test_two_members_on_apache_kafka(kafka_broker: ApacheKafkaBroker) -> None:
    """The same two-member run against Apache Kafka's own group coordinator (its minimum session is 6 s); the
    second member has no ZooKeeper: it finds leaders with Kafka's Metadata answers (bootstrap.servers)."""
    topic, group = "coordinated", "coordinated-g"
    kafka_broker.create_topic(topic, partitions=4)
    properties = {"group.id": group, "zookeeper.connect": kafka_broker.zk_connect, **MEMBER,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    brokers_only = {**properties, "zookeeper.connect": "", "bootstrap.servers": kafka_broker.bootstrap}
    acked = _produce(kafka_broker.zk_connect, topic, 4, 20)
    a, b = StreamReader(properties, topic), StreamReader(brokers_only, topic)
    try:
        wait_until(lambda: _split([a, b], 4) and len(a.owned()) == len(b.owned()) == 2, 60,
                   "two members to split 4 partitions at Kafka's coordinator")
        wait_until(lambda: set(a.seen) | set(b.seen) >= acked, 60, "every message read")
        b.close()
        wait_until(lambda: _split([a], 4), 60, "the survivor to own all 4 partitions")
        more = _produce(kafka_broker.zk_connect, topic, 4, 10)
        wait_until(lambda: set(a.seen) >= more, 60, "the second batch read by the survivor")
        assert [key for key, n in Counter(a.seen + b.seen).items() if n > 1] == []
        assert set(a.seen) | set(b.seen) == acked | more
        a.consumer.commit_offsets()
        peer = confluent_kafka.Consumer({**kafka_broker.librdkafka_config(), "group.id": group})
        try:
            committed = peer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(4)], timeout=20)
        finally:
            peer.close()
        ends = {p: 1 + max(o for q, o in acked | more if q == p) for p in range(4)}
        assert {tp.partition: tp.offset for tp in committed} == ends
    finally:
        a.close()
        b.close()


class _Stuck:
    """A listener that blocks on the first message until released; records every message it is handed."""

    def __init__(self) -> None:
        self.received: list[tuple[int, int]] = []
        self.release = threading.Event()

    def receive_message(self, message: MessageAndMetadata) -> None:
        self.received.append((message.partition, message.offset))
        if len(self.received) == 1:
            self.release.wait(60)


def test_a_listener_stuck_past_max_poll_interval_leaves_the_group(coord: SharedBroker) -> None:
    """MessageConsumer listeners on the group protocol. A listener blocked past max.poll.interval.ms while chunks
    wait: the member leaves the group (the other member takes its partition now), delivers nothing more, and
    its commits cannot move the partition's offset; once the listener returns it joins again."""
    topic = coord.topic("stuck", partitions=2)
    group = "stuck-g"
    acked = _produce(coord.zk_connect, topic, 2, 5)
    listener = _Stuck()
    stuck = MessageConsumer({"group.id": group, "zookeeper.connect": coord.zk_connect, **MEMBER,
                             "max.poll.interval.ms": 3000, "metaq.max.fetch.retries": 0})
    stuck.subscribe(topic, 1 << 20, listener).complete_subscribe()
    other = _reader(coord, group, topic)
    try:
        wait_until(lambda: listener.received, 30, "the stuck listener to get its first message")
        [(partition, first)] = listener.received
        more = _produce(coord.zk_connect, topic, 2, 5)  # chunks now wait behind the stuck listener
        wait_until(lambda: other.owned() == {0, 1}, 30, "the other member to take the stuck member's partition")
        wait_until(lambda: set(other.seen) >= acked | more, 30, "the other member to read everything")
        assert listener.received == [(partition, first)]
        listener.release.set()  # the rest of its chunk is not delivered: the partition was revoked
        wait_until(lambda: len(other.owned()) == len(stuck.state.owned) == 1 and stuck.state.state == "STABLE", 30,
                   "the stuck member to rejoin once its listener returned")
        ends = {p: 1 + max(o for q, o in acked | more if q == p) for p in range(2)}
        other.consumer.commit_offsets()
        assert [key for key in listener.received[1:] if key[1] < ends[key[0]]] == []  # the other member's, committed
        peer = confluent_kafka.Consumer({"bootstrap.servers": coord.broker.bootstrap, "group.id": group})
        try:
            [tp] = peer.committed([confluent_kafka.TopicPartition(topic, partition)], timeout=10)
        finally:
            peer.close()
        assert tp.offset >= ends[partition]  # the other member's commit stands; the stuck member's could not land
    finally:
        listener.release.set()
        stuck.shutdown()
        other.close()


class _Batches:
    """A batch listener recording what it was handed."""

    def __init__(self) -> None:
        self.received: list[tuple[int, int]] = []

    def receive_messages(self, batch: Sequence[MessageAndMetadata]) -> None:
        self.received.extend((m.partition, m.offset) for m in batch)


def test_batch_listeners_split_a_group(coord: SharedBroker) -> None:
    """Two MessageConsumers with batch listeners on the group protocol read every message once between them."""
    topic = coord.topic("batches", partitions=4)
    group = "batches-g"
    acked = _produce(coord.zk_connect, topic, 4, 25)
    listeners = [_Batches(), _Batches()]
    consumers = [MessageConsumer({"group.id": group, "zookeeper.connect": coord.zk_connect, **MEMBER})
                 for _ in listeners]
    try:
        for consumer, listener in zip(consumers, listeners, strict=True):
            consumer.subscribe(topic, 1 << 20, listener).complete_subscribe()
        wait_until(lambda: all(len(c.state.owned) == 2 for c in consumers), 30, "two listeners to split 4 partitions")
        more = _produce(coord.zk_connect, topic, 4, 25)
        wait_until(lambda: {k for lst in listeners for k in lst.received} >= acked | more, 30, "every message read")
        both = listeners[0].received + listeners[1].received
        assert [key for key, n in Counter(both).items() if n > 1] == []
    finally:
        for consumer in consumers:
            consumer.shutdown()


class _LibrdkafkaProcess(ConsumerProcess):
    """A confluent-kafka member in its own process (integration_tests/librdkafka_member.py), reporting the
    events metaq's verifiable consumer reports, so that it can join a GroupHarness and be SIGKILLed."""

    def __init__(self, harness: GroupHarness, bootstrap: str, assignor: str) -> None:
        self.name = f"rdkafka-{len(harness.members)}"
        self.events_path = harness.work_dir / f"{self.name}.jsonl"
        self.log_path = harness.work_dir / f"{self.name}.log"
        script = Path(__file__).with_name("librdkafka_member.py")
        args = [sys.executable, str(script), bootstrap, harness.group, harness.topic, assignor, str(SESSION_MS)]
        with open(self.events_path, "ab") as out, open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, preexec_fn=die_with_parent())
        self.paused = False
        harness.members.append(self)


def _revoked_since(member: ConsumerProcess, mark: int) -> set[int]:
    return {p["partition"] for e in member.events()[mark:] if e["name"] == "partitions_revoked"
            for p in e["partitions"]}


def _kafka_split(assignor: str, member_ids: Sequence[str], partitions: int) -> dict[str, set[int]]:
    """What Kafka's RangeAssignor / RoundRobinAssignor give members subscribed to one topic (their javadoc):
    members in member-id order; range gives each a contiguous run, the first ``partitions % n`` one more;
    roundrobin deals the partitions out in turn."""
    ordered = sorted(member_ids)
    if assignor == "roundrobin":
        return {m: set(range(i, partitions, len(ordered))) for i, m in enumerate(ordered)}
    quota, extra = divmod(partitions, len(ordered))
    starts = [i * quota + min(i, extra) for i in range(len(ordered) + 1)]
    return {m: set(range(starts[i], starts[i + 1])) for i, m in enumerate(ordered)}


def _coordinator_view(groups: BrokerGroups, group: str) -> dict[str, set[int]] | None:
    """member id -> partitions as the group coordinator's DescribeGroups has them, None unless Stable."""
    found = groups.list().groups.get(group)
    if found is None or found.state != "Stable":
        return None
    return {m.member_id: {p for _, p in m.assignment} for m in found.members}


def _settled(harness: GroupHarness, groups: BrokerGroups, partitions: int,
             members: int) -> dict[str, set[int]] | None:
    """The coordinator's view once the members' own views (their listener logs) are balanced and agree with it."""
    if not _balanced(harness, partitions, members):
        return None
    view = _coordinator_view(groups, harness.group)
    own = sorted(sorted(parts) for parts in owned_by_hooks(harness).values())
    return view if view is not None and sorted(sorted(parts) for parts in view.values()) == own else None


class _QuadRun(threading.Thread):
    """One assignor's run of the 2 metaq + 2 librdkafka scenario, in a thread so that the three assignors share
    the module's broker and their waits (process starts, session timeouts) overlap."""

    def __init__(self, coord: SharedBroker, work_dir: Path, assignor: str) -> None:
        super().__init__(name=f"quad-{assignor}", daemon=True)
        self.coord, self.assignor = coord, assignor
        self.topic = coord.topic(f"quad-{assignor}", partitions=QUAD_PARTITIONS)
        props = {k: v for k, v in MEMBER.items() if k != "consumer.timeout.ms"}
        self.harness = GroupHarness(coord.zk_connect, f"quad-{assignor}-g", self.topic, work_dir / assignor,
                                    properties={**props, "partition.assignment.strategy": assignor})
        self.victims: list[str] = []
        self.acked: dict[tuple[int, int], bytes] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._scenario()
        except BaseException as e:  # re-raised by the test in the main thread
            self.error = e

    def _wait_settled(self, groups: BrokerGroups, members: int) -> dict[str, set[int]]:
        wait_until(lambda: _settled(self.harness, groups, QUAD_PARTITIONS, members) is not None, 90,
                   lambda: f"{self.assignor}: {members} members to split {QUAD_PARTITIONS}: "
                           f"{owned_by_hooks(self.harness)}",
                   interval=0.25)
        view = _settled(self.harness, groups, QUAD_PARTITIONS, members)
        assert view is not None, f"{self.assignor}: the group moved on after settling"
        if self.assignor != "cooperative-sticky":
            assert view == _kafka_split(self.assignor, list(view), QUAD_PARTITIONS), self.assignor
        return view

    def _scenario(self) -> None:
        harness = self.harness
        producer = SteadyProducer(self.coord.zk_connect, self.topic, rate=50)
        producer.start()
        try:
            with session(self.coord.zk_connect) as client:
                self._members_and_kills(producer, BrokerGroups(ZkLayout(client)))
        finally:
            producer.finish()
            harness.stop_all()

    def _members_and_kills(self, producer: SteadyProducer, groups: BrokerGroups) -> None:
        harness = self.harness
        for _ in range(2):
            harness.add_member()
            _LibrdkafkaProcess(harness, self.coord.broker.bootstrap, self.assignor)
        for member in harness.members:
            member.wait_started(60)
        self._wait_settled(groups, 4)
        for victim, left in ((harness.members[0], 3), (harness.members[1], 2)):  # metaq, then librdkafka
            before = owned_by_hooks(harness)
            marks = {m.name: len(m.events()) for m in harness.members}
            victim.kill()
            self.victims.append(victim.name)
            self._wait_settled(groups, left)
            if self.assignor == "cooperative-sticky":  # only the dead member's partitions moved
                revoked = {m.name: _revoked_since(m, marks[m.name]) & before[m.name]
                           for m in harness.members if m.alive}
                assert revoked == {m.name: set() for m in harness.members if m.alive}
        self.acked = producer.finish()
        wait_until(lambda: not check_delivery(harness.events(), self.acked).missing, 60,
                   f"{self.assignor}: every acked message read", interval=0.5)


@pytest.mark.compat("broker-coordinated consumer group (group.coordination=kafka)", "confluent-kafka")
def test_two_metaq_and_two_librdkafka_members_survive_sigkills(coord: SharedBroker, tmp_path: Path) -> None:
    """For range, roundrobin and cooperative-sticky at once (one group each, on the module's broker): 2 metaq + 2
    librdkafka processes in one group under a steady producer; a metaq member, then a librdkafka member is
    SIGKILLed. After each change the coordinator's assignment (DescribeGroups) is what every member's listener
    log says it owns, and for range/roundrobin it is what Kafka's assignors compute from the member ids
    (integration_tests/test_assignors_vs_java.py checks metaq's assignors against kafka-clients' classes); the
    dead member's partitions move after the session timeout; with cooperative-sticky the survivors never revoke a
    partition. Every acked record is read, duplicates only inside the killed members' uncommitted windows, no
    commit goes backwards."""
    runs = [_QuadRun(coord, tmp_path, assignor) for assignor in ("range", "roundrobin", "cooperative-sticky")]
    for run in runs:
        run.start()
    for run in runs:
        run.join(300)
    for run in runs:
        assert not run.is_alive(), f"{run.assignor}: still running"
        if run.error is not None:
            raise run.error
        check_delivery(run.harness.events(), run.acked, failed_members=run.victims).assert_ok()
