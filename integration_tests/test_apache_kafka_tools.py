"""metaq's ops tools and producer against real ZooKeeper-mode Apache Kafka brokers (3.9.2, 2.8.2, 1.1.1), checked
against what Kafka's own tools of that version say: ``kafka-topics --describe`` for partitions, leaders and ISR,
GetOffsetShell for log ends, and on 1.1.1 (the last release with ZooKeeper consumer groups) ``ConsumerGroupCommand
--zookeeper`` and ``ExportZkOffsets`` for the group's offsets, lag and owners. Read back with confluent-kafka.

One broker per version for the whole module (harness: metaq/testing/apache_kafka.py); each test makes its own topics
with Kafka's CreateTopics (``create_topic``), never with metaq's ``topics create``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from integration_tests.peers import Msg, confluent_committed, confluent_consume
from metaq.consumer import Consumer
from metaq.errors import MetaqError
from metaq.producer import Producer
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.cli import CliResult, run_cli
from metaq.testing.group import consume_and_commit
from metaq.testing.kafka_fixtures import kafka_matrix
from metaq.testing.kafka_versions import V1_1, V3_9
from zk_layout import ZkLayout

pytestmark = pytest.mark.timeout(300)


def metaq(*args: str, stdin: str | None = None) -> CliResult:
    """``metaq <args>`` run in this process (metaq.testing.cli)."""
    return run_cli(*args, stdin=stdin)


def ok(*args: str, stdin: str | None = None) -> str:
    result = metaq(*args, stdin=stdin)
    assert result.returncode == 0, f"metaq {' '.join(args)} exited {result.returncode}: {result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def ok_json(*args: str, stdin: str | None = None) -> Any:
    return json.loads(ok(*args, "--json", stdin=stdin))


def kafka_ok(broker: ApacheKafkaBroker, tool: str, args: list[str]) -> str:
    """Run one of Kafka's tools (a tool name from TOOL_CLASSES or a main class) and return its stdout."""
    run = broker.run_class if "." in tool else broker.run_tool
    done = run(tool, args)
    assert done.returncode == 0, f"Kafka {broker.version} {tool} {args} exited {done.returncode}:\n{done.stdout}" \
                                 f"\n{done.stderr}"
    return done.stdout


def kafka_log_ends(broker: ApacheKafkaBroker, topic: str) -> dict[int, int]:
    """GetOffsetShell's latest offsets (``topic:partition:offset`` lines); ``--bootstrap-server`` from 3.0."""
    target = "--bootstrap-server" if broker.kafka.release >= (3, 0) else "--broker-list"
    out = kafka_ok(broker, "kafka-get-offsets", [target, broker.bootstrap, "--topic", topic, "--time", "-1"])
    ends = {}
    for line in out.split():
        name, partition, offset = line.rsplit(":", 2)
        if name == topic:
            ends[int(partition)] = int(offset)
    return ends


def kafka_topic_partitions(broker: ApacheKafkaBroker, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """``kafka-topics --describe``: partition -> (leader, replicas, ISR) (``--bootstrap-server`` from 3.0)."""
    target = ["--bootstrap-server", broker.bootstrap] if broker.kafka.release >= (3, 0) \
        else ["--zookeeper", broker.zk_connect]
    out = kafka_ok(broker, "kafka-topics", [*target, "--describe", "--topic", topic])
    found = {}
    for match in re.finditer(r"Partition: (\d+)\s+Leader: (-?\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]*)", out):
        partition, leader, replicas, isr = match.groups()
        found[int(partition)] = (int(leader), [int(r) for r in replicas.split(",")],
                                 [int(r) for r in isr.split(",") if r])
    return found


def produce(broker: ApacheKafkaBroker, topic: str, counts: dict[int, int]) -> None:
    producer = confluent_kafka.Producer({**broker.librdkafka_config(), "linger.ms": 5})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=f"{topic}-{partition}-{i}".encode(), key=f"k{i}".encode(),
                             partition=partition)
    assert producer.flush(30) == 0


def watermarks(broker: ApacheKafkaBroker, topic: str, partitions: int) -> dict[int, int]:
    """The log end offsets the broker gives a librdkafka client."""
    consumer = confluent_kafka.Consumer({**broker.librdkafka_config(), "group.id": "watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


# -- groups, owners, lag, offsets -------------------------------------------------------------------------------


def _member(zk_connect: str, group: str) -> Consumer:
    """A member that commits only when told, so that the lag the test expects is exact."""
    return Consumer({"group.id": group, "zookeeper.connect": zk_connect, "auto.commit.enable": False,
                     "auto.offset.reset": "smallest", "consumer.timeout.ms": 5000,
                     "zookeeper.session.timeout.ms": 6000, "rebalance.backoff.ms": 300})


def _kafka_group_rows(out: str) -> dict[int, list[str]]:
    """Rows of 1.1.1's ``ConsumerGroupCommand --zookeeper --describe``: TOPIC PARTITION CURRENT-OFFSET
    LOG-END-OFFSET LAG CONSUMER-ID (docs/ops-tools.md), by partition."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("TOPIC"))
    return {int(cells[1]): cells for cells in (line.split() for line in lines[header + 1:]) if len(cells) >= 6}


@kafka_matrix("metaq groups, owners, top, offsets reset/export/import on a ZooKeeper group")
def test_group_tools(kafka_broker: ApacheKafkaBroker, kafka_zk_layout: ZkLayout, tmp_path: Path) -> None:
    zk, topic, group = kafka_broker.zk_connect, "orders", "opsg"
    kafka_broker.create_topic(topic, partitions=3)
    produce(kafka_broker, topic, {0: 30, 1: 40, 2: 50})
    log_end = watermarks(kafka_broker, topic, 3)  # the broker's answer (GetOffsetShell: the topic test)
    assert log_end == {0: 30, 1: 40, 2: 50}
    old_kafka = kafka_broker.version == V1_1

    with _member(zk, group) as member:
        [stream] = member.create_message_streams({topic: 1})[topic]
        committed = consume_and_commit(member, stream, {0, 1, 2}, 60)
        owners = kafka_zk_layout.owners(group)
        described = ok_json("groups", "describe", group, "--zookeeper", zk)
        listed = ok_json("groups", "list", "--zookeeper", zk)
        owned = ok_json("owners", group, "--zookeeper", zk)
        top = ok_json("top", group, "--once", "--zookeeper", zk)
        if old_kafka:  # the last release whose ConsumerGroupCommand reads ZooKeeper groups
            kafka_rows = _kafka_group_rows(kafka_ok(kafka_broker, "kafka.admin.ConsumerGroupCommand",
                                                    ["--zookeeper", zk, "--describe", "--group", group]))

    assert set(owners) == {(topic, p) for p in range(3)}
    lag = {p: log_end[p] - committed[p] for p in range(3)}
    rows = {r["partition"]: r for r in described["partitions"]}
    assert {p: (r["topic"], r["offset"], r["log_end_offset"], r["lag"], r["owner"]) for p, r in rows.items()} == {
        p: (topic, committed[p], log_end[p], lag[p], owners[(topic, p)]) for p in range(3)}
    assert described["total_lag"] == sum(lag.values()) and described["offsets_storage"] == "zookeeper"
    assert [m["consumer_id"] for m in described["members"]] == [member.consumer_id]
    assert {"group": group, "kind": "zookeeper", "members": 1, "active": True} .items() <= \
        next(g for g in listed["groups"] if g["group"] == group).items()
    assert owned["orphans"] == 0 and {(r["partition"], r["owner"]) for r in owned["owners"]} == {
        (p, owners[(topic, p)]) for p in range(3)}
    assert top["total_lag"] == sum(lag.values())
    assert {p["partition"]: (p["offset"], p["lag"]) for p in top["partitions"]} == {
        p: (committed[p], lag[p]) for p in range(3)}
    if old_kafka:
        # Kafka decides: its CONSUMER-ID is the owner with the thread suffix cut off
        assert {p: cells[1:6] for p, cells in kafka_rows.items()} == {
            p: [str(p), str(committed[p]), str(log_end[p]), str(lag[p]), rows[p]["consumer_id"]] for p in range(3)}

    # the member left: export (Kafka's ExportZkOffsets writes the same lines on 1.1.1, and metaq imports its file),
    # reset (a dry run, then for real), import
    exported = tmp_path / "offsets.txt"
    ok("offsets", "export", "--zookeeper", zk, "--group", group, "--output", str(exported))
    assert exported.read_text().splitlines() == [f"/consumers/{group}/offsets/{topic}/{p}:{committed[p]}"
                                                 for p in range(3)]
    if old_kafka:
        kafka_export = tmp_path / "kafka-offsets.txt"
        kafka_ok(kafka_broker, "kafka-export-zk-offsets", ["--zkconnect", zk, "--group", group,
                                                           "--output-file", str(kafka_export)])
        assert sorted(kafka_export.read_text().split()) == sorted(exported.read_text().split())
        exported = kafka_export
    reset = ["offsets", "reset", group, "--topic", topic, "--to-earliest", "--zookeeper", zk]
    plan = ok_json(*reset)
    assert not plan["executed"] and kafka_zk_layout.offsets(group) == {(topic, p): committed[p] for p in range(3)}
    ok_json(*reset, "--execute")
    assert kafka_zk_layout.offsets(group) == {(topic, p): 0 for p in range(3)}
    ok("offsets", "import", str(exported), "--execute", "--zookeeper", zk)
    assert kafka_zk_layout.offsets(group) == {(topic, p): committed[p] for p in range(3)}
    idle = ok_json("groups", "describe", group, "--zookeeper", zk)
    assert not idle["active"] and [r["lag"] for r in idle["partitions"]] == [lag[p] for p in range(3)]


def _commit(broker: ApacheKafkaBroker, group: str, topic: str, offsets: dict[int, int]) -> None:
    """A broker-coordinated group without members (Empty) holding ``offsets`` (a standard client's commit)."""
    consumer = confluent_kafka.Consumer({**broker.librdkafka_config(), "group.id": group})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _kafka_describe_rows(out: str, group: str) -> dict[tuple[str, int], tuple[str, str, str]]:
    """kafka-consumer-groups --describe: (TOPIC, PARTITION) -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG)."""
    rows = {}
    for cells in (line.split() for line in out.splitlines()):
        if len(cells) >= 6 and cells[0] == group and cells[2].isdigit():
            rows[(cells[1], int(cells[2]))] = (cells[3], cells[4], cells[5])
    return rows


@kafka_matrix("metaq groups describe and CSV reset plans beside kafka-consumer-groups", versions=[V3_9])
def test_group_commands_beside_kafka_consumer_groups(kafka_broker: ApacheKafkaBroker, tmp_path: Path) -> None:
    """The same broker groups through metaq and Kafka's kafka-consumer-groups: --describe's offsets, log ends and
    lags agree (also --all-groups); --export plans are the same bytes (one group; GROUP-prefixed for several),
    and a plan exported by either tool, applied by the other, leaves the offsets the plan says (Kafka decides:
    its describe and a standard client read them back)."""
    zk, topic = kafka_broker.zk_connect, "plans"
    kafka_broker.create_topic(topic, partitions=3)
    produce(kafka_broker, topic, {0: 10, 1: 20, 2: 30})
    _commit(kafka_broker, "side-a", topic, {0: 4, 1: 5, 2: 6})
    _commit(kafka_broker, "side-b", topic, {0: 1, 1: 2})
    cg = ["--bootstrap-server", kafka_broker.bootstrap]

    def kafka_describe(*args: str) -> str:
        return kafka_ok(kafka_broker, "kafka-consumer-groups", [*cg, "--describe", *args])

    for group in ("side-a", "side-b"):
        theirs = _kafka_describe_rows(kafka_describe("--group", group), group)
        ours = {(r["topic"], r["partition"]): (str(r["offset"]), str(r["log_end_offset"]), str(r["lag"]))
                for r in ok_json("groups", "describe", group, "--zookeeper", zk)["partitions"]}
        assert ours == theirs and len(theirs) == (3 if group == "side-a" else 2)
    everyone = kafka_describe("--all-groups")
    ours_all = {d["group"]: d for d in ok_json("groups", "describe", "--all-groups", "--zookeeper", zk)["groups"]}
    for group in ("side-a", "side-b"):
        assert {(r["topic"], r["partition"]): (str(r["offset"]), str(r["log_end_offset"]), str(r["lag"]))
                for r in ours_all[group]["partitions"]} == _kafka_describe_rows(everyone, group)

    def kafka_plan(*args: str) -> str:
        return kafka_ok(kafka_broker, "kafka-consumer-groups", [*cg, "--reset-offsets", *args])

    for mode in (["--to-earliest"], ["--shift-by", "-3"], ["--to-offset", "25"], ["--to-latest"]):
        theirs = kafka_plan("--group", "side-a", "--topic", topic, *mode, "--export", "--dry-run")
        ours = ok("offsets", "reset", "side-a", "--topic", topic, *mode, "--export", "--zookeeper", zk)
        assert sorted(ours.split("\n")) == sorted(theirs.split("\n")) and ours.endswith("\n\n"), (mode, ours, theirs)
    theirs = kafka_plan("--group", "side-a", "--group", "side-b", "--topic", f"{topic}:0,1", "--shift-by", "2",
                        "--export", "--dry-run")
    ours = ok("offsets", "reset", "side-a", "side-b", "--topic", f"{topic}:0,1", "--shift-by", "2", "--export",
              "--zookeeper", zk)
    assert sorted(ours.split("\n")) == sorted(theirs.split("\n")) and ours.count(",") == 4 * 3

    # metaq's plan applied by Kafka's tool
    plan = tmp_path / "metaq.csv"
    plan.write_text(ok("offsets", "reset", "side-a", "--topic", topic, "--shift-by", "-2", "--export",
                       "--zookeeper", zk))
    kafka_plan("--group", "side-a", "--from-file", str(plan), "--execute")
    assert confluent_committed(kafka_broker.bootstrap, "side-a", topic, 3) == {0: 2, 1: 3, 2: 4}
    # Kafka's plan (two groups: GROUP-prefixed) applied by metaq
    plan = tmp_path / "kafka.csv"
    plan.write_text(kafka_plan("--group", "side-a", "--group", "side-b", "--topic", topic, "--to-offset", "7",
                               "--export", "--dry-run"))
    ok("offsets", "reset", "side-a", "side-b", "--from-file", str(plan), "--execute", "--zookeeper", zk)
    for group in ("side-a", "side-b"):
        assert confluent_committed(kafka_broker.bootstrap, group, topic, 3) == {0: 7, 1: 7, 2: 7}
        assert {v[0] for v in _kafka_describe_rows(kafka_describe("--group", group), group).values()} == {"7"}


# -- topics and console tools -------------------------------------------------------------------------------------


@kafka_matrix("metaq topics describe/list and console producer/consumer")
def test_topic_and_console_tools(kafka_broker: ApacheKafkaBroker) -> None:
    zk, topic = kafka_broker.zk_connect, "console"
    kafka_broker.create_topic(topic, partitions=2)

    sent = ok_json("console-producer", "--topic", topic, "--partition", "1", "--zookeeper", zk, stdin="a\nb\nc\n")
    assert sent == {"topic": topic, "sent": 3, "acknowledged": 3, "failed": 0}
    ok("console-producer", "--topic", topic, "--partition", "0", "--parse-key", "--key-separator", ":",
       "--zookeeper", zk, stdin="k1:v1\nk2:v2\n")
    # Kafka's side: what a librdkafka client reads, what GetOffsetShell and kafka-topics say
    got = confluent_consume(kafka_broker.bootstrap, topic, 1, confluent_kafka.OFFSET_BEGINNING, 3)
    assert [(m.offset, m.key, m.value) for m in got] == [(0, None, b"a"), (1, None, b"b"), (2, None, b"c")]
    [first] = confluent_consume(kafka_broker.bootstrap, topic, 0, 0, 1)
    assert (first.key, first.value) == (b"k1", b"v1")
    kafka_ends = kafka_log_ends(kafka_broker, topic)
    kafka_partitions = kafka_topic_partitions(kafka_broker, topic)

    listed = ok_json("topics", "list", "--zookeeper", zk)["topics"]
    assert {"topic": topic, "partitions": 2} in listed
    [described] = ok_json("topics", "describe", topic, "--zookeeper", zk)["topics"]
    assert {p["partition"]: (p["leader"], p["replicas"], p["isr"]) for p in described["partitions"]} == \
        kafka_partitions == {0: (0, [0], [0]), 1: (0, [0], [0])}
    assert {p["partition"]: p["log_end_offset"] for p in described["partitions"]} == kafka_ends == {0: 2, 1: 3}
    assert all(p["log_start_offset"] == 0 for p in described["partitions"])
    assert "LOG-END-OFFSET" in ok("topics", "describe", "--zookeeper", zk)

    read = ["console-consumer", "--topic", topic, "--zookeeper", zk, "--timeout-ms", "5000"]
    assert ok(*read, "--partition", "1", "--offset", "earliest", "--max-messages", "3") == "a\nb\nc\n"
    assert ok(*read, "--partition", "0", "--from-beginning", "--print-key") == "k1\tv1\nk2\tv2\n"
    tail = [json.loads(line) for line in ok(*read, "--partition", "1", "--offset", "1", "--json").splitlines()]
    assert [(m["offset"], m["value"]) for m in tail] == [(1, "b"), (2, "c")]


@kafka_matrix("metaq topics create/alter/alter-config/delete --bootstrap-server", versions=[V3_9, V1_1])
def test_topic_changes_through_the_brokers(kafka_broker: ApacheKafkaBroker) -> None:
    """CreateTopics, CreatePartitions, IncrementalAlterConfigs (1.1.1: AlterConfigs with the whole set) and
    DeleteTopics at a real controller; kafka-topics --describe sees the partitions, DescribeConfigs the overrides."""
    b, topic = ["--bootstrap-server", kafka_broker.bootstrap], "bs-changes"
    ok("topics", "create", "--topic", topic, "--partitions", "2", "--topic-config", "retention.ms=3600000", *b)
    assert "2 -> 3 partitions" in ok("topics", "alter", topic, "--partitions", "3", *b)
    changed = ok("topics", "alter-config", topic, "--set", "segment.bytes=1048576", "--delete", "retention.ms", *b)
    assert changed.strip() == f"Topic {topic}: config segment.bytes=1048576"
    assert kafka_topic_partitions(kafka_broker, topic) == {p: (0, [0], [0]) for p in range(3)}
    [described] = ok_json("topics", "describe", topic, *b)["topics"]
    assert described["config"] == {"segment.bytes": "1048576"}
    assert ok("topics", "delete", topic, *b).strip() == f"Deleted topic {topic}"
    assert topic not in {t["topic"] for t in ok_json("topics", "list", *b)["topics"]}
    refused = metaq("topics", "delete", "__consumer_offsets", *b)
    assert refused.returncode == 1 and "is an internal topic" in refused.stderr


# -- metaq.Producer ---------------------------------------------------------------------------------------------

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("0", "1", "all")
RECORDS = 25


def _send_all(zk_connect: str, topic: str, partition: int, codec: str, acks: str, base_ts: int) -> list[Msg]:
    """Send RECORDS keyed records with explicit timestamps; the acknowledged offsets (None under acks=0)."""
    with Producer({"zookeeper.connect": zk_connect, "acks": acks, "compression.type": codec,
                   "linger.ms": 20}) as producer:
        futures = [producer.send(topic, f"{codec}/{acks}/{i}".encode() * 4, key=f"key-{i}".encode(),
                                 partition=partition, timestamp_ms=base_ts + i) for i in range(RECORDS)]
        producer.flush(60)
        acked = [f.result(60) for f in futures]
    return [Msg(partition, m.offset, base_ts + i, f"key-{i}".encode(), f"{codec}/{acks}/{i}".encode() * 4)
            for i, m in enumerate(acked)]


@kafka_matrix("metaq.Producer acks 0/1/all with every codec, read by confluent-kafka")
def test_producer_acks_and_codecs(kafka_broker: ApacheKafkaBroker) -> None:
    topic = "produced"
    zstd_refused = kafka_broker.kafka.release < (2, 1)  # zstd needs Produce v7 (Kafka 2.1, KIP-110)
    pairs = [(codec, acks) for codec in CODECS for acks in ACKS]
    kafka_broker.create_topic(topic, partitions=len(pairs))
    base_ts = int(time.time() * 1000) - 60_000  # recent: Kafka's 7-day retention would delete older records
    for partition, (codec, acks) in enumerate(pairs):
        if codec == "zstd" and zstd_refused:
            continue
        sent = _send_all(kafka_broker.zk_connect, topic, partition, codec, acks, base_ts + 1000 * partition)
        got = confluent_consume(kafka_broker.bootstrap, topic, partition, confluent_kafka.OFFSET_BEGINNING,
                                RECORDS)
        expected = [Msg(m.partition, i, m.timestamp, m.key, m.value) for i, m in enumerate(sent)]
        assert got == expected, f"{codec} acks={acks}"
        if acks != "0":  # acks=0 has no response, hence no offset (-1, as Kafka's Java producer reports)
            assert [m.offset for m in sent] == list(range(RECORDS)), f"{codec} acks={acks}"
    if zstd_refused:
        for acks in ACKS:
            with Producer({"zookeeper.connect": kafka_broker.zk_connect, "acks": acks, "compression.type": "zstd",
                           "linger.ms": 0}) as producer:
                future = producer.send(topic, b"z" * 200, partition=pairs.index(("zstd", acks)))
                with pytest.raises(MetaqError, match=r"zstd.*Kafka 2\.1|Produce v7") as refused:
                    future.result(60)
            assert not refused.value.retriable
