"""The group admin APIs (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete) with the standard admin clients
(confluent-kafka AdminClient, kafka-python KafkaAdminClient), their effect on ``__consumer_offsets`` checked after
a broker restart and in the log itself; and transactional producers refused at once instead of retrying for ever.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka import errors as kerrors
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from integration_tests.peers import KCAT
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, decode_key, partition_for
from metaq.errors import ErrorCode
from metaq.testing.broker import request
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

BROKER = {"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 4}
PARTITIONS = 3


@pytest.fixture
def admin_broker(broker_cluster):
    return broker_cluster.add(0, **BROKER)


@pytest.fixture
def live_members() -> Iterator[Any]:
    """Start confluent-kafka group members in this process; each is closed (commit, LeaveGroup) at the end."""
    started: list[confluent_kafka.Consumer] = []

    def start(bootstrap: str, group: str, topic: str, **conf: Any) -> confluent_kafka.Consumer:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                                             "auto.offset.reset": "earliest", "client.id": "admin-test", **conf})
        consumer.subscribe([topic])
        started.append(consumer)
        wait_until(lambda: consumer.poll(0.2) is None and bool(consumer.assignment()), 30, f"{group} assigned")
        return consumer

    yield start
    for consumer in started:
        consumer.close()


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit from outside the group protocol (a simple consumer: assign, commit)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=20)
        return {(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0}
    finally:
        consumer.close()


def _offsets_log(bootstrap: str, group: str) -> dict[tuple[str, int], bytes | None]:
    """The last value per offset key of ``group`` in its ``__consumer_offsets`` partition, read as records
    (None: a tombstone)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-reader",
                                         "enable.auto.commit": False})
    partition = partition_for(group, BROKER["offsets.topic.num.partitions"])
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, partition), timeout=10)
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, 0)])
        last: dict[tuple[str, int], bytes | None] = {}
        position = 0
        while position < high:
            msg = consumer.poll(5)
            assert msg is not None and msg.error() is None, msg and msg.error()
            position = msg.offset() + 1
            key = decode_key(msg.key())
            if getattr(key, "group", None) == group and hasattr(key, "topic"):
                last[(key.topic, key.partition)] = msg.value()
        return last
    finally:
        consumer.close()


def _listed(admin: AdminClient, **kwargs: Any) -> dict[str, Any]:
    result = admin.list_consumer_groups(**kwargs).result(30)
    assert not result.errors, result.errors
    return {g.group_id: g for g in result.valid}


def _described(admin: AdminClient, group: str) -> Any:
    return admin.describe_consumer_groups([group])[group].result(30)


def _delete_error(admin: AdminClient, group: str) -> KafkaError | None:
    try:
        admin.delete_consumer_groups([group])[group].result(30)
        return None
    except KafkaException as e:
        return e.args[0]


def test_confluent_admin_lists_describes_and_deletes(admin_broker, make_topic, live_members) -> None:
    topic = make_topic("adm-confluent", partitions=PARTITIONS)
    bootstrap = admin_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    member = live_members(bootstrap, "live", topic)
    _commit(bootstrap, "simple", {(topic, 0): 5})

    listed = _listed(admin)
    assert listed["live"].state == ConsumerGroupState.STABLE and not listed["live"].is_simple_consumer_group
    assert listed["simple"].state == ConsumerGroupState.EMPTY and listed["simple"].is_simple_consumer_group
    assert set(_listed(admin, states={ConsumerGroupState.EMPTY})) == {"simple"}

    described = _described(admin, "live")
    assert described.state == ConsumerGroupState.STABLE and described.partition_assignor
    [m] = described.members
    assert m.client_id == "admin-test" and m.host == "/127.0.0.1"
    assert sorted(tp.partition for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
    assert _described(admin, "nobody").state == ConsumerGroupState.DEAD

    assert _delete_error(admin, "live").code() == ErrorCode.NON_EMPTY_GROUP
    assert _delete_error(admin, "nobody").code() == ErrorCode.GROUP_ID_NOT_FOUND

    member.commit(offsets=[TopicPartition(topic, p, 1) for p in range(PARTITIONS)], asynchronous=False)
    member.close()
    wait_until(lambda: _described(admin, "live").state == ConsumerGroupState.EMPTY, 20, "the group to empty")
    assert _committed(bootstrap, "live", [(topic, p) for p in range(PARTITIONS)]) == {
        (topic, p): 1 for p in range(PARTITIONS)}
    assert _delete_error(admin, "live") is None
    assert _delete_error(admin, "simple") is None
    assert not {"live", "simple"} & set(_listed(admin))

    admin_broker.stop()
    admin_broker.start()
    assert not {"live", "simple"} & set(_listed(admin))
    assert _committed(bootstrap, "live", [(topic, p) for p in range(PARTITIONS)]) == {}
    assert _committed(bootstrap, "simple", [(topic, 0)]) == {}
    # on disk: the last record of each of the group's offsets is a tombstone
    assert _offsets_log(bootstrap, "live") == {(topic, p): None for p in range(PARTITIONS)}


def test_kafka_python_admin_and_offset_delete(admin_broker, make_topic, live_members) -> None:
    subscribed = make_topic("adm-kp-sub", partitions=PARTITIONS)
    other = make_topic("adm-kp-other", partitions=1)
    bootstrap = admin_broker.bootstrap
    _commit(bootstrap, "kp", {(subscribed, 0): 3, (other, 0): 7})
    member = live_members(bootstrap, "kp", subscribed)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups["kp"]["protocol_type"] == "consumer" and groups["kp"]["group_state"] == "Stable"
        assert [g["group_id"] for g in admin.list_groups(states_filter=["Stable"])] == ["kp"]

        described = admin.describe_groups(["kp"])["kp"]
        assert described["error"] is None and described["group_state"] == "Stable"
        [m] = described["members"]
        assert m["client_id"] == "admin-test"
        assert sorted(p for t in m["member_assignment"]["assigned_partitions"] for p in t["partitions"]) == \
            list(range(PARTITIONS))

        deleted = admin.delete_group_offsets("kp", [KpTopicPartition(subscribed, 0), KpTopicPartition(other, 0)])
        assert deleted == {KpTopicPartition(subscribed, 0): kerrors.GroupSubscribedToTopicError,
                           KpTopicPartition(other, 0): kerrors.NoError}
        assert _committed(bootstrap, "kp", [(subscribed, 0), (other, 0)]) == {(subscribed, 0): 3}

        assert dict(admin.delete_groups(["kp"]))["kp"] == "NonEmptyGroupError"
        member.close()
        wait_until(lambda: admin.describe_groups(["kp"])["kp"]["group_state"] == "Empty", 20, "the group to empty")
        assert dict(admin.delete_groups(["kp"]))["kp"] == "OK"
        assert "kp" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
    admin_broker.stop()
    admin_broker.start()
    assert _committed(bootstrap, "kp", [(subscribed, 0), (other, 0)]) == {}


def test_every_version_on_two_brokers(broker_cluster, make_topic) -> None:
    """Raw requests at every advertised version; each broker lists and describes only the groups it coordinates,
    and an AdminClient (which asks every broker) lists them all."""
    b0, b1 = broker_cluster.add(0, **BROKER), broker_cluster.add(1, **BROKER)
    topic = make_topic("adm-raw", partitions=1)

    def coordinator(group: str) -> int:
        resp = request(b0.bootstrap, FindCoordinatorRequest[1](key=group, key_type=0), FindCoordinatorResponse, 1)
        return resp.node_id if resp.error_code == 0 else -1

    wait_until(lambda: coordinator("probe") >= 0, 15, "the offsets topic")
    names = [f"g{i}" for i in range(40)]
    on0, on1 = (next(g for g in names if coordinator(g) == b) for b in (0, 1))
    nobody = next(g for g in names if coordinator(g) == 0 and g != on0)
    for group in (on0, on1):
        _commit(b0.bootstrap, group, {(topic, 0): 1})

    for v in range(6):
        listed = {g.group_id: g for g in request(b0.bootstrap, ListGroupsRequest[v](), ListGroupsResponse, v).groups}
        assert on0 in listed and on1 not in listed and listed[on0].protocol_type == ""
        assert v < 4 or listed[on0].group_state == "Empty"
        assert on1 in {g.group_id for g in request(b1.bootstrap, ListGroupsRequest[v](), ListGroupsResponse, v).groups}
    for v in range(7):
        resp = request(b0.bootstrap, DescribeGroupsRequest[v](groups=[on0, on1, nobody]), DescribeGroupsResponse, v)
        got = {g.group_id: (g.error_code, g.group_state) for g in resp.groups}
        assert got[on0] == (0, "Empty") and got[on1][0] == ErrorCode.NOT_COORDINATOR
        assert got[nobody] == ((ErrorCode.GROUP_ID_NOT_FOUND, "Dead") if v >= 6 else (0, "Dead"))
    for v in range(3):
        resp = request(b0.bootstrap, DeleteGroupsRequest[v](groups_names=[nobody, on1]), DeleteGroupsResponse, v)
        assert {r.group_id: r.error_code for r in resp.results} == {
        nobody: ErrorCode.GROUP_ID_NOT_FOUND, on1: ErrorCode.NOT_COORDINATOR}
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    assert {on0, on1} <= set(_listed(admin))
    with pytest.deprecated_call():  # the legacy call: ListGroups + DescribeGroups at every broker
        legacy = {g.id: g for g in admin.list_groups(timeout=30)}
    assert legacy[on1].state == "Empty" and legacy[on1].broker.id == 1
    Topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    resp = request(b0.bootstrap, OffsetDeleteRequest[0](group_id=on0, topics=[
        Topic(name=t, partitions=[Topic.OffsetDeleteRequestPartition(partition_index=0)]) for t in (topic, "gone")]),
        OffsetDeleteResponse, 0)
    assert resp.error_code == 0
    assert {t.name: t.partitions[0].error_code for t in resp.topics} == {
        topic: 0, "gone": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert _committed(b0.bootstrap, on0, [(topic, 0)]) == {}
    assert on0 not in {g.group_id for g in request(b0.bootstrap, ListGroupsRequest[0](), ListGroupsResponse, 0).groups}


def test_aiokafka_admin_lists_and_describes(admin_broker, make_topic, live_members) -> None:
    aiokafka_admin = pytest.importorskip("aiokafka.admin")
    topic = make_topic("adm-aio", partitions=PARTITIONS)
    live_members(admin_broker.bootstrap, "aio", topic)

    async def ask() -> tuple[list[Any], list[Any]]:
        admin = aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=admin_broker.bootstrap)
        await admin.start()
        try:
            return await admin.list_consumer_groups(), await admin.describe_consumer_groups(["aio"])
        finally:
            await admin.close()

    listed, [described] = asyncio.run(ask())
    assert ("aio", "consumer") in listed
    [group] = described.groups
    assert (group[0], group[1], group[2], len(group[5])) == (0, "aio", "Stable", 1)  # error, id, state, members


# ---- metaq groups list / describe ---------------------------------------------------------------------------


def _metaq(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout


def _metaq_json(*args: str) -> Any:
    return json.loads(_metaq(*args, "--json"))


def test_metaq_groups_lists_and_describes_protocol_groups(admin_broker, make_topic, zk_connect: str,
                                                          zk_layout: ZkLayout, tmp_path) -> None:
    """A kcat -G group (protocol), a ZooKeeper group, and a ZooKeeper group that also commits to Kafka (both)."""
    topic = make_topic("adm-cli", partitions=PARTITIONS)
    bootstrap = admin_broker.bootstrap
    zk_layout.write_offset("zkg", topic, 0, 3)
    zk_layout.write_offset("mixed", topic, 0, 4)
    _commit(bootstrap, "mixed", {(topic, 1): 2})
    z = ["--zookeeper", zk_connect]
    with open(tmp_path / "kcat.err", "wb") as err:
        kcat = subprocess.Popen([KCAT, "-b", bootstrap, "-G", "kcatg", topic, "-q", "-X", "session.timeout.ms=6000",
                                 "-X", "heartbeat.interval.ms=500"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        def kcat_group() -> dict[str, Any] | None:
            groups = {g["group"]: g for g in _metaq_json("groups", "list", *z)["groups"]}
            found = groups.get("kcatg")
            return found if found and found["state"] == "Stable" and found["members"] == 1 else None

        wait_until(lambda: kcat_group() is not None, 30, "kcat's group listed as Stable with one member")
        groups = {g["group"]: g for g in _metaq_json("groups", "list", *z)["groups"]}
        assert (groups["kcatg"]["kind"], groups["kcatg"]["topics"]) == ("protocol", [topic])
        assert (groups["zkg"]["kind"], groups["zkg"]["state"]) == ("zookeeper", "Empty")
        assert (groups["mixed"]["kind"], groups["mixed"]["state"]) == ("both", "Empty")

        described = _metaq_json("groups", "describe", "kcatg", *z)
        assert described["active"] and described["protocol"]["state"] == "Stable"
        [member] = described["protocol"]["members"]
        assert member["client_id"] == "rdkafka" and member["host"] == "/127.0.0.1"
        assert sorted(p for _, p in member["assignment"]) == list(range(PARTITIONS))
        assert {(r["partition"], r["owner"], r["status"]) for r in described["partitions"]} == {
            (p, member["member_id"], "OK") for p in range(PARTITIONS)}

        table = _metaq("groups", "list", *z).splitlines()
        assert table[0].split() == ["GROUP", "KIND", "MEMBERS", "STATE", "TOPICS"]
        assert [line.split() for line in table if line.startswith("kcatg")] == [
            ["kcatg", "protocol", "1", "Stable", topic]]
        text = _metaq("groups", "describe", "kcatg", *z)
        assert text.startswith("Group kcatg: 1 live member,")
        assert "Coordinator (broker 0): state Stable, protocol consumer/" in text and member["member_id"] in text
    finally:
        kcat.send_signal(signal.SIGINT)
        kcat.wait(20)
