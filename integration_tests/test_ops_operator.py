"""What an operator meets in the ops tools, against one real ZooKeeper chroot and broker shared by the module:
``acls list`` without a filter, a forced ``offsets reset`` that a live member applies at once (and says so),
``groups describe`` of a member that has not committed yet, ``offsets export`` of a broker-coordinated group, and
``groups list`` STATE in Kafka's names for both kinds of group; ``--all-groups`` and CSV reset plans,
``--bootstrap-server`` mode, and console-consumer ``--include``/``--format`` beside kcat and Kafka's console consumer.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from integration_tests.peers import KCAT, confluent_committed
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer
from metaq.producer import Producer
from metaq.testing.broker import BrokerCluster, topic_leaders
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import own_chroot
from metaq.zkclient import connect
from zk_layout import TopicCount, ZkLayout
from zk_layout.acl_formats import AclEntry, AclOperation, AclPermission, PatternType, ResourcePattern, ResourceType

pytestmark = pytest.mark.timeout(240)

MEMBER = {"auto.offset.reset": "smallest", "zookeeper.session.timeout.ms": 6000, "rebalance.backoff.ms": 300,
          "auto.commit.interval.ms": 200, "consumer.timeout.ms": 60000}


@pytest.fixture(scope="module")
def cluster(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with own_chroot(zk_server, "metaq-ops") as connect_string:
        brokers = BrokerCluster(connect_string, tmp_path_factory.mktemp("ops"))
        brokers.add(0, **{"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 2})
        try:
            yield brokers
        finally:
            brokers.stop()


@pytest.fixture(scope="module")
def layout(cluster: BrokerCluster) -> Iterator[ZkLayout]:
    client = connect(cluster.zk_connect, session_timeout_ms=10000)
    try:
        yield ZkLayout(client)
    finally:
        client.stop()
        client.close()


def _topic(cluster: BrokerCluster, layout: ZkLayout, name: str, partitions: int) -> str:
    create_topic(layout, name, partitions)
    bootstrap = cluster.brokers[0].bootstrap
    wait_until(lambda: len(topic_leaders(bootstrap, name)) == partitions, 20, f"topic {name} served")
    return name


def _produce(zk_connect: str, topic: str, partition: int, count: int) -> None:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, b"m%d" % i, partition=partition) for i in range(count)]
        producer.flush(30)
        for future in futures:
            future.result()


def metaq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=90)


def ok(*args: str) -> str:
    result = metaq(*args)
    assert result.returncode == 0, f"metaq {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def test_acls_list_without_a_filter_lists_every_acl(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """As ``kafka-acls --list``: no resource option means every ACL (the default pattern filter is ANY, which
    the command must not then refuse as no concrete pattern type)."""
    entry = AclEntry("User:alice", "*", AclOperation.READ, AclPermission.ALLOW)
    layout.update_acls(ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL), lambda cur: cur | {entry})
    layout.update_acls(ResourcePattern(ResourceType.GROUP, "etl-", PatternType.PREFIXED), lambda cur: cur | {entry})
    listed = json.loads(ok("acls", "list", "--zookeeper", cluster.zk_connect, "--json"))["acls"]
    assert sorted((a["resourceType"], a["name"], a["patternType"]) for a in listed) == [
        ("Group", "etl-", "Prefixed"), ("Topic", "orders", "Literal")]
    text = ok("acls", "list", "--zookeeper", cluster.zk_connect)
    assert "Topic:orders" in text and "Group:etl-" in text


def test_forced_reset_is_applied_by_a_live_member_at_once(cluster: BrokerCluster, layout: ZkLayout,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A forced reset on a quiet partition: the member notices its offset node change (a watch), logs that an
    operator reset it, and delivers from the new offset without a new message arriving; meanwhile the
    commit path does not call it a fence by a newer owner."""
    caplog.set_level(logging.INFO, logger="metaq.consumer")
    topic = _topic(cluster, layout, "quiet", 2)
    _produce(cluster.zk_connect, topic, 1, 5)
    with Consumer({"group.id": "resettable", "zookeeper.connect": cluster.zk_connect, **MEMBER}) as member:
        [stream] = member.create_message_streams({topic: 1})[topic]
        first = [(m.partition, m.offset) for m in (next(stream) for _ in range(5))]
        assert first == [(1, i) for i in range(5)]
        wait_until(lambda: layout.offsets("resettable").get((topic, 1)) == 5, 30, "offset 5 committed")

        done = ok("offsets", "reset", "resettable", "--topic", f"{topic}:1", "--to-offset", "2", "--execute",
                  "--force", "--zookeeper", cluster.zk_connect)
        assert "Wrote 1 offset(s)" in done
        again = next(stream)  # no new message: only the reset can deliver offset 2 again
        assert (again.partition, again.offset) == (1, 2)
        wait_until(lambda: layout.offsets("resettable").get((topic, 1)) == 3, 30, "the member commits past it")
    base = ["offsets", "reset", "resettable", "--topic", topic, "--zookeeper", cluster.zk_connect, "--json"]
    current = json.loads(ok(*base, "--to-current"))  # kafka-consumer-groups' options; dry runs
    assert [(c["partition"], c["current"], c["new"]) for c in current["changes"]] == [(0, 0, 0), (1, 3, 3)]
    hour = json.loads(ok(*base, "--by-duration", "PT1H"))  # every message is newer than an hour
    assert hour["action"].startswith("reset to ") and [c["new"] for c in hour["changes"]] == [0, 0]
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"the offset of {topic}-1 was reset to 2 by an operator" in m and r.levelno == logging.WARNING
               for m, r in zip(messages, caplog.records, strict=True)), messages
    assert not any("fenced by a newer owner" in m for m in messages), messages


def test_describe_of_a_member_that_has_not_committed_yet(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """A member that owns partitions but committed nothing (here: no auto-commit) holds the fence's -1: the
    rows say "not committed yet" (not the claim time as LAST-COMMIT), and the header's total does not read 0."""
    topic = _topic(cluster, layout, "fresh", 2)
    _produce(cluster.zk_connect, topic, 0, 3)
    with Consumer({"group.id": "fresh-group", "zookeeper.connect": cluster.zk_connect, **MEMBER,
                   "auto.offset.reset": "largest", "auto.commit.enable": False}) as member:
        member.create_message_streams({topic: 1})
        wait_until(lambda: len(layout.owners("fresh-group")) == 2, 30, "both partitions owned")
        text = ok("groups", "describe", "fresh-group", "--zookeeper", cluster.zk_connect)
        described = json.loads(ok("groups", "describe", "fresh-group", "--zookeeper", cluster.zk_connect, "--json"))
        refused = metaq("groups", "delete", "fresh-group", "--zookeeper", cluster.zk_connect)
        assert refused.returncode == 1 and "failed because its consumers are still active" in refused.stderr
        assert layout.group_exists("fresh-group")
    header = text.splitlines()[0]
    assert header.endswith("total lag unknown (2 owned partitions not committed yet)"), text
    rows = [line for line in text.splitlines() if line.startswith(f"{topic} ")]
    assert len(rows) == 2 and all("not committed yet" in row for row in rows), text
    assert [(p["offset"], p["last_commit_ms"]) for p in described["partitions"]] == [(None, None)] * 2
    assert all(p["claimed_ms"] for p in described["partitions"]) and described["partitions_without_lag"] == 2


def _protocol_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """A broker-coordinated group with committed offsets and no member left (Empty)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False, "session.timeout.ms": 6000,
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.2) is None and bool(consumer.assignment()), 30, f"{group} assigned")
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def test_export_and_list_of_a_broker_coordinated_group(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """``offsets export --group`` of a group only the brokers know, which ``groups list`` shows (Empty, with the
    topics of its offsets) and ``offsets reset`` accepts; a ZooKeeper group's STATE uses Kafka's names too."""
    topic = _topic(cluster, layout, "stdtopic", 2)
    _produce(cluster.zk_connect, topic, 0, 4)
    _protocol_group(cluster.brokers[0].bootstrap, "stdg", topic, {0: 3, 1: 0})
    layout.write_offset("zkg", topic, 0, 1)

    exported = ok("offsets", "export", "--group", "stdg", "--zookeeper", cluster.zk_connect)
    assert exported.splitlines() == [f"/consumers/stdg/offsets/{topic}/0:3", f"/consumers/stdg/offsets/{topic}/1:0"]
    everything = ok("offsets", "export", "--zookeeper", cluster.zk_connect)
    assert f"/consumers/stdg/offsets/{topic}/0:3" in everything and f"/consumers/zkg/offsets/{topic}/0:1" in everything
    listed = {g["group"]: g for g in json.loads(ok("groups", "list", "--zookeeper", cluster.zk_connect,
                                                   "--json"))["groups"]}
    assert (listed["stdg"]["kind"], listed["stdg"]["state"], listed["stdg"]["topics"]) == ("protocol", "Empty", [topic])
    assert (listed["zkg"]["kind"], listed["zkg"]["state"]) == ("zookeeper", "Empty")
    missing = metaq("offsets", "export", "--group", "ghost", "--zookeeper", cluster.zk_connect)
    assert missing.returncode == 1 and "no offsets in __consumer_offsets" in missing.stderr
    deleted = json.loads(ok("groups", "delete", "stdg", "--zookeeper", cluster.zk_connect, "--json"))
    assert deleted == {"group": "stdg", "zookeeper": False, "coordinator": 0}
    assert "Deletion of requested consumer group 'zkg' was successful (ZooKeeper)." in ok(
        "groups", "delete", "zkg", "--zookeeper", cluster.zk_connect)
    listed = json.loads(ok("groups", "list", "--zookeeper", cluster.zk_connect, "--json"))["groups"]
    assert not {"stdg", "zkg"} & {g["group"] for g in listed}
    _protocol_group(cluster.brokers[0].bootstrap, "stdg", topic, {0: 1})  # for what follows
    owners = metaq("owners", "stdg", "--zookeeper", cluster.zk_connect)  # a ZooKeeper-only notion: says why
    assert owners.returncode == 1 and "coordinated by a broker" in owners.stderr and "groups describe" in owners.stderr




EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _lines_until(proc: subprocess.Popen[str], messages: int) -> list[str]:
    """Read the example's stdout until it printed ``messages`` message lines (``chunk`` lines aside)."""
    assert proc.stdout is not None
    lines: list[str] = []
    while len([line for line in lines if not line.startswith("chunk")]) < messages:
        line = proc.stdout.readline()
        assert line, f"the example exited ({proc.wait()}) after printing {lines}"
        lines.append(line.strip())
    return lines


@pytest.mark.parametrize(("script", "coordination"), [
    ("consume_stream.py", None), ("consume_listener.py", None), ("consume_batch_listener.py", None),
    ("consume_listener.py", "kafka")])
def test_example_consumers_run(cluster: BrokerCluster, layout: ZkLayout, script: str,
                               coordination: str | None) -> None:
    """examples/consume_*.py run as their docstrings say: they print every message, and SIGTERM (as Ctrl-C)
    ends them with exit 0 after committing what they printed (to ZooKeeper, or to the group coordinator with
    ``--coordination kafka``)."""
    topic = f"ex-{script.split('.')[0].replace('_', '-')}{'-' + coordination if coordination else ''}"
    _topic(cluster, layout, topic, 2)
    _produce(cluster.zk_connect, topic, 0, 3)
    _produce(cluster.zk_connect, topic, 1, 2)
    group = f"{topic}-group"
    extra = ["--coordination", coordination] if coordination else []
    with subprocess.Popen([sys.executable, str(EXAMPLES / script), "--zookeeper", cluster.zk_connect, "--topic",
                           topic, "--group", group, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            lines = _lines_until(proc, 5)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
    if coordination == "kafka":
        assert confluent_committed(cluster.brokers[0].bootstrap, group, topic, 2) == {0: 3, 1: 2}
        assert not layout.group_exists(group)  # nothing of a broker-coordinated group is in ZooKeeper
    else:
        assert layout.offsets(group) == {(topic, 0): 3, (topic, 1): 2}  # committed on the way out
    values = [line.split() for line in lines if not line.startswith("chunk")]
    assert sorted((int(p), int(o)) for p, o, _ in values) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    if script == "consume_batch_listener.py":
        assert any(line.startswith("chunk 0 0-2 3") for line in lines), lines


def test_offsets_lookup_agrees_with_kcat(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """``offsets lookup`` prints GetOffsetShell's topic:partition:offset lines; the log start/end and the
    offset of a time are what ``kcat -Q`` finds (-2 earliest, -1 latest, a time in ms)."""
    topic = _topic(cluster, layout, "lookup", 2)
    _produce(cluster.zk_connect, topic, 0, 4)
    base = ["offsets", "lookup", "--topic", topic, "--zookeeper", cluster.zk_connect]
    assert ok(*base, "--time", "earliest").split() == [f"{topic}:0:0", f"{topic}:1:0"]
    assert ok(*base).split() == [f"{topic}:0:4", f"{topic}:1:0"]
    assert ok(*base[:3], f"{topic}:0", *base[4:], "--time", "0").split() == [f"{topic}:0:0"]
    assert json.loads(ok(*base, "--time", "2999-01-01T00:00:00Z", "--json"))["offsets"] == [
        {"topic": topic, "partition": 0, "offset": 4}, {"topic": topic, "partition": 1, "offset": 0}]

    def kcat(when: str) -> list[str]:
        done = subprocess.run([KCAT, "-b", cluster.brokers[0].bootstrap, "-Q", "-t", f"{topic}:0:{when}",
                               "-t", f"{topic}:1:{when}"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        found = re.findall(r"\[(\d+)\]\s+offset\s+(-?\d+)", done.stdout)
        return sorted(f"{topic}:{p}:{o}" for p, o in found)

    assert kcat("-2") == ok(*base, "--time", "earliest").split()
    assert kcat("-1") == ok(*base, "--time", "latest").split()


def test_offsets_delete_for_both_kinds_of_group(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """``offsets delete`` as kafka-consumer-groups --delete-offsets: OffsetDelete at a protocol group's
    coordinator (the offset is gone for a standard client), the offset nodes of a ZooKeeper group (refused while it
    has a live member unless --force)."""
    topic = _topic(cluster, layout, "deloffsets", 2)
    bootstrap = cluster.brokers[0].bootstrap
    _protocol_group(bootstrap, "delstd", topic, {0: 2, 1: 1})
    out = ok("offsets", "delete", "delstd", "--topic", f"{topic}:0", "--zookeeper", cluster.zk_connect)
    assert re.search(rf"{topic}\s+0\s+Successful", out), out
    assert confluent_committed(bootstrap, "delstd", topic, 2) == {1: 1}
    state = json.loads(ok("groups", "describe", "delstd", "--state", "--json", "--zookeeper", cluster.zk_connect))
    assert [(s["coordinator"], s["state"], s["members"]) for s in state["state"]] == [("broker 0", "Empty", 0)]

    layout.write_offset("delzk", topic, 0, 3)
    layout.write_offset("delzk", topic, 1, 4)
    layout.register_consumer("delzk", "delzk_host-1", TopicCount({topic: 1}, "static", 0))
    refused = metaq("offsets", "delete", "delzk", "--topic", topic, "--zookeeper", cluster.zk_connect)
    assert refused.returncode == 1 and "live member" in refused.stderr and "--force" in refused.stderr
    assert layout.offsets("delzk") == {(topic, 0): 3, (topic, 1): 4}
    ok("offsets", "delete", "delzk", "--topic", topic, "--force", "--zookeeper", cluster.zk_connect)
    assert layout.offsets("delzk") == {}


def test_topics_alter_adds_partitions(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """``topics alter --partitions`` as kafka-topics --alter: the broker serves the new partitions; fewer or as
    many is refused naming the current count."""
    topic = _topic(cluster, layout, "grow", 1)
    out = json.loads(ok("topics", "alter", topic, "--partitions", "3", "--zookeeper", cluster.zk_connect, "--json"))
    assert out == {"topic": topic, "partitions": 3, "added": {"1": [0], "2": [0]}}
    wait_until(lambda: len(topic_leaders(cluster.brokers[0].bootstrap, topic)) == 3, 20, "3 partitions served")
    same = metaq("topics", "alter", topic, "--partitions", "3", "--zookeeper", cluster.zk_connect)
    assert same.returncode == 1 and "already has 3 partitions" in same.stderr
    fewer = metaq("topics", "alter", topic, "--partitions", "2", "--zookeeper", cluster.zk_connect)
    assert fewer.returncode == 1 and "currently has 3 partitions" in fewer.stderr
    z = ["--zookeeper", cluster.zk_connect]
    assert ok("topics", "describe", topic, "--under-min-isr", *z).strip() == "No under-min-isr partitions."
    ok("topics", "alter-config", topic, "--set", "min.insync.replicas=2", *z)
    described = json.loads(ok("topics", "describe", topic, "--under-min-isr", "--json", *z))["topics"]
    assert [(d["replication_factor"], [p["partition"] for p in d["partitions"]]) for d in described] == [(1, [0, 1, 2])]
    assert ok("topics", "describe", topic, "--unavailable", *z).strip() == "No unavailable partitions."


def test_all_groups_and_csv_reset_plans(cluster: BrokerCluster, layout: ZkLayout, tmp_path: Path) -> None:
    """``--all-groups`` (describe, reset, delete) over both kinds of group, and a reset plan exported as
    kafka-consumer-groups' CSV then applied with --from-file: one group's TOPIC,PARTITION,NEW-OFFSET lines, and
    GROUP-prefixed lines for several. It deletes every group without members: the tests after it make their own."""
    topic = _topic(cluster, layout, "plans", 2)
    _produce(cluster.zk_connect, topic, 0, 6)
    _produce(cluster.zk_connect, topic, 1, 4)
    _protocol_group(cluster.brokers[0].bootstrap, "plan-std", topic, {0: 1, 1: 1})
    layout.write_offset("plan-zk", topic, 0, 2)
    layout.write_offset("plan-zk", topic, 1, 3)
    z = ["--zookeeper", cluster.zk_connect]

    one = ok("offsets", "reset", "plan-zk", "--topic", topic, "--to-latest", "--export", *z)
    assert one == f"{topic},0,6\n{topic},1,4\n\n"  # Kafka's println after the CSV's own line breaks
    everyone = ok("offsets", "reset", "--all-groups", "--topic", f"{topic}:0", "--to-earliest", "--export", *z)
    assert {f"plan-std,{topic},0,0", f"plan-zk,{topic},0,0"} <= set(everyone.split())
    assert layout.offsets("plan-zk") == {(topic, 0): 2, (topic, 1): 3}  # --export alone is a dry run

    single = tmp_path / "single.csv"
    single.write_text(f"{topic},0,5\n{topic},1,99\n")
    ok("offsets", "reset", "plan-zk", "--from-file", str(single), "--execute", *z)
    assert layout.offsets("plan-zk") == {(topic, 0): 5, (topic, 1): 4}  # 99 clamped to the log end
    several = tmp_path / "several.csv"
    several.write_text(ok("offsets", "reset", "plan-zk", "plan-std", "--topic", topic, "--shift-by", "1",
                          "--export", *z))
    assert set(several.read_text().split()) == {f"plan-zk,{topic},0,6", f"plan-zk,{topic},1,4",
                                                f"plan-std,{topic},0,2", f"plan-std,{topic},1,2"}
    ok("offsets", "reset", "plan-zk", "plan-std", "--from-file", str(several), "--execute", *z)
    assert layout.offsets("plan-zk") == {(topic, 0): 6, (topic, 1): 4}
    assert confluent_committed(cluster.brokers[0].bootstrap, "plan-std", topic, 2) == {0: 2, 1: 2}
    no_group = metaq("offsets", "reset", "--from-file", str(single), *z)
    assert no_group.returncode == 2 and "give a GROUP or --all-groups" in no_group.stderr

    described = json.loads(ok("groups", "describe", "--all-groups", "--json", *z))["groups"]
    by_group = {d["group"]: d for d in described}
    assert {"plan-zk", "plan-std"} <= set(by_group)
    text = ok("groups", "describe", "--all-groups", "--state", *z)
    assert re.search(r"plan-std\s+broker 0\s+\S+\s+Empty\s+0", text) and re.search(r"plan-zk\s+zookeeper", text)

    layout.register_consumer("plan-live", "plan-live_host-1", TopicCount({topic: 1}, "static", 0))
    deleted = metaq("groups", "delete", "--all-groups", *z)  # refused for groups with members, as Kafka's
    assert deleted.returncode == 1, deleted.stderr
    done_line = next(line for line in deleted.stdout.splitlines() if line.startswith("Deletion of requested"))
    assert "'plan-std'" in done_line and "'plan-zk'" in done_line and "'plan-live'" not in done_line
    assert "Deletion of some consumer groups failed:" in deleted.stdout
    assert "* Group 'plan-live' could not be deleted due to: " in deleted.stdout
    left = {g["group"] for g in json.loads(ok("groups", "list", "--json", *z))["groups"]}
    assert "plan-live" in left and not {"plan-zk", "plan-std"} & left


def test_bootstrap_server_mode_sees_what_the_brokers_know(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """``--bootstrap-server`` instead of ``--zookeeper`` for topics, broker groups and console-consumer
    ``--partition`` (as Kafka's tools moved to): the same topics, partitions, group offsets, lookups and records as
    through ZooKeeper; a reset commits at the coordinator only; ZooKeeper groups are not seen; the errors name the
    option at fault."""
    topic = _topic(cluster, layout, "bsmode", 2)
    _produce(cluster.zk_connect, topic, 0, 5)
    bootstrap = cluster.brokers[0].bootstrap
    _protocol_group(bootstrap, "bs-std", topic, {0: 3, 1: 0})
    layout.write_offset("bs-zk", topic, 0, 1)
    z, b = ["--zookeeper", cluster.zk_connect], ["--bootstrap-server", bootstrap]

    def both(*args: str) -> tuple[Any, Any]:
        return json.loads(ok(*args, "--json", *z)), json.loads(ok(*args, "--json", *b))

    via_zk, via_brokers = both("topics", "list")
    assert via_brokers == via_zk and topic in {t["topic"] for t in via_brokers["topics"]}
    via_zk, via_brokers = both("topics", "describe", topic)
    assert [d["partitions"] for d in via_brokers["topics"]] == [d["partitions"] for d in via_zk["topics"]]
    via_zk, via_brokers = both("groups", "describe", "bs-std")
    assert via_brokers["partitions"] == via_zk["partitions"] and len(via_brokers["partitions"]) == 2
    assert ok("offsets", "lookup", "--topic", topic, "--time", "latest", *b) == f"{topic}:0:5\n{topic}:1:0\n"
    read = ("console-consumer", "--topic", topic, "--partition", "0", "--offset", "earliest", "--timeout-ms", "2000",
            "--format", "%p %o %s\\n")
    via_zk_read = ok(*read, *z)
    assert ok(*read, *b) == via_zk_read and len(via_zk_read.splitlines()) == 5  # leaders from Metadata alone
    group_member = metaq("console-consumer", "--topic", topic, "--from-beginning", "--timeout-ms", "3000", *b)
    assert group_member.returncode == 0 and len(group_member.stdout.splitlines()) == 5  # broker-coordinated
    listed = {g["group"] for g in json.loads(ok("groups", "list", "--json", *b))["groups"]}
    assert "bs-std" in listed and "bs-zk" not in listed  # ZooKeeper groups live in ZooKeeper only

    ok("offsets", "reset", "bs-std", "--topic", topic, "--to-earliest", "--execute", *b)
    assert confluent_committed(bootstrap, "bs-std", topic, 2) == {0: 0, 1: 0}
    assert not layout.group_exists("bs-std")  # brokers only: nothing written to ZooKeeper

    both_given = metaq("groups", "list", *b, *z)
    assert both_given.returncode == 2 and "either --bootstrap-server or --zookeeper" in both_given.stderr
    owners = metaq("owners", "bs-zk", *b)
    assert owners.returncode == 2 and "--bootstrap-server" in owners.stderr  # a ZooKeeper-only command
    malformed = metaq("topics", "list", "--bootstrap-server", "localhost")
    assert malformed.returncode == 1 and "--bootstrap-server 'localhost': expected HOST:PORT" in malformed.stderr
    nobody = metaq("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert nobody.returncode == 1 and "--bootstrap-server 127.0.0.1:1: no broker answered" in nobody.stderr
    created = metaq("offsets", "reset", "bs-new", "--topic", topic, "--to-latest", "--create-group", *b)
    assert created.returncode == 2 and "--create-group needs --zookeeper" in created.stderr


def test_console_consumer_include_format_and_exit_codes(cluster: BrokerCluster, layout: ZkLayout) -> None:
    """console-consumer ``--include REGEX`` reads every matching topic, ``--format`` prints what kcat's ``-f``
    prints for the same messages, and ``--max-messages``/``--timeout-ms`` end as Kafka 3.9.2's console consumer
    does on the same broker (exit 0, ``Processed a total of N messages``, the same values)."""
    from metaq.testing.kafka_tools import run_kafka_tool
    from metaq.testing.kafka_versions import V3_9

    topics = [_topic(cluster, layout, name, 1) for name in ("incl-a", "incl-b", "other-c")]
    for i, topic in enumerate(topics):
        _produce(cluster.zk_connect, topic, 0, 2 + i)
    z, bootstrap = ["--zookeeper", cluster.zk_connect], cluster.brokers[0].bootstrap
    fmt = "%t %p %o %k %S %s\\n"
    ours = ok("console-consumer", "--topic", "incl-b", "--from-beginning", "--timeout-ms", "3000", "--format", fmt,
              *z)
    kcat = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", "incl-b", "-o", "beginning", "-e", "-q", "-f", fmt],
                          capture_output=True, text=True, timeout=60)
    assert kcat.returncode == 0, kcat.stderr
    assert ours == kcat.stdout and len(ours.splitlines()) == 3

    included = metaq("console-consumer", "--include", "incl-.*", "--from-beginning", "--timeout-ms", "3000",
                     "--format", "%t:%s\\n", *z)
    assert included.returncode == 0 and "Processed a total of 5 messages" in included.stderr
    assert sorted(included.stdout.split()) == sorted([f"incl-a:m{i}" for i in range(2)] +
                                                     [f"incl-b:m{i}" for i in range(3)])

    kafka = run_kafka_tool(V3_9, "kafka-console-consumer", [
        "--bootstrap-server", bootstrap, "--include", "incl-.*", "--from-beginning", "--max-messages", "4",
        "--timeout-ms", "20000", "--group", "kafka-console"])
    mine = metaq("console-consumer", "--include", "incl-.*", "--from-beginning", "--max-messages", "4",
                 "--timeout-ms", "20000", *z)
    assert (mine.returncode, kafka.returncode) == (0, 0), kafka.stderr
    assert "Processed a total of 4 messages" in kafka.stderr and "Processed a total of 4 messages" in mine.stderr
    everything = {f"m{i}" for i in range(3)}
    assert len(mine.stdout.split()) == len(kafka.stdout.split()) == 4 and set(mine.stdout.split()) <= everything
    kafka = run_kafka_tool(V3_9, "kafka-console-consumer", [
        "--bootstrap-server", bootstrap, "--topic", "other-c", "--from-beginning", "--timeout-ms", "10000"])
    mine = metaq("console-consumer", "--topic", "other-c", "--from-beginning", "--timeout-ms", "10000", *z)
    assert (mine.returncode, kafka.returncode) == (0, 0) and mine.stdout.split() == kafka.stdout.split() == [
        f"m{i}" for i in range(4)]
    bad = metaq("console-consumer", "--include", "incl-.*", "--partition", "0", *z)
    assert bad.returncode == 2 and "--partition needs --topic" in bad.stderr
