"""Kafka's own Java clients and command-line tools against a metaq broker (docs/compatibility.md).

The peers come from Maven Central (metaq/testing/java_peers.py): kafka-clients 3.9.1 and 4.4.0 running the
single-file programs of integration_tests/java/, Kafka 3.9.1's tools as classes (``--bootstrap-server``) and
Kafka 2.8.2's ``TopicCommand`` / ``ConfigCommand`` with ``--zookeeper``, which write ZooKeeper nodes the metaq
broker must honour as a Kafka broker would. One broker serves the module (PLAINTEXT and SASL_PLAINTEXT, the ACL
authorizer on, everything allowed where no ACL names a resource); each test starts one JVM at most and uses
topics and groups of its own. Kafka decides what is right: where a tool fails, metaq is fixed, or the test
pins the clear error of an API metaq does not serve (DescribeLogDirs, ElectLeaders).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from integration_tests.peers import Msg, confluent_consume, confluent_produce
from metaq.broker.topics import create_topic
from metaq.protocol.apis import BROKER_APIS
from metaq.testing.broker import topic_leaders
from metaq.testing.certs import make_certs
from metaq.testing.java_peers import (
    CLIENTS_3_9,
    CLIENTS_4,
    JAVA_PROGRAMS,
    TOOLS_2_8,
    TOOLS_3_9,
    JavaPeer,
    JavaRun,
    run_class,
    run_program,
)
from metaq.testing.secure import SecureBroker, secure_broker
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import own_chroot
from metaq.zkclient import connect as zk_connect_client
from zk_layout import ZkLayout
from zk_layout.acl_formats import AclOperation, AclPermission, PatternType, ResourcePattern, ResourceType

pytestmark = pytest.mark.slow

CLIENTS = [pytest.param(CLIENTS_3_9, id="3.9.1"), pytest.param(CLIENTS_4, id="4.4.0")]
TOOLS = TOOLS_3_9.label
TOOLS_ZK = TOOLS_2_8.label


@pytest.fixture(scope="module")
def secure(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    certs = make_certs(tmp_path_factory.mktemp("java-peer-certs"))
    with own_chroot(zk_server, "metaq-java-peers") as connect:
        broker = secure_broker(connect, tmp_path_factory.mktemp("java-peers"), certs, plain_users={},
                               listeners=("SASL_PLAINTEXT",),
                               **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                  "allow.everyone.if.no.acl.found": "true",
                                  "group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 2})
        with broker.process:
            yield broker


@pytest.fixture(scope="module")
def layout(secure: SecureBroker) -> Iterator[ZkLayout]:
    client = zk_connect_client(secure.zk_connect)
    try:
        yield ZkLayout(client)
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def bootstrap(secure: SecureBroker) -> str:
    return secure.bootstrap("PLAINTEXT")


def new_topic(layout: ZkLayout, bootstrap: str, name: str, partitions: int = 1) -> str:
    create_topic(layout, name, partitions)
    wait_until(lambda: len(topic_leaders(bootstrap, name)) == partitions, 15, f"topic {name} served")
    return name


def produce(bootstrap: str, topic: str, partition: int, count: int) -> list[Msg]:
    items = [(f"k{i}".encode(), f"{topic}-{partition}-{i}".encode(), 1_700_000_000_000 + i) for i in range(count)]
    return confluent_produce(bootstrap, topic, partition, items)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for ``group`` outside any generation, as an operator's tool would."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def metaq_group(secure: SecureBroker, group: str) -> dict[str, Any]:
    """``metaq groups describe --json``: what an operator sees of the group."""
    done = subprocess.run([sys.executable, "-m", "metaq", "groups", "describe", group, "--zookeeper",
                           secure.zk_connect, "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    described: dict[str, Any] = json.loads(done.stdout)
    return described


def committed_offsets(secure: SecureBroker, group: str) -> dict[int, int]:
    return {p["partition"]: p["offset"] for p in metaq_group(secure, group)["partitions"]
            if p["offset"] is not None}


def tool(main_class: str, *args: str, stdin: str | None = None) -> JavaRun:
    return run_class(TOOLS_3_9, main_class, args, stdin=stdin)


# ---- Java clients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("peer", CLIENTS)
def test_java_producer_and_consumer_group(request: pytest.FixtureRequest, peer: JavaPeer, secure: SecureBroker,
                                          layout: ZkLayout, bootstrap: str) -> None:
    """KafkaProducer with its defaults (acks=all, idempotent) -> metaq -> a KafkaConsumer group that
    subscribes, reads each record once and commits; the commits are what ``metaq groups describe`` shows."""
    request.applymarker(pytest.mark.compat("Java producer (defaults) and consumer group", peer.label))
    topic = new_topic(layout, bootstrap, f"java-rt-{peer.name}", partitions=3)
    group = f"java-rt-group-{peer.name}"
    count = 30
    rows = run_program(peer, JAVA_PROGRAMS / "ClientRoundTrip.java", [bootstrap, topic, group, str(count)]
                       ).check().json_lines()
    acked = [r["acked"] for r in rows if "acked" in r]
    read = [r["read"] for r in rows if "read" in r]
    [producer] = [r["producer"] for r in rows if "producer" in r]
    assert producer == {"acks": "-1", "enable.idempotence": True}
    assert len(acked) == count
    per_partition: dict[int, list[int]] = {}
    for a in acked:
        per_partition.setdefault(a["partition"], []).append(a["offset"])
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_partition.values()), per_partition
    # every acked record read exactly once, with its key and value, where the producer was told it is
    assert sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in read) == sorted(
        (a["partition"], a["offset"], a["key"], "v" + a["key"][1:]) for a in acked)
    expected = {p: len(offsets) for p, offsets in per_partition.items()}
    [committed] = [r["committed"] for r in rows if "committed" in r]
    assert {int(p): o for p, o in committed.items() if o >= 0} == expected
    assert committed_offsets(secure, group) == expected


@pytest.mark.parametrize("peer", CLIENTS)
def test_java_admin_client(request: pytest.FixtureRequest, peer: JavaPeer, bootstrap: str,
                           layout: ZkLayout) -> None:
    request.applymarker(pytest.mark.compat("Java AdminClient (topics, configs, groups, offsets, ACLs, cluster)",
                                           peer.label))
    topic, group, acl_topic = f"java-admin-{peer.name}", f"java-admin-group-{peer.name}", f"java-acl-{peer.name}"
    rows = run_program(peer, JAVA_PROGRAMS / "AdminOps.java", [bootstrap, topic, group, acl_topic]
                       ).check().json_lines()
    results = {r["op"]: r.get("result", r.get("error")) for r in rows}
    errors = {r["op"]: r["error"] for r in rows if "error" in r}
    assert not errors, errors
    assert results["describeTopics"] == {"partitions": 3, "leader": 0}
    assert results["describeConfigs"] == "3600000"
    assert results["incrementalAlterConfigs"] == "7200000"
    config = layout.topic_config(topic)
    assert config is not None and config.config["retention.ms"] == "7200000"
    assert group in results["listConsumerGroups"]
    assert results["describeConsumerGroups"] == {"state": "Empty", "members": 0, "coordinator": 0}
    assert results["listConsumerGroupOffsets"] == {"0": 3, "1": 0}
    assert results["deleteConsumerGroupOffsets"] == {"1": 0}
    assert results["deleteRecords"] == 2
    assert confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, 1)[0].offset == 2
    assert results["describeAcls"] == [{"principal": "User:alice", "operation": "READ", "permission": "ALLOW"}]
    assert {(e.principal, e.operation, e.permission) for e in layout.acls(
        ResourcePattern(ResourceType.TOPIC, acl_topic, PatternType.LITERAL))} == {
        ("User:alice", AclOperation.READ, AclPermission.ALLOW)}
    cluster = results["describeCluster"]
    assert cluster["controller"] == 0 and cluster["nodes"] == [0] and cluster["clusterId"]


# ---- command-line tools (3.9.1, --bootstrap-server) ----------------------------------------------------


@pytest.mark.compat("console producer", TOOLS)
def test_console_producer(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "console-produced")
    tool("kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", topic,
         "--property", "parse.key=true", "--property", "key.separator=:", stdin="a:1\nb:2\nc:3\n").check()
    got = confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, 3)
    assert [(m.offset, m.key, m.value) for m in got] == [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"c", b"3")]


@pytest.mark.compat("console consumer (group)", TOOLS)
def test_console_consumer(secure: SecureBroker, layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "console-consumed", partitions=2)
    produce(bootstrap, topic, 0, 3)
    produce(bootstrap, topic, 1, 2)
    run = tool("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
               "--topic", topic, "--group", "console-group", "--from-beginning", "--max-messages", "5",
               "--timeout-ms", "60000", "--property", "print.key=true", "--property", "print.partition=true",
               "--property", "print.offset=true").check()
    lines = sorted(line.split("\t") for line in run.stdout.splitlines() if line.startswith("Partition:"))
    assert lines == sorted([f"Partition:{p}", f"Offset:{i}", f"k{i}", f"{topic}-{p}-{i}"]
                           for p, n in ((0, 3), (1, 2)) for i in range(n)), run.tail()
    wait_until(lambda: committed_offsets(secure, "console-group") == {0: 3, 1: 2}, 30,
               "the console consumer's commits")


GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.mark.compat("consumer-groups --describe", TOOLS)
def test_consumer_groups_describe(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "groups-describe", partitions=2)
    produce(bootstrap, topic, 0, 5)
    produce(bootstrap, topic, 1, 4)
    commit(bootstrap, "described-group", {(topic, 0): 3, (topic, 1): 4})
    run = tool(GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", "described-group").check()
    rows = {tuple(line.split()[:6]) for line in run.stdout.splitlines() if line.startswith("described-group")}
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
    assert rows == {("described-group", topic, "0", "3", "5", "2"), ("described-group", topic, "1", "4", "4", "0")}


@pytest.mark.compat("consumer-groups --reset-offsets --execute", TOOLS)
def test_consumer_groups_reset_offsets(secure: SecureBroker, layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "groups-reset", partitions=2)
    produce(bootstrap, topic, 0, 5)
    produce(bootstrap, topic, 1, 4)
    commit(bootstrap, "reset-group", {(topic, 0): 5, (topic, 1): 4})
    tool(GROUPS, "--bootstrap-server", bootstrap, "--reset-offsets", "--group", "reset-group", "--topic",
         f"{topic}:0", "--to-offset", "1", "--execute").check()
    assert committed_offsets(secure, "reset-group") == {0: 1, 1: 4}


@pytest.mark.compat("consumer-groups --delete", TOOLS)
def test_consumer_groups_delete(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "groups-delete")
    commit(bootstrap, "deleted-group", {(topic, 0): 0})
    run = tool(GROUPS, "--bootstrap-server", bootstrap, "--delete", "--group", "deleted-group").check()
    assert "Deletion of requested consumer groups ('deleted-group') was successful." in run.stdout
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_consumer_groups().result(timeout=30)
    assert "deleted-group" not in {g.group_id for g in listed.valid}


TOPICS = "org.apache.kafka.tools.TopicCommand"


@pytest.mark.compat("topics --create", TOOLS)
def test_topics_create(layout: ZkLayout, bootstrap: str) -> None:
    tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", "tool-created", "--partitions", "3",
         "--replication-factor", "1", "--config", "retention.ms=86400000").check()
    assert topic_leaders(bootstrap, "tool-created") == {0: 0, 1: 0, 2: 0}
    config = layout.topic_config("tool-created")
    assert config is not None and config.config == {"retention.ms": "86400000"}


@pytest.mark.compat("topics --describe", TOOLS)
def test_topics_describe(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "tool-described", partitions=2)
    run = tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic).check()
    assert f"Topic: {topic}\tPartitionCount: 2\tReplicationFactor: 1" in run.stdout
    for p in (0, 1):
        assert f"Topic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" in run.stdout


@pytest.mark.compat("topics --list", TOOLS)
def test_topics_list(layout: ZkLayout, bootstrap: str) -> None:
    new_topic(layout, bootstrap, "tool-listed")
    run = tool(TOPICS, "--bootstrap-server", bootstrap, "--list").check()
    assert "tool-listed" in run.stdout.split()


@pytest.mark.compat("topics --alter --partitions", TOOLS)
def test_topics_alter_partitions(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "tool-altered", partitions=1)
    tool(TOPICS, "--bootstrap-server", bootstrap, "--alter", "--topic", topic, "--partitions", "3").check()
    wait_until(lambda: topic_leaders(bootstrap, topic) == {0: 0, 1: 0, 2: 0}, 15, "3 partitions led")


@pytest.mark.compat("configs --alter/--describe topic", TOOLS)
def test_configs_topic(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "tool-configured")
    tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name",
         topic, "--alter", "--add-config", "retention.ms=1000,max.message.bytes=20000").check()
    config = layout.topic_config(topic)
    assert config is not None and config.config == {"retention.ms": "1000", "max.message.bytes": "20000"}


@pytest.mark.compat("configs --alter topic: cleanup.policy=compact, a bad value refused", TOOLS)
def test_configs_topic_compaction(layout: ZkLayout, bootstrap: str) -> None:
    """Kafka's tool turns compaction on (stored in /config/topics) and gets INVALID_CONFIG with the reason for
    a policy that does not exist, which leaves the stored config as it was."""
    topic = new_topic(layout, bootstrap, "tool-compacted")
    tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "topics",
         "--entity-name", topic, "--alter", "--add-config", "cleanup.policy=compact").check()
    run = tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "topics",
               "--entity-name", topic, "--alter", "--add-config", "cleanup.policy=shred")
    assert run.returncode != 0
    assert "InvalidConfigurationException" in run.output and "cleanup.policy" in run.output
    config = layout.topic_config(topic)
    assert config is not None and config.config.get("cleanup.policy") == "compact"


@pytest.mark.compat("acls --add/--list (ACL authorizer)", TOOLS)
def test_acls_add(layout: ZkLayout, bootstrap: str) -> None:
    run = tool("kafka.admin.AclCommand", "--bootstrap-server", bootstrap, "--add", "--allow-principal",
               "User:bob", "--operation", "Read", "--operation", "Describe", "--topic", "acl-tool-topic",
               "--group", "acl-tool-group").check()
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in run.stdout
    topic_acls = layout.acls(ResourcePattern(ResourceType.TOPIC, "acl-tool-topic", PatternType.LITERAL))
    group_acls = layout.acls(ResourcePattern(ResourceType.GROUP, "acl-tool-group", PatternType.LITERAL))
    expected = {("User:bob", AclOperation.READ), ("User:bob", AclOperation.DESCRIBE)}
    assert {(e.principal, e.operation) for e in topic_acls} == expected
    assert {(e.principal, e.operation) for e in group_acls} == expected


@pytest.mark.compat("delete-records", TOOLS)
def test_delete_records(layout: ZkLayout, bootstrap: str, tmp_path: Path) -> None:
    topic = new_topic(layout, bootstrap, "tool-delete-records")
    produce(bootstrap, topic, 0, 6)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 4}]}))
    run = tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", bootstrap,
               "--offset-json-file", str(offsets)).check()
    assert f"partition: {topic}-0\tlow_watermark: 4" in run.stdout
    assert [m.offset for m in confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, 2)] == [4, 5]


@pytest.mark.compat("get-offsets (GetOffsetShell)", TOOLS)
def test_get_offset_shell(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "tool-offsets", partitions=2)
    produce(bootstrap, topic, 0, 4)
    produce(bootstrap, topic, 1, 1)
    run = tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", bootstrap, "--topic", topic).check()
    assert sorted(run.stdout.split()) == [f"{topic}:0:4", f"{topic}:1:1"]


@pytest.mark.compat("broker-api-versions", TOOLS)
def test_broker_api_versions(bootstrap: str) -> None:
    run = tool("kafka.admin.BrokerApiVersionsCommand", "--bootstrap-server", bootstrap).check()
    # Kafka's names for the APIs, each with the range metaq advertises ("0 to 7", or "0" for one version)
    names = {0: "Produce", 1: "Fetch", 3: "Metadata", 18: "ApiVersions", 60: "DescribeCluster"}
    for key, name in names.items():
        low, high = BROKER_APIS[key][2], BROKER_APIS[key][3]  # type: ignore[index]
        span = f"{low} to {high}" if low != high else f"{low}"
        assert f"{name}({key}): {span} [usable:" in run.stdout, run.stdout
    assert "ElectLeaders(43): 0 to 2 [usable:" in run.stdout, run.stdout


@pytest.mark.compat("log-dirs --describe (DescribeLogDirs)", TOOLS)
def test_log_dirs_describe(layout: ZkLayout, bootstrap: str) -> None:
    topic = new_topic(layout, bootstrap, "tool-log-dirs")
    produce(bootstrap, topic, 0, 3)
    run = tool("org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", bootstrap, "--describe",
               "--topic-list", topic).check()
    document = json.loads(run.stdout.strip().splitlines()[-1])
    [broker] = document["brokers"]
    [log_dir] = broker["logDirs"]
    [partition] = log_dir["partitions"]
    assert broker["broker"] == 0 and log_dir["error"] is None and log_dir["logDir"].endswith("/logs-0")
    assert partition["partition"] == f"{topic}-0" and partition["size"] > 0 and partition["isFuture"] is False


@pytest.mark.compat("leader-election (ElectLeaders)", TOOLS)
def test_leader_election(layout: ZkLayout, bootstrap: str) -> None:
    """Served by the controller (docs/reassignment.md): a partition led by its preferred replica needs no
    election; the moves themselves are in integration_tests/test_partition_reassignment.py."""
    topic = new_topic(layout, bootstrap, "tool-election")
    run = tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", bootstrap,
               "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert run.returncode == 0, run.output
    assert f"Valid replica already elected for partitions {topic}-0" in run.output


# ---- 2.8.2's tools writing to ZooKeeper (--zookeeper) ---------------------------------------------------


@pytest.mark.compat("topics --create --zookeeper", TOOLS_ZK)
def test_topics_create_zookeeper(secure: SecureBroker, bootstrap: str) -> None:
    """Kafka's tool writes only the assignment; the controller elects the leaders (as Kafka's does)."""
    run_class(TOOLS_2_8, "kafka.admin.TopicCommand", ["--zookeeper", secure.zk_connect, "--create", "--topic",
                                                      "zk-created", "--partitions", "3", "--replication-factor",
                                                      "1"]).check()
    wait_until(lambda: topic_leaders(bootstrap, "zk-created") == {0: 0, 1: 0, 2: 0}, 30,
               "the controller to elect leaders of the partitions Kafka's TopicCommand created")
    acked = produce(bootstrap, "zk-created", 2, 3)
    assert [m.offset for m in acked] == [0, 1, 2]


@pytest.mark.compat("configs --zookeeper SCRAM user, then SASL/SCRAM login", TOOLS_ZK)
def test_scram_user_from_zookeeper_tool(secure: SecureBroker, layout: ZkLayout, bootstrap: str) -> None:
    run_class(TOOLS_2_8, "kafka.admin.ConfigCommand", [
        "--zookeeper", secure.zk_connect, "--alter", "--entity-type", "users", "--entity-name", "carol",
        "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-pw],SCRAM-SHA-512=[password=carol-pw]",
    ]).check()
    topic = new_topic(layout, bootstrap, "scram-login")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        producer = confluent_kafka.Producer({
            "bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "carol", "sasl.password": "carol-pw"})
        delivered: list[Any] = []
        producer.produce(topic, b"from carol", on_delivery=lambda err, _msg, out=delivered: out.append(err))
        assert producer.flush(30) == 0
        assert delivered == [None], delivered
    # and the credential is checked: a wrong password is refused as an authentication failure
    failures: list[confluent_kafka.KafkaError] = []
    wrong = confluent_kafka.Producer({
        "bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "wrong",
        "error_cb": failures.append})

    def refused() -> bool:
        wrong.poll(0.2)
        return any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in failures)

    wait_until(refused, 30, "the wrong password refused")


def test_peer_program_failures_are_reported(bootstrap: str) -> None:
    """A peer that cannot start fails the test with the JVM's own error (never a silent pass)."""
    run = run_program(CLIENTS_3_9, JAVA_PROGRAMS / "NoSuchProgram.java", [bootstrap])
    assert run.returncode != 0
    assert "NoSuchProgram.java" in run.output
    with pytest.raises(Exception, match="exited"):
        run.check()


@pytest.mark.compat("consumer group.protocol=consumer (KIP-848: not served)", CLIENTS_4.label)
def test_java_consumer_kip848_protocol_not_served(layout: ZkLayout, bootstrap: str) -> None:
    """4.x's new group protocol needs ConsumerGroupHeartbeat, which metaq does not serve: the consumer
    fails with Kafka's own clear error instead of hanging (the classic protocol, the default, works)."""
    topic = new_topic(layout, bootstrap, "java-kip848")
    run = run_program(CLIENTS_4, JAVA_PROGRAMS / "ClientRoundTrip.java",
                      [bootstrap, topic, "kip848-group", "1", "group.protocol=consumer"])
    assert run.returncode != 0
    assert "ConsumerGroupHeartbeatRequest failed due to unsupported version while sending request: " \
           "The node does not support CONSUMER_GROUP_HEARTBEAT" in run.output, run.tail()


@pytest.mark.compat("transactional producer (commit, abort, read_committed)", CLIENTS_3_9.label)
def test_java_transactional_producer(layout: ZkLayout, bootstrap: str) -> None:
    """Kafka's transactional producer against metaq's transaction coordinator (docs/transactions.md): a
    transaction aborted, then one committed; Kafka's read_committed consumer reads the committed records only."""
    topic = new_topic(layout, bootstrap, "java-transactional")
    run = run_program(CLIENTS_3_9, JAVA_PROGRAMS / "ClientRoundTrip.java",
                      [bootstrap, topic, "txn-group", "4", "transactional.id=java-txn",
                       "isolation.level=read_committed"])
    assert run.returncode == 0, run.tail()
    rows = run.json_lines()
    assert [row["aborted"] for row in rows if "aborted" in row] == [4]
    assert sorted(row["read"]["value"] for row in rows if "read" in row) == ["v0", "v1", "v2", "v3"], run.tail()
