"""The ops commands as ops scripts run them (``python -m metaq ...`` subprocesses) against a real ZooKeeper,
a real broker and live groups: describe shows the right lag and owners, resets refuse live groups, export
and import round-trip, orphans are found after a SIGKILL, and errors exit 1 or 2 with a clear message.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from metaq.broker.process import free_port
from metaq.consumer import Consumer
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover import RecoverStore
from metaq.producer import Producer
from metaq.testing.broker import topic_leaders
from metaq.testing.group import GroupHarness, consume_and_commit, ownership_problem
from metaq.testing.wait import wait_until
from zk_layout import TopicCount, ZkLayout

pytestmark = pytest.mark.timeout(240)

GROUP_PROPERTIES = {"zookeeper.session.timeout.ms": 3000, "auto.commit.interval.ms": 200,
                    "rebalance.backoff.ms": 300, "rebalance.max.retries": 10}


def metaq(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, input=stdin,
                          timeout=timeout)


def ok(*args: str, stdin: str | None = None) -> str:
    result = metaq(*args, stdin=stdin)
    assert result.returncode == 0, f"metaq {' '.join(args)} exited {result.returncode}: {result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def ok_json(*args: str, stdin: str | None = None) -> Any:
    return json.loads(ok(*args, "--json", stdin=stdin))


def fails(code: int, *args: str) -> str:
    """Run, expect exit ``code`` and a one-line error without a traceback; returns stderr."""
    result = metaq(*args)
    assert result.returncode == code, f"expected {code}, got {result.returncode}: {result.stdout}{result.stderr}"
    assert "Traceback" not in result.stderr and "kazoo" not in result.stderr
    return result.stderr


def produce(zk_connect: str, topic: str, counts: dict[int, int], prefix: str = "m") -> None:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, f"{prefix}{p}-{i}".encode(), partition=p)
                   for p, n in counts.items() for i in range(n)]
        producer.flush(30)
        for future in futures:
            future.result()


def wait_offsets(layout: ZkLayout, group: str, expected: dict[tuple[str, int], int], timeout: float = 30) -> None:
    wait_until(lambda: layout.offsets(group) == expected, timeout, f"offsets of {group} to be {expected}")


# -- describe ---------------------------------------------------------------------------------------------


def _member(zk_connect: str, group: str) -> Consumer:
    """A member that commits only when told, so that the lag the test expects is exact."""
    return Consumer({"group.id": group, "zookeeper.connect": zk_connect, "auto.commit.enable": False,
                     "auto.offset.reset": "smallest", "consumer.timeout.ms": 3000,
                     "zookeeper.session.timeout.ms": 3000, "rebalance.backoff.ms": 300})


def test_describe_shows_lag_owners_and_members_of_a_live_group(broker, make_topic, zk_connect: str,
                                                                zk_layout: ZkLayout) -> None:
    make_topic("clicks", partitions=3)
    with _member(zk_connect, "etl") as first, _member(zk_connect, "etl") as second:
        [s1] = first.create_message_streams({"clicks": 1})["clicks"]
        [s2] = second.create_message_streams({"clicks": 1})["clicks"]
        wait_until(lambda: isinstance(ownership_problem(zk_layout, "etl", "clicks", 3, 2), dict), 30, "a stable group")
        owners = zk_layout.owners("etl")
        mine = {c.consumer_id: {p for (_, p), o in owners.items() if o.rsplit("-", 1)[0] == c.consumer_id}
                for c in (first, second)}
        produce(zk_connect, "clicks", {0: 30, 1: 40, 2: 50})
        committed = {**consume_and_commit(first, s1, mine[first.consumer_id], 12),
                     **consume_and_commit(second, s2, mine[second.consumer_id], 7)}
        log_end = {0: 30, 1: 40, 2: 50}

        described = ok_json("groups", "describe", "etl", "--zookeeper", zk_connect)
        table = ok("groups", "describe", "etl", "--zookeeper", zk_connect)
        listed = ok_json("groups", "list", "--zookeeper", zk_connect)

    rows = {r["partition"]: r for r in described["partitions"]}
    assert sorted(rows) == [0, 1, 2]
    for p, row in rows.items():
        assert (row["topic"], row["offset"], row["log_end_offset"], row["lag"]) == (
            "clicks", committed[p], log_end[p], log_end[p] - committed[p])
        assert row["owner"] == owners[("clicks", p)] and row["status"] == "OK"
        assert row["consumer_id"] == owners[("clicks", p)].rsplit("-", 1)[0]
        assert abs(row["last_commit_ms"] - time.time() * 1000) < 60000
    assert described["total_lag"] == sum(log_end[p] - committed[p] for p in range(3))
    assert {m["consumer_id"] for m in described["members"]} == {first.consumer_id, second.consumer_id}
    assert all(m["subscription"] == {"clicks": 1} for m in described["members"])
    assert described["active"] and described["offsets_storage"] == "zookeeper"

    lines = table.splitlines()
    assert lines[0] == f"Group etl: 2 live members, offsets in zookeeper, total lag {described['total_lag']}"
    header = next(i for i, line in enumerate(lines) if line.startswith("TOPIC"))
    for p in range(3):
        cells = lines[header + 1 + p].split()
        assert cells[:6] == ["clicks", str(p), str(committed[p]), str(log_end[p]), str(log_end[p] - committed[p]),
                             owners[("clicks", p)]]
        assert cells[-1] == "OK"
    assert [g for g in listed["groups"] if g["group"] == "etl"] == [
        {"group": "etl", "kind": "zookeeper", "members": 2, "active": True, "state": "Stable", "topics": ["clicks"],
         "error": None}]

    # the members left: the group is still listed and described, without owners
    after = ok_json("groups", "list", "--zookeeper", zk_connect)
    assert [g["members"] for g in after["groups"] if g["group"] == "etl"] == [0]
    idle = ok_json("groups", "describe", "etl", "--zookeeper", zk_connect)
    assert not idle["active"] and all(r["owner"] is None for r in idle["partitions"])


# -- reset ------------------------------------------------------------------------------------------------


def test_reset_refuses_live_members_and_applies_without_them(broker, make_topic, zk_connect: str,
                                                             zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("events", partitions=2)
    produce(zk_connect, "events", {0: 50, 1: 50})
    time.sleep(0.05)
    between = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    time.sleep(0.05)
    group = GroupHarness(zk_connect, "resetg", "events", tmp_path / "group", GROUP_PROPERTIES)
    member = group.add_member()
    group.wait_stable(zk_layout, 2, members=1)
    full = {("events", 0): 50, ("events", 1): 50}
    wait_offsets(zk_layout, "resetg", full)
    base = ["offsets", "reset", "resetg", "--topic", "events", "--zookeeper", zk_connect]

    dry = metaq(*base, "--to-earliest")
    assert dry.returncode == 0 and "Dry run: nothing was written" in dry.stderr and "live members" in dry.stderr
    assert "Plan: reset to earliest" in dry.stdout
    refused = fails(1, *base, "--to-earliest", "--execute")
    assert f"group 'resetg' has 1 live member ({member.consumer_id()})" in refused and "--force" in refused
    assert zk_layout.offsets("resetg") == full

    since = time.monotonic()  # before: the member applies a forced reset at once (it watches its offset nodes)
    forced = ok_json(*base, "--to-earliest", "--execute", "--force")
    assert forced["executed"] and forced["written"] == 2
    assert [c["new"] for c in forced["changes"]] == [0, 0]
    produce(zk_connect, "events", {0: 1, 1: 1}, prefix="late")
    wait_until(lambda: any(e["name"] == "records_consumed" and e["time"] > since and part["minOffset"] == 0
                         for e in member.events() for part in e.get("partitions", [])),
             30, "the member to consume again from offset 0 after the forced reset")
    group.stop_all()

    applied = ok_json(*base, "--to-offset", "7", "--execute")
    assert applied["written"] == 2 and applied["live_members"] == {"resetg": []}
    assert zk_layout.offsets("resetg") == {("events", 0): 7, ("events", 1): 7}
    shifted = ok_json(*base[:4], "events:1", *base[5:], "--shift-by", "-100", "--execute")
    assert [(c["partition"], c["new"], c["note"]) for c in shifted["changes"]] == [
        (1, 0, "clamped to log start 0 (asked for -93)")]
    by_time = ok_json(*base, "--to-datetime", between, "--execute")
    assert [c["new"] for c in by_time["changes"]] == [50, 50]  # the first message produced after ``between``
    latest = ok(*base, "--to-latest", "--execute")
    assert "Wrote 2 offset(s)." in latest
    assert zk_layout.offsets("resetg") == {("events", 0): 51, ("events", 1): 51}

    # a new group can be prepared before it starts (users asked to start new groups at latest)
    assert "--create-group" in fails(1, "offsets", "reset", "fresh", "--topic", "events", "--to-latest",
                                     "--execute", "--zookeeper", zk_connect)
    ok("offsets", "reset", "fresh", "--topic", "events", "--to-latest", "--execute", "--create-group",
       "--zookeeper", zk_connect)
    assert zk_layout.offsets("fresh") == {("events", 0): 51, ("events", 1): 51}


# -- offsets in __consumer_offsets ------------------------------------------------------------------------


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's offsets in Kafka as a standard client sees them."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def test_kafka_stored_offsets_are_described_and_reset(broker, make_topic, zk_connect: str,
                                                      zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("ko", partitions=2)
    produce(zk_connect, "ko", {0: 20, 1: 20})
    committer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stdg",
                                          "enable.auto.commit": False})
    try:  # a standard client's group: offsets only in Kafka, no subscription (no protocol members)
        committer.commit(offsets=[confluent_kafka.TopicPartition("ko", 0, 15),
                                  confluent_kafka.TopicPartition("ko", 1, 12)], asynchronous=False)
    finally:
        committer.close()
    z = ["--zookeeper", zk_connect]

    described = ok_json("groups", "describe", "stdg", *z)
    assert not zk_layout.group_exists("stdg") and described["offsets_storage"] == "kafka"
    assert [(r["partition"], r["offset"], r["lag"], r["offset_source"], r["status"]) for r in
            described["partitions"]] == [(0, 15, 5, "kafka", "OK"), (1, 12, 8, "kafka", "OK")]
    zk_layout.write_offset("stdg", "ko", 1, 18)  # ahead of Kafka: max(zookeeper, kafka) is what metaq resumes from
    mixed = ok_json("groups", "describe", "stdg", *z)
    assert [(r["offset"], r["offset_source"]) for r in mixed["partitions"]] == [(15, "kafka"), (18, "zookeeper")]
    assert mixed["offsets_storage"] == "zookeeper+kafka"
    table = ok("groups", "describe", "stdg", *z)
    assert "SOURCE" in table and " kafka " in table

    reset = ok_json("offsets", "reset", "stdg", "--topic", "ko", "--to-earliest", "--execute", *z)
    assert [(c["current"], c["new"]) for c in reset["changes"]] == [(15, 0), (18, 0)]
    assert reset["kafka_groups"] == ["stdg"] and reset["written"] == 2
    assert _committed(broker.bootstrap, "stdg", "ko", 2) == {0: 0, 1: 0}
    assert zk_layout.offsets("stdg") == {("ko", 0): 0, ("ko", 1): 0}
    after = ok_json("groups", "describe", "stdg", *z)
    assert [(r["offset"], r["offset_source"]) for r in after["partitions"]] == [(0, "both"), (0, "both")]

    export = tmp_path / "stdg.offsets"
    export.write_text("/consumers/stdg/offsets/ko/0:7\n")
    assert "also committed to __consumer_offsets for stdg" in ok("offsets", "import", str(export), "--execute", *z)
    assert _committed(broker.bootstrap, "stdg", "ko", 2) == {0: 7, 1: 0}
    assert zk_layout.offset_nodes("stdg")[("ko", 0)].offset == 7

    # a live protocol member: the coordinator refuses commits from outside the group, and so does the reset
    member = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stdg",
                                       "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        member.subscribe(["ko"])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment(), "the confluent-kafka member was never assigned partitions"
        refused = fails(1, "offsets", "reset", "stdg", "--topic", "ko", "--to-latest", "--execute", "--force", *z)
        assert "group 'stdg' has live members in the Kafka group protocol" in refused
    finally:
        member.close()
    assert zk_layout.offsets("stdg") == {("ko", 0): 7, ("ko", 1): 0}  # nothing written


# -- export / import ---------------------------------------------------------------------------------------


def test_export_import_round_trip_in_both_formats(broker, make_topic, zk_connect: str, zk_layout: ZkLayout,
                                                  tmp_path: Path) -> None:
    make_topic("t", partitions=3)
    produce(zk_connect, "t", {0: 20, 1: 20, 2: 20})
    original = {"exp1": {0: 5, 1: 12, 2: 20}, "exp2": {1: 3}}
    for group, offsets in original.items():
        for p, offset in offsets.items():
            zk_layout.write_offset(group, "t", p, offset)
    lines_file, json_file = tmp_path / "offsets.txt", tmp_path / "offsets.json"

    ok("offsets", "export", "--zookeeper", zk_connect, "--output", str(lines_file))
    assert lines_file.read_text().splitlines() == [
        "/consumers/exp1/offsets/t/0:5", "/consumers/exp1/offsets/t/1:12", "/consumers/exp1/offsets/t/2:20",
        "/consumers/exp2/offsets/t/1:3"]
    json_file.write_text(ok("offsets", "export", "--zookeeper", zk_connect, "--group", "exp1", "--json"))
    assert json.loads(json_file.read_text())["offsets"][1] == {"group": "exp1", "topic": "t", "partition": 1,
                                                               "offset": 12}

    def scramble() -> None:
        for group, offsets in original.items():
            for p in offsets:
                zk_layout.write_offset(group, "t", p, 1)

    def current() -> dict[str, dict[int, int]]:
        return {g: {p: o for (_, p), o in zk_layout.offsets(g).items()} for g in original}

    scramble()
    plan = ok_json("offsets", "import", str(lines_file), "--zookeeper", zk_connect)
    assert not plan["executed"] and [(c["group"], c["current"], c["new"]) for c in plan["changes"]] == [
        ("exp1", 1, 5), ("exp1", 1, 12), ("exp1", 1, 20), ("exp2", 1, 3)]
    assert current() == {"exp1": {0: 1, 1: 1, 2: 1}, "exp2": {1: 1}}  # a dry run writes nothing
    assert "Wrote 4 offset(s)." in ok("offsets", "import", str(lines_file), "--execute", "--zookeeper", zk_connect)
    assert current() == original

    scramble()
    done = ok_json("offsets", "import", str(json_file), "--execute", "--zookeeper", zk_connect)
    assert done["written"] == 3 and current() == {"exp1": original["exp1"], "exp2": {1: 1}}
    piped = ok_json("offsets", "import", "-", "--execute", "--zookeeper", zk_connect,
                    stdin="/consumers/exp2/offsets/t/1:3\n")
    assert piped["written"] == 1 and current() == original

    zk_layout.register_consumer("exp1", "exp1_someone", TopicCount({"t": 1}))  # a live member
    assert "live member (exp1_someone)" in fails(1, "offsets", "import", str(json_file), "--execute",
                                                 "--zookeeper", zk_connect)
    ok("offsets", "import", str(json_file), "--execute", "--force", "--zookeeper", zk_connect)
    bad = tmp_path / "bad.txt"
    bad.write_text("/consumers/exp1/offsets/t/0:5\n/consumers/exp1/offsets/t/1:twelve\n")
    assert f"{bad}:2: offset 'twelve'" in fails(1, "offsets", "import", str(bad), "--zookeeper", zk_connect)


# -- orphans ----------------------------------------------------------------------------------------------


def test_orphan_owner_of_a_sigkilled_member_is_found_and_removed(broker, make_topic, zk_connect: str,
                                                                 zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("o", partitions=3)
    produce(zk_connect, "o", {0: 10, 1: 10, 2: 10})
    # the survivor notices the stolen partition at its next self-check and retries its claim for up to a minute
    # (after that Kafka 0.8 semantics apply: the rebalance failure reaches the stream and the member exits)
    group = GroupHarness(zk_connect, "orph", "o", tmp_path / "group",
                         {**GROUP_PROPERTIES, "metaq.self.check.interval.ms": 1000, "rebalance.max.retries": 200})
    survivor, victim = group.add_member(), group.add_member()
    group.wait_stable(zk_layout, 3, members=2)
    dead = victim.consumer_id()
    assert dead is not None
    victim.kill()  # SIGKILL: its ephemeral nodes go when its session expires
    group.wait_stable(zk_layout, 3, members=1)
    assert ok_json("owners", "orph", "--zookeeper", zk_connect)["orphans"] == 0

    # an owner node naming the dead consumer, left behind (as a stuck session or a buggy tool would)
    for _ in range(5):  # the survivor's self-check could re-claim it in between: then take it again
        zk_layout.release_partition("orph", "o", 1)
        if zk_layout.claim_partition("orph", "o", 1, f"{dead}-0"):
            break
    assert zk_layout.owner("orph", "o", 1) == f"{dead}-0"

    report = ok_json("owners", "orph", "--zookeeper", zk_connect)
    assert report["orphans"] == 1 and report["members"] == [survivor.consumer_id()]
    [orphan] = [r for r in report["owners"] if r["status"] == "ORPHAN"]
    assert (orphan["topic"], orphan["partition"], orphan["owner"], orphan["consumer_id"]) == ("o", 1, f"{dead}-0",
                                                                                               dead)
    assert "ORPHAN" in ok("owners", "orph", "--zookeeper", zk_connect)
    described = ok_json("groups", "describe", "orph", "--zookeeper", zk_connect)
    assert [r["status"] for r in described["partitions"] if r["partition"] == 1] == ["ORPHAN"]
    watched = ok("owners", "orph", "--watch", "0.2", "--iterations", "2", "--json", "--zookeeper", zk_connect)
    assert [json.loads(line)["orphans"] for line in watched.splitlines()] == [1]  # printed again only on change

    dry = metaq("owners", "orph", "--delete-orphans", "--zookeeper", zk_connect)
    assert dry.returncode == 0 and "Dry run" in dry.stderr and f"{dead}-0" in dry.stdout
    assert zk_layout.owner("orph", "o", 1) == f"{dead}-0"
    deleted = ok_json("owners", "orph", "--delete-orphans", "--execute", "--zookeeper", zk_connect)
    assert deleted["deleted"] == [{"topic": "o", "partition": 1}]
    owners = group.wait_stable(zk_layout, 3, members=1)  # the survivor's retries can claim it now
    assert {o.rsplit("-", 1)[0] for o in owners.values()} == {survivor.consumer_id()}
    final = ok_json("owners", "orph", "--zookeeper", zk_connect)
    assert (final["orphans"], final["unowned"]) == (0, 0)
    group.stop_all()


# -- topics, console tools, recover ----------------------------------------------------------------------------


def test_topics_and_console_producer_and_consumer(broker, zk_connect: str, zk_layout: ZkLayout,
                                                  tmp_path: Path) -> None:
    created = ok_json("topics", "create", "--topic", "cp", "--partitions", "2", "--zookeeper", zk_connect)
    assert created["leaders"] == {"0": 0, "1": 0}
    wait_until(lambda: len(topic_leaders(broker.bootstrap, "cp")) == 2, 10, "topic cp on the broker")
    assert {"topic": "cp", "partitions": 2} in ok_json("topics", "list", "--zookeeper", zk_connect)["topics"]

    sent = ok_json("console-producer", "--topic", "cp", "--partition", "1", "--zookeeper", zk_connect,
                   stdin="a\nb\nc\n")
    assert sent == {"topic": "cp", "sent": 3, "acknowledged": 3, "failed": 0}
    keyed = tmp_path / "keyed.txt"
    keyed.write_text("k1:v1\nk2:v2\n")
    ok("console-producer", "--topic", "cp", "--partition", "0", "--input", str(keyed), "--parse-key",
       "--key-separator", ":", "--zookeeper", zk_connect)

    [described] = ok_json("topics", "describe", "cp", "--zookeeper", zk_connect)["topics"]
    assert [(p["partition"], p["leader"], p["log_start_offset"], p["log_end_offset"]) for p in
            described["partitions"]] == [(0, 0, 0, 2), (1, 0, 0, 3)]
    assert "LOG-END-OFFSET" in ok("topics", "describe", "--zookeeper", zk_connect)

    read = ["console-consumer", "--topic", "cp", "--zookeeper", zk_connect, "--timeout-ms", "3000"]
    assert ok(*read, "--partition", "1", "--offset", "earliest", "--max-messages", "3") == "a\nb\nc\n"
    tail = ok(*read, "--partition", "1", "--offset", "1", "--json").splitlines()
    assert [(m["offset"], m["value"]) for m in map(json.loads, tail)] == [(1, "b"), (2, "c")]
    assert ok(*read, "--partition", "0", "--from-beginning", "--print-key") == "k1\tv1\nk2\tv2\n"
    assert "offset 10 is outside the log of cp-1 (log start 0, log end 3)" in fails(
        1, *read, "--partition", "1", "--offset", "10")
    assert "no partition 5" in fails(1, *read, "--partition", "5")
    assert zk_layout.groups() == []  # reading a partition registers nothing

    as_member = ok(*read, "--group", "cg", "--from-beginning", "--max-messages", "5")
    assert sorted(as_member.splitlines()) == ["a", "b", "c", "v1", "v2"]
    cg = ok_json("groups", "describe", "cg", "--zookeeper", zk_connect)
    assert {r["partition"]: r["lag"] for r in cg["partitions"]} == {0: 0, 1: 0}


def test_recover_list_replay_drop(broker, make_topic, zk_connect: str, tmp_path: Path) -> None:
    make_topic("retry", partitions=1)
    directory = tmp_path / "recover"
    with RecoverStore.open(directory, "src", "rg") as store:
        kept = store.append(MessageAndMetadata("src", 0, 5, b"k", b"v1", 1700000000000), ValueError("boom"))
        dropped = store.append(MessageAndMetadata("src", 1, 9, None, b"v2", 1700000000001), KeyError("x"))
    where = ["--dir", str(directory)]
    listed = ok_json("recover", "list", *where)
    assert [(e["id"], e["partition"], e["offset"], e["value"]) for e in listed["entries"]] == [
        (kept, 0, 5, "v1"), (dropped, 1, 9, "v2")]
    assert "ValueError: boom" in listed["entries"][0]["last_error"]
    assert "src@rg" in ok("recover", "list", *where)

    store_args = [*where, "--topic", "src", "--group", "rg"]
    assert ok_json("recover", "drop", *store_args, "--id", dropped) == {
        "dropped": 1, "unknown_ids": [], "remaining": 1}
    replayed = ok_json("recover", "replay", *store_args, "--to-topic", "retry", "--zookeeper", zk_connect)
    assert (replayed["replayed"], replayed["remaining"]) == (1, 0)
    got = ok("console-consumer", "--topic", "retry", "--partition", "0", "--offset", "earliest", "--print-key",
             "--max-messages", "1", "--timeout-ms", "5000", "--zookeeper", zk_connect)
    assert got == "k\tv1\n"
    assert "no recover store other@rg" in fails(1, "recover", "drop", *where, "--topic", "other", "--group", "rg",
                                                "--all")


# -- errors ----------------------------------------------------------------------------------------------------


def test_errors_exit_codes_and_messages(broker, make_topic, zk_connect: str, tmp_path: Path) -> None:
    make_topic("known", partitions=1)
    down = f"127.0.0.1:{free_port()}"
    for command in (["groups", "list"], ["offsets", "export"], ["console-producer", "--topic", "t"],
                    ["console-consumer", "--topic", "t", "--partition", "0"]):
        stderr = fails(1, *command, "--zookeeper", down, "--zookeeper-timeout-ms", "1000")
        assert stderr.strip() == f"metaq {command[0]}: error: cannot connect to ZooKeeper at {down} within 1000 ms"

    z = ["--zookeeper", zk_connect]
    assert "group 'nope' does not exist" in fails(1, "groups", "describe", "nope", *z)
    assert "group 'nope' does not exist" in fails(1, "owners", "nope", *z)
    assert "group 'nope' does not exist" in fails(1, "offsets", "export", "--group", "nope", *z)
    assert "topic 'nope' does not exist" in fails(1, "topics", "describe", "nope", *z)
    assert "topic 'nope' does not exist" in fails(1, "offsets", "reset", "g", "--topic", "nope", "--to-latest",
                                                  "--create-group", *z)
    assert "topic 'nope' does not exist" in fails(1, "console-consumer", "--topic", "nope", "--partition", "0", *z)
    assert "already exists" in fails(1, "topics", "create", "--topic", "known", *z)

    assert "one of --zookeeper, --config or --bootstrap-server is required" in fails(2, "groups", "list")
    assert "one of --zookeeper or --config is required" in fails(2, "owners", "g")  # no brokers-only mode
    assert "one of the arguments --to-earliest" in fails(2, "offsets", "reset", "g", "--topic", "known", *z)
    assert "invalid choice" in fails(2, "groups", "frobnicate")

    config = tmp_path / "consumer.properties"
    config.write_text(f"group.id=etl\nzookeeper.connect={zk_connect}\n")
    assert ok_json("topics", "list", "--config", str(config)) == {"topics": [{"topic": "known", "partitions": 1}]}
    assert ok_json("groups", "list", "--config", str(config)) == {"groups": [], "notes": []}
