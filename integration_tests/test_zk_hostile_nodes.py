"""Nodes written by hand (or by a hostile client) in a live cluster: a broker id beyond int32, malformed topic
and group nodes, offsets that are no offset, a persistent fake member, a catastrophic whitelist regex, and a
broker restarted after kill -9 within its old session's lifetime. Real ZooKeeper, broker processes, kcat,
confluent-kafka and the ``metaq`` ops commands as subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.admin
import pytest
from kazoo.client import KazooClient

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer
from metaq.errors import MetaqError
from metaq.producer import Producer
from metaq.testing.broker import BrokerCluster, topic_leaders
from metaq.testing.wait import wait_until
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import WHITE_LIST, TopicCount, ZkLayout, paths

pytestmark = pytest.mark.timeout(300)

BAD_BROKER = json.dumps({"version": 5, "host": "127.0.0.1", "port": 1,
                         "endpoints": ["PLAINTEXT://127.0.0.1:1"]}).encode()


def metaq(*args: str, timeout: float = 90, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=timeout,
                          input=stdin)


# -- broker: nodes it cannot serve ----------------------------------------------------------------------


def test_broker_id_beyond_int32_is_skipped_and_clients_keep_working(
        broker_cluster: BrokerCluster, zk: KazooClient, zk_layout: ZkLayout) -> None:
    """A /brokers/ids/4294967296 written by anyone used to make every Metadata response fail to encode
    (struct.error): no Kafka client could use the cluster."""
    zk_layout.ensure_persistent_paths()
    zk.create("/brokers/ids/4294967296", BAD_BROKER)
    broker = broker_cluster.add(0)
    create_topic(zk_layout, "fresh", 2)
    wait_until(lambda: len(topic_leaders(broker.bootstrap, "fresh")) == 2, 30, "topic fresh on the broker")

    listing = subprocess.run([peers.KCAT, "-b", broker.bootstrap, "-L", "-J"], capture_output=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    metadata = json.loads(listing.stdout)
    assert [b["id"] for b in metadata["brokers"]] == [0]
    assert "fresh" in {t["topic"] for t in metadata["topics"]}

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.list_topics(timeout=30)
    assert set(cluster.brokers) == {0} and "fresh" in cluster.topics
    acked = peers.confluent_produce(broker.bootstrap, "fresh", 1, [(b"k", b"v", 1700000000000)])
    assert [m.value for m in acked] == [b"v"]
    assert [m.value for m in peers.confluent_consume(broker.bootstrap, "fresh", 1, 0, 1)] == [b"v"]
    _logged_once(broker, "/brokers/ids/4294967296")


def test_malformed_topic_node_does_not_freeze_the_view(
        broker_cluster: BrokerCluster, zk: KazooClient, zk_layout: ZkLayout) -> None:
    """One malformed /brokers/topics node used to stop every reload: new topics stayed invisible."""
    broker = broker_cluster.add(0)
    zk.create("/brokers/topics/garbage", b"{not json")
    create_topic(zk_layout, "fresh", 1)  # after the bad node: must become visible
    wait_until(lambda: len(topic_leaders(broker.bootstrap, "fresh")) == 1, 30, "topic fresh on the broker")
    peers.kcat_produce(broker.bootstrap, "fresh", 0, [("k", "v")])
    assert [m.value for m in peers.kcat_consume(broker.bootstrap, "fresh", 0, "beginning", 1)] == [b"v"]
    create_topic(zk_layout, "later", 1)  # more reloads: the bad node is not logged again
    wait_until(lambda: len(topic_leaders(broker.bootstrap, "later")) == 1, 30, "topic later on the broker")
    _logged_once(broker, "/brokers/topics/garbage")


def _logged_once(broker: BrokerProcess, node: str) -> None:
    log = broker.log_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if "leaving out" in line and f"{node}:" in line]
    # once by each part of the broker that reads the node (metadata for clients, the controller), not once a pass
    loggers = [line.split()[3] for line in lines]
    assert lines and len(loggers) == len(set(loggers)), (node, lines)
    assert "struct.error" not in log and "Traceback" not in log


def test_broker_id_beyond_int32_is_a_config_error(tmp_path: Path, zk_connect: str) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"broker.id={2**40}\nzookeeper.connect={zk_connect}\nlog.dirs={tmp_path / 'logs'}\n")
    done = metaq("broker", "start", "--config", str(config), timeout=60)
    assert done.returncode == 1, done.stderr
    assert "'broker.id': 1099511627776 must be in 0..2147483647" in done.stderr
    assert "Traceback" not in done.stderr


# -- broker: restart after kill -9 ------------------------------------------------------------------------


@pytest.fixture
def slow_expiry_zk(tmp_path: Path) -> Iterator[str]:
    """A ZooKeeper whose sessions may last 40 s (tickTime 2 s), as in production; the shared test server
    caps them at 4 s, shorter than the 10 s a broker used to wait for its old registration."""
    server = ZooKeeperServer(data_dir=tmp_path / "zk", tick_time_ms=2000, force_sync=False).start()
    try:
        yield server.connect_string
    finally:
        server.stop()


def test_restart_after_kill_waits_for_the_old_session_and_a_live_holder_is_refused(
        slow_expiry_zk: str, tmp_path: Path) -> None:
    timeout_ms = 15000
    broker = BrokerProcess(slow_expiry_zk, 0, tmp_path, properties={"zookeeper.session.timeout.ms": timeout_ms})
    broker.start()
    try:
        broker.kill()
        broker.start(timeout=timeout_ms / 1000 + 60)  # at once: the old session still holds /brokers/ids/0
        log = broker.log_path.read_text(errors="replace")
        assert "waiting up to 25s for that session to expire" in log
        client = connect(slow_expiry_zk)
        try:
            node = ZkLayout(client).broker(0)
            assert node is not None and node.port == broker.port
        finally:
            client.stop()
            client.close()  # and its wakeup socket pair

        other = BrokerProcess(slow_expiry_zk, 0, tmp_path / "other",
                              properties={"zookeeper.session.timeout.ms": 4000})
        with pytest.raises(MetaqError, match="exited with 1"):
            other.start(timeout=60)
        other_log = other.log_path.read_text(errors="replace")
        assert (f"broker id 0 already registered at /brokers/ids/0 by the broker at "
                f"PLAINTEXT://127.0.0.1:{broker.port}") in other_log
        assert "still alive after waiting 14s" in other_log
    finally:
        broker.stop()


# -- ops tools --------------------------------------------------------------------------------------------


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)


def test_groups_list_reports_a_malformed_group_and_lists_the_others(zk: KazooClient, zk_layout: ZkLayout,
                                                                      zk_connect: str) -> None:
    zk_layout.write_offset("good1", "t", 0, 5)
    zk.create(paths.offset_path("bad", "t", 0), b"-5", makepath=True)
    zk.create(paths.owner_path("worse", "t", 0), b"\xff", makepath=True)
    zk_layout.write_offset("good2", "t", 1, 7)
    node = zk_layout.full_path(paths.offset_path("bad", "t", 0))

    table = metaq("groups", "list", "--zookeeper", zk_connect)
    assert table.returncode == 1, table.stderr
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[1:]}
    assert set(rows) == {"bad", "good1", "good2", "worse"}
    assert rows["bad"][3] == rows["worse"][3] == "malformed" and rows["good1"][3] == "Empty"  # GROUP KIND MEMBERS STATE
    assert f"group bad: malformed node {node}: negative offset -5" in table.stderr
    assert zk_layout.full_path(paths.owner_path("worse", "t", 0)) in table.stderr
    assert "Traceback" not in table.stderr

    as_json = metaq("groups", "list", "--zookeeper", zk_connect, "--json")
    assert as_json.returncode == 1
    groups = {g["group"]: g for g in _json(as_json)["groups"]}
    assert groups["good2"]["error"] is None and groups["good2"]["topics"] == ["t"]
    assert node in groups["bad"]["error"]


def test_export_and_describe_fail_naming_a_negative_offset_node(zk: KazooClient, zk_layout: ZkLayout,
                                                            zk_connect: str) -> None:
    zk_layout.write_offset("g", "t", 0, 5)
    zk.create(paths.offset_path("g", "t", 1), b"-5", makepath=True)
    done = metaq("offsets", "export", "--zookeeper", zk_connect)
    assert done.returncode == 1, done.stdout
    node = zk_layout.full_path(paths.offset_path("g", "t", 1))
    assert f"malformed node {node}: negative offset -5" in done.stderr and "Traceback" not in done.stderr
    described = metaq("groups", "describe", "g", "--zookeeper", zk_connect)
    assert described.returncode == 1 and f"malformed node {node}: negative offset -5" in described.stderr

    # an import (or a reset) is how an operator repairs it: it must not fail on the node it replaces
    repaired = metaq("offsets", "import", "-", "--zookeeper", zk_connect, "--execute", "--json",
                     stdin="/consumers/g/offsets/t/1:3\n")
    assert repaired.returncode == 0, repaired.stderr
    assert zk_layout.read_offset("g", "t", 1) == 3


def test_describe_and_owners_flag_a_persistent_member_and_survive_a_catastrophic_regex(
        broker, zk: KazooClient, zk_layout: ZkLayout, zk_connect: str,
        make_zk_client: Any) -> None:
    create_topic(zk_layout, "a" * 40 + "-x", 1)  # `(a+)+$` backtracks for hours against it in Python's re
    create_topic(zk_layout, "t", 2)
    member = ZkLayout(make_zk_client())
    member.register_consumer("g", "g_live", TopicCount({"(a+)+$": 1}, WHITE_LIST))
    zk.create(paths.consumer_id_path("g", "g_fake"), TopicCount({"t": 100000}).encode(), makepath=True)

    described = metaq("groups", "describe", "g", "--zookeeper", zk_connect, "--json")
    assert described.returncode == 0, described.stderr
    members = {m["consumer_id"]: m for m in _json(described)["members"]}
    assert members["g_fake"]["ephemeral"] is False and members["g_live"]["ephemeral"] is True
    table = metaq("groups", "describe", "g", "--zookeeper", zk_connect)
    assert table.returncode == 0 and "member g_fake is registered by a persistent node" in table.stderr
    assert "PERSISTENT" in table.stdout

    owners = metaq("owners", "g", "--zookeeper", zk_connect)
    assert owners.returncode == 0, owners.stderr
    assert "registered by persistent nodes, no live consumers: g_fake" in owners.stdout
    assert _json(metaq("owners", "g", "--zookeeper", zk_connect, "--json"))["persistent_members"] == ["g_fake"]


# -- consumer -------------------------------------------------------------------------------------------


def test_consumer_reads_everything_despite_a_persistent_fake_member(broker, make_topic, zk: KazooClient,
                                                                     zk_connect: str) -> None:
    """The fake (sorting first, asking for 100,000 streams) used to be assigned every partition, so the real
    member read nothing and ended without an error."""
    make_topic("t", partitions=2)
    zk.create(paths.consumer_id_path("g", "a-fake"), TopicCount({"t": 100000}).encode(), makepath=True)
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        for future in [producer.send("t", b"m%d" % i, partition=i % 2) for i in range(10)]:
            future.result(30)
    consumer = Consumer({"group.id": "g", "zookeeper.connect": zk_connect, "auto.offset.reset": "smallest",
                         "consumer.timeout.ms": 15000, "zookeeper.session.timeout.ms": 3000})
    with consumer:
        [stream] = consumer.create_message_streams({"t": 1})["t"]
        got = sorted(next(stream).value for _ in range(10))
    assert got == sorted(b"m%d" % i for i in range(10))
