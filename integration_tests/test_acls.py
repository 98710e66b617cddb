"""ACLs end to end: a broker process with ``authorizer.class.name`` set, ACLs written to ZooKeeper by
``metaq acls`` or by confluent-kafka's AdminClient, and unmodified clients (confluent-kafka, kafka-python, kcat)
refused with Kafka's authorization errors instead of retrying. Connections are PLAINTEXT, so every client is
``User:ANONYMOUS`` and the ACLs name that principal (super.users needs authentication: unit-tested in
tests/broker/test_acl_rules.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import confluent_kafka
import kafka
import kafka.admin
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse, ListGroupsRequest, ListGroupsResponse
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from integration_tests.peers import KCAT
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer
from metaq.errors import ClusterAuthorizationFailedError, ErrorCode, TopicAuthorizationFailedError
from metaq.producer import Producer
from metaq.testing.broker import BrokerProcess, fetch_error, request
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout
from zk_layout.acl_formats import AclEntry, AclPermission, ResourcePattern
from zk_layout.acl_formats import AclOperation as AclOperationZk
from zk_layout.acl_formats import ResourceType as ResourceTypeZk

TIMEOUT = 30.0
ANONYMOUS = "User:ANONYMOUS"
SECURED = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
           "group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 2}


def metaq_acls(zk_connect: str, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "metaq", "acls", *args, "--zookeeper", zk_connect],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"metaq acls {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def allow(zk_connect: str, *args: str) -> str:
    return metaq_acls(zk_connect, "add", "--allow-principal", ANONYMOUS, *args)


@pytest.fixture
def secured(broker_cluster: Any) -> BrokerProcess:
    broker: BrokerProcess = broker_cluster.add(0, **SECURED)
    return broker


@pytest.fixture
def make_topic(secured: BrokerProcess, zk_layout: ZkLayout) -> Any:
    """Create a topic and wait until the broker serves it: visible while a temporary Describe ACL lets this
    principal see it, hidden again once that ACL is removed."""
    def make(name: str) -> str:
        create_topic(zk_layout, name, 1)
        describe = ResourcePattern(ResourceTypeZk.TOPIC, name)
        entry = AclEntry(ANONYMOUS, "*", AclOperationZk.DESCRIBE, AclPermission.ALLOW)
        zk_layout.update_acls(describe, lambda current: current | {entry})
        wait_until(lambda: _metadata_error(secured.bootstrap, name) == 0, TIMEOUT, f"topic {name} served")
        zk_layout.update_acls(describe, lambda current: current - {entry})
        wait_until(lambda: _metadata_error(secured.bootstrap, name) == ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                   TIMEOUT, f"topic {name} hidden again")
        return name
    return make


def _metadata_error(bootstrap: str, topic: str) -> int:
    req = MetadataRequest[4](topics=[(topic,)], allow_auto_topic_creation=False)
    resp = request(bootstrap, req, MetadataResponse, 4)
    return int(resp.topics[0].error_code)


def _produce_error(bootstrap: str, topic: str, timeout: float = TIMEOUT) -> KafkaError | None:
    """confluent-kafka's delivery report of one message (None: delivered)."""
    reports: list[KafkaError | None] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": int(timeout * 1000)})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(timeout + 5)
    assert reports, "no delivery report"
    return reports[0]


def test_acl_nodes_match_kafkas_format_and_change_notifications(secured: BrokerProcess, zk_layout: ZkLayout,
                                                                 zk_connect: str) -> None:
    allow(zk_connect, "--operation", "Read", "--operation", "Describe", "--topic", "orders")
    metaq_acls(zk_connect, "add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
               "--operation", "Write", "--topic", "orders-", "--resource-pattern-type", "prefixed")
    client = zk_layout.client
    literal = json.loads(client.get("/kafka-acl/Topic/orders")[0])
    assert literal == {"version": 1, "acls": [
        {"principal": ANONYMOUS, "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": ANONYMOUS, "permissionType": "Allow", "operation": "Describe", "host": "*"}]}
    prefixed = client.get("/kafka-acl-extended/prefixed/Topic/orders-")[0]
    assert prefixed == (b'{"version":1,"acls":[{"principal":"User:mallory","permissionType":"Deny",'
                        b'"operation":"Write","host":"10.0.0.9"}]}')
    changes = client.get_children("/kafka-acl-changes")
    assert [c[:len("acl_changes_")] for c in changes] == ["acl_changes_"]
    assert client.get(f"/kafka-acl-changes/{changes[0]}")[0] == b"TOPIC:orders"
    extended = client.get_children("/kafka-acl-extended-changes")
    assert json.loads(client.get(f"/kafka-acl-extended-changes/{extended[0]}")[0]) == {
        "version": 1, "resourceType": "TOPIC", "name": "orders-", "patternType": "PREFIXED"}
    listing = metaq_acls(zk_connect, "list", "--topic", "orders-1", "--resource-pattern-type", "match", "--json")
    assert [(a["name"], a["principal"]) for a in json.loads(listing)["acls"]] == [("orders-", "User:mallory")]


def test_produce_fetch_and_metadata_follow_acls_without_restart(secured: BrokerProcess, make_topic: Any,
                                                                 zk_connect: str) -> None:
    make_topic("orders")
    make_topic("secret")
    bootstrap = secured.bootstrap
    error = _produce_error(bootstrap, "orders", timeout=10)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert fetch_error(bootstrap, "orders") == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    allow(zk_connect, "--operation", "Write", "--operation", "Read", "--topic", "ord", "--resource-pattern-type",
          "prefixed")
    wait_until(lambda: fetch_error(bootstrap, "orders") == 0, TIMEOUT, "Read allowed through the prefixed ACL")
    assert _produce_error(bootstrap, "orders") is None
    # Metadata lists only the topics the principal may describe (Read implies Describe)
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT).topics
    assert "orders" in topics and "secret" not in topics
    # a Deny beats the Allow; then removing the ACLs takes effect for new requests without a restart
    metaq_acls(zk_connect, "add", "--deny-principal", ANONYMOUS, "--operation", "Read", "--topic", "orders")
    wait_until(lambda: fetch_error(bootstrap, "orders") == ErrorCode.TOPIC_AUTHORIZATION_FAILED, TIMEOUT,
               "Deny Read wins over the prefixed Allow")
    metaq_acls(zk_connect, "remove", "--topic", "orders")
    wait_until(lambda: fetch_error(bootstrap, "orders") == 0, TIMEOUT, "the Deny removed")
    metaq_acls(zk_connect, "remove", "--topic", "ord", "--resource-pattern-type", "prefixed")
    wait_until(lambda: fetch_error(bootstrap, "orders") == ErrorCode.TOPIC_AUTHORIZATION_FAILED, TIMEOUT,
               "the Allow removed")


def test_wildcard_topic_acl_and_kcat_reports_the_refusal(secured: BrokerProcess, make_topic: Any,
                                                         zk_connect: str) -> None:
    make_topic("audit")
    make_topic("payments")
    allow(zk_connect, "--operation", "Write", "--topic", "*")
    metaq_acls(zk_connect, "add", "--deny-principal", "User:*", "--operation", "All", "--topic", "payments")
    ok = subprocess.run([KCAT, "-b", secured.bootstrap, "-P", "-t", "audit", "-p", "0"], input=b"a\n",
                        capture_output=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run([KCAT, "-b", secured.bootstrap, "-P", "-t", "payments", "-p", "0",
                              "-X", "message.timeout.ms=10000"], input=b"p\n", capture_output=True, timeout=60)
    assert refused.returncode != 0 and b"Broker: Topic authorization failed" in refused.stderr, refused.stderr


def test_group_refused_until_allowed(secured: BrokerProcess, make_topic: Any, zk_connect: str) -> None:
    make_topic("events")
    allow(zk_connect, "--operation", "Read", "--operation", "Write", "--topic", "events")
    assert _produce_error(secured.bootstrap, "events") is None
    consumer = confluent_kafka.Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "etl",
                                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["events"])
        deadline = time.monotonic() + TIMEOUT
        error = None
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is not None:
                error = msg.error()
            elif msg is not None:
                pytest.fail("consumed without Read on the group")
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        consumer.close()
    allow(zk_connect, "--operation", "Read", "--group", "et", "--resource-pattern-type", "prefixed")
    kp = kafka.KafkaConsumer("events", bootstrap_servers=secured.bootstrap, group_id="etl",
                             auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT * 1000))
    try:
        assert next(iter(kp)).value == b"v"
        kp.commit()
    finally:
        kp.close()


def test_kafka_python_gets_topic_authorization_failed(secured: BrokerProcess, make_topic: Any,
                                                      zk_connect: str) -> None:
    make_topic("locked")
    allow(zk_connect, "--operation", "Describe", "--topic", "locked")
    allow(zk_connect, "--operation", "IdempotentWrite", "--cluster")
    producer = kafka.KafkaProducer(bootstrap_servers=secured.bootstrap, max_block_ms=10000)
    try:
        future = producer.send("locked", b"x")
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            future.get(timeout=TIMEOUT)
    finally:
        producer.close(timeout=5)


def test_admin_client_acl_round_trip(secured: BrokerProcess, zk_layout: ZkLayout, zk_connect: str) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "clicks-", ResourcePatternType.PREFIXED, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    # no Alter on the cluster yet: refused with CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([binding])[binding].result(timeout=TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    allow(zk_connect, "--operation", "Alter", "--operation", "Describe", "--cluster")
    wait_until(lambda: _created(admin, binding), TIMEOUT, "CreateAcls allowed")
    assert json.loads(zk_layout.client.get("/kafka-acl-extended/prefixed/Topic/clicks-")[0])["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]

    match_clicks = AclBindingFilter(ResourceType.TOPIC, "clicks-eu", ResourcePatternType.MATCH, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match_clicks).result(timeout=TIMEOUT) == [binding]
    # kafka-python's admin client reads the same ACL (it negotiates the flexible v2+)
    kp_admin = kafka.admin.KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        kp_acls, kp_error = kp_admin.describe_acls(kafka.admin.ACLFilter(
            principal=None, host=None, operation=kafka.admin.ACLOperation.ANY,
            permission_type=kafka.admin.ACLPermissionType.ANY,
            resource_pattern=kafka.admin.ResourcePatternFilter(kafka.admin.ResourceType.TOPIC, "clicks-",
                                                               kafka.admin.ACLResourcePatternType.PREFIXED)))
    finally:
        kp_admin.close()
    assert kp_error is kafka.errors.NoError
    assert [(acl.principal, acl.operation) for acl in kp_acls] == [("User:alice", kafka.admin.ACLOperation.READ)]
    deleted = admin.delete_acls([match_clicks])[match_clicks].result(timeout=TIMEOUT)
    assert deleted == [binding]
    assert zk_layout.client.exists("/kafka-acl-extended/prefixed/Topic/clicks-") is None
    assert admin.describe_acls(match_clicks).result(timeout=TIMEOUT) == []


def _created(admin: AdminClient, binding: AclBinding) -> bool:
    try:
        admin.create_acls([binding])[binding].result(timeout=TIMEOUT)
        return True
    except KafkaException:
        return False


def test_acl_apis_without_authorizer_answer_security_disabled(broker: BrokerProcess) -> None:
    req = DescribeAclsRequest[1](resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                 principal_filter=None, host_filter=None, operation=1, permission_type=1)
    resp = request(broker.bootstrap, req, DescribeAclsResponse, 1)
    assert resp.error_code == ErrorCode.SECURITY_DISABLED


def test_metaq_producer_and_consumer_fail_fast_on_acls(secured: BrokerProcess, make_topic: Any,
                                                       zk_connect: str) -> None:
    make_topic("guarded")
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2, "retries": 1000}) as producer:
        future = producer.send("guarded", b"refused", partition=0)
        with pytest.raises(ClusterAuthorizationFailedError):  # idempotent: no producer id without Write anywhere
            future.result(timeout=TIMEOUT)  # not retried: 1000 retries would outlast the timeout
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2, "retries": 1000, "acks": 1}) as producer:
        future = producer.send("guarded", b"refused", partition=0)
        with pytest.raises(TopicAuthorizationFailedError):
            future.result(timeout=TIMEOUT)
    allow(zk_connect, "--operation", "Write", "--topic", "guarded")
    wait_until(lambda: _produce_error(secured.bootstrap, "guarded", timeout=5) is None, TIMEOUT, "Write allowed")
    consumer = Consumer({"group.id": "reader", "zookeeper.connect": zk_connect, "consumer.timeout.ms": 20000,
                         "auto.offset.reset": "smallest", "zookeeper.session.timeout.ms": 3000})
    with consumer:
        stream = consumer.create_message_streams({"guarded": 1})["guarded"][0]
        with pytest.raises(TopicAuthorizationFailedError):
            next(iter(stream))  # raised by the stream, not a ConsumerTimeoutError after endless retries


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest[2](group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 retention_time_ms=-1, topics=[
                                     Topic(name=t, partitions=[Topic.OffsetCommitRequestPartition(
                                         partition_index=p, committed_offset=o, committed_metadata="")])
                                     for (t, p), o in sorted(offsets.items())])
    resp = request(bootstrap, req, OffsetCommitResponse, 2)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def _coordinator_error(bootstrap: str, group: str) -> int:
    resp = request(bootstrap, FindCoordinatorRequest[1](key=group, key_type=0), FindCoordinatorResponse, 1)
    return int(resp.error_code)


def _fetch_offsets(bootstrap: str, group: str, version: int = 3) -> tuple[int, dict[tuple[str, int], Any]]:
    resp = request(bootstrap, OffsetFetchRequest[version](group_id=group, topics=None), OffsetFetchResponse,
                   version)
    return resp.error_code, {(t.name, p.partition_index): p.committed_offset for t in resp.topics
                             for p in t.partitions}


def test_group_and_offset_apis_check_the_group_and_each_topic(secured: BrokerProcess, make_topic: Any,
                                                              zk_connect: str) -> None:
    make_topic("seen")
    make_topic("unseen")
    bootstrap = secured.bootstrap
    wanted = {("seen", 0): 5, ("unseen", 0): 7}
    assert set(_commit(bootstrap, "ledger", wanted).values()) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert _fetch_offsets(bootstrap, "ledger")[0] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert _coordinator_error(bootstrap, "ledger") == ErrorCode.GROUP_AUTHORIZATION_FAILED

    allow(zk_connect, "--operation", "Read", "--group", "ledger", "--topic", "seen")
    wait_until(lambda: _coordinator_error(bootstrap, "ledger") == 0, TIMEOUT, "the group allowed")
    wait_until(lambda: _commit(bootstrap, "ledger", wanted) == {
        ("seen", 0): 0, ("unseen", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}, TIMEOUT, "the coordinator ready")
    # the partitions of topics the principal may not describe are left out of a fetch of all offsets
    assert _fetch_offsets(bootstrap, "ledger") == (0, {("seen", 0): 5})
    listed = request(bootstrap, ListGroupsRequest[2](), ListGroupsResponse, 2).groups
    assert [g.group_id for g in listed] == ["ledger"]  # groups it may not describe would be left out
    metaq_acls(zk_connect, "remove", "--group", "ledger")
    wait_until(lambda: not request(bootstrap, ListGroupsRequest[2](), ListGroupsResponse, 2).groups, TIMEOUT,
               "ListGroups filters the groups the principal may not describe")


def test_transactional_producer_needs_its_transactional_id_acls(secured: BrokerProcess, make_topic: Any,
                                                              zk_connect: str) -> None:
    """FindCoordinator (Describe) and InitProducerId (Write) check the TransactionalId (docs/transactions.md):
    refused at once (fatal), then allowed by ACLs on the id and the topic."""
    make_topic("txn-out")
    bootstrap = secured.bootstrap
    refused = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-acl"})
    with pytest.raises(KafkaException) as info:
        refused.init_transactions(30)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, info.value.args[0]
    del refused
    allow(zk_connect, "--operation", "Write", "--operation", "Describe", "--transactional-id", "tx-acl")
    allow(zk_connect, "--operation", "Write", "--topic", "txn-out")

    def commits() -> bool:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-acl"})
        try:
            producer.init_transactions(30)
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, e.args[0]
            return False
        producer.begin_transaction()
        producer.produce("txn-out", b"v")
        producer.commit_transaction(30)
        producer.close()
        return True
    wait_until(commits, TIMEOUT, "the transactional producer allowed by ACLs")
