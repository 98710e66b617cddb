"""The brokers alone (``bootstrap.servers`` / ``--bootstrap-server``), no ZooKeeper on the client side.

- Two ``group.coordination=kafka`` consumers with only ``bootstrap.servers`` split a topic, and when the topic
  grows (``metaq topics alter --bootstrap-server``) the leader notices it within ``metadata.max.age.ms`` and the
  group rebalances over the new partitions (Java's consumer does the same through its metadata snapshot).
- ``metaq console-producer`` and ``console-consumer --group`` with ``--bootstrap-server``: everything produced is
  read and committed, as Kafka 3.9.2's ``kafka-consumer-groups --describe`` sees it.
- ``metaq topics create|alter|alter-config|delete --bootstrap-server`` (CreateTopics, CreatePartitions,
  IncrementalAlterConfigs, DeleteTopics) compared with Kafka 3.9.2's ``kafka-topics --describe``; the internal
  topics are refused by delete in both modes.
- The console consumer's exit status on SIGTERM beside Kafka 3.9.2's console consumer on the same broker.

One metaq broker for the module (with ZooKeeper behind it, as every metaq broker has); the clients never get
the ZooKeeper address except where a test compares with ZooKeeper mode.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metaq.childproc import die_with_parent
from metaq.testing.broker import SharedBroker, shared_broker
from metaq.testing.cli import CliResult, run_cli
from metaq.testing.group import StreamReader
from metaq.testing.kafka_tools import java_command, run_kafka_tool
from metaq.testing.kafka_versions import V3_9
from metaq.testing.wait import wait_until

MEMBER = {"group.coordination": "kafka", "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
          "auto.commit.interval.ms": 300, "auto.offset.reset": "smallest", "rebalance.backoff.ms": 300,
          "rebalance.max.retries": 10, "metadata.max.age.ms": 1000, "max.poll.interval.ms": 10000}


@pytest.fixture(scope="module")
def cluster(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedBroker]:
    with shared_broker(zk_server.connect_string, tmp_path_factory.mktemp("bootstrap-only"), "metaq-bootstrap-only",
                       properties={"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 2}) as shared:
        yield shared


def metaq(*args: str, stdin: str | None = None) -> CliResult:
    """In this process (metaq.testing.cli): a Python start per command would cost seconds here."""
    return run_cli(*args, stdin=stdin)


def ok(*args: str, stdin: str | None = None) -> str:
    done = metaq(*args, stdin=stdin)
    assert done.returncode == 0, f"metaq {' '.join(args)} exited {done.returncode}: {done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def kafka(*args: str, tool: str = "kafka-topics") -> str:
    done = run_kafka_tool(V3_9, tool, list(args))
    assert done.returncode == 0, f"Kafka 3.9.2 {tool} {args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _split(readers: list[StreamReader], partitions: int) -> bool:
    owned = [r.owned() for r in readers]
    return (set().union(*owned) == set(range(partitions)) and sum(len(o) for o in owned) == partitions
            and all(o for o in owned) and all(r.consumer.state.state == "STABLE" for r in readers))


def test_two_consumers_without_zookeeper_split_and_take_new_partitions(cluster: SharedBroker) -> None:
    b = cluster.broker.bootstrap
    ok("topics", "create", "--topic", "bs-split", "--partitions", "4", "--bootstrap-server", b)
    sent = ok("console-producer", "--topic", "bs-split", "--bootstrap-server", b, "--json",
              stdin="".join(f"m{i}\n" for i in range(40)))
    assert '"acknowledged": 40' in sent
    props = {"group.id": "bs-split-g", "bootstrap.servers": b, **MEMBER}
    first, second = StreamReader(props, "bs-split"), StreamReader(props, "bs-split")
    try:
        assert first.consumer.zookeeper_session is None  # no ZooKeeper client at all
        wait_until(lambda: _split([first, second], 4), 30, "two members to split 4 partitions")
        wait_until(lambda: len(set(first.seen) | set(second.seen)) == 40, 30, "every message read")
        ok("topics", "alter", "bs-split", "--partitions", "6", "--bootstrap-server", b)
        # the leader's metadata check (metadata.max.age.ms=1000) makes the group rebalance over 6 partitions
        wait_until(lambda: _split([first, second], 6), 30, "the group to take the 2 new partitions")
        ok("console-producer", "--topic", "bs-split", "--partition", "5", "--bootstrap-server", b, stdin="new\n")
        wait_until(lambda: (5, 0) in set(first.seen) | set(second.seen), 30, "the new partition's message read")
    finally:
        first.close()
        second.close()


def _kafka_group_rows(out: str) -> dict[int, tuple[int, int, int]]:
    """kafka-consumer-groups --describe: partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG)."""
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[1] == "bs-console" and cells[2].isdigit():
            rows[int(cells[2])] = (int(cells[3]), int(cells[4]), int(cells[5]))
    return rows


@pytest.mark.compat("metaq console-consumer --bootstrap-server --group, as kafka-consumer-groups --describe sees it",
                    f"Kafka {V3_9}")
def test_console_consumer_group_member_with_bootstrap_server_only(cluster: SharedBroker) -> None:
    b = cluster.broker.bootstrap
    ok("topics", "create", "--topic", "bs-console", "--partitions", "3", "--bootstrap-server", b)
    for p in range(3):
        ok("console-producer", "--topic", "bs-console", "--partition", str(p), "--bootstrap-server", b,
           stdin="".join(f"p{p}-{i}\n" for i in range(p + 2)))
    done = metaq("console-consumer", "--bootstrap-server", b, "--topic", "bs-console", "--group", "bs-console-g",
                 "--from-beginning", "--timeout-ms", "2000")
    assert done.returncode == 0 and "Processed a total of 9 messages" in done.stderr, done.stderr
    assert sorted(done.stdout.split()) == sorted(f"p{p}-{i}" for p in range(3) for i in range(p + 2))
    described = kafka("--bootstrap-server", b, "--describe", "--group", "bs-console-g",
                      tool="kafka-consumer-groups")
    assert _kafka_group_rows(described) == {0: (2, 2, 0), 1: (3, 3, 0), 2: (4, 4, 0)}
    again = metaq("console-consumer", "--bootstrap-server", b, "--topic", "bs-console", "--group", "bs-console-g",
                  "--timeout-ms", "1000")
    assert again.returncode == 0 and again.stdout == "" and "Processed a total of 0 messages" in again.stderr
    wildcard = metaq("console-consumer", "--bootstrap-server", b, "--include", "bs-.*")
    assert wildcard.returncode == 2 and "--include needs --zookeeper" in wildcard.stderr


def _kafka_describe(bootstrap: str, topic: str) -> tuple[str, list[tuple[int, int]]]:
    """kafka-topics --describe: the first line's Configs and each partition's (partition, leader)."""
    out = kafka("--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    configs = re.search(r"Configs: ?(\S*)", out)
    partitions = [(int(p), int(leader)) for p, leader in re.findall(r"Partition: (\d+)\s+Leader: (-?\d+)", out)]
    return (configs.group(1) if configs else ""), partitions


@pytest.mark.compat("metaq topics create/alter/alter-config/delete --bootstrap-server, as kafka-topics --describe "
                    "sees it", f"Kafka {V3_9}")
def test_topics_create_alter_and_delete_with_bootstrap_server(cluster: SharedBroker) -> None:
    b = ["--bootstrap-server", cluster.broker.bootstrap]
    created = ok("topics", "create", "--topic", "bs-admin", "--partitions", "2", "--topic-config",
                 "retention.ms=3600000", *b, "--json")
    assert '"partitions": 2' in created
    grown = ok("topics", "alter", "bs-admin", "--partitions", "3", *b)
    assert "2 -> 3 partitions" in grown
    changed = ok("topics", "alter-config", "bs-admin", "--set", "segment.bytes=1048576", "--delete", "retention.ms",
                 *b)
    assert changed.strip() == "Topic bs-admin: config segment.bytes=1048576"
    assert _kafka_describe(b[1], "bs-admin") == ("segment.bytes=1048576", [(0, 0), (1, 0), (2, 0)])
    [described] = json.loads(ok("topics", "describe", "bs-admin", "--json", *b))["topics"]
    assert described["config"] == {"segment.bytes": "1048576"} and len(described["partitions"]) == 3
    shrink = metaq("topics", "alter", "bs-admin", "--partitions", "2", *b)
    assert shrink.returncode == 1 and "bs-admin" in shrink.stderr  # the broker's INVALID_PARTITIONS
    bad_key = metaq("topics", "alter-config", "bs-admin", "--set", "no.such.config=1", *b)
    assert bad_key.returncode == 1 and "no.such.config" in bad_key.stderr

    assert ok("topics", "delete", "bs-admin", *b).strip() == "Deleted topic bs-admin"
    assert "bs-admin" not in ok("topics", "list", *b)
    for internal in ("__consumer_offsets", "__transaction_state"):
        for mode in (b, ["--zookeeper", cluster.zk_connect]):
            refused = metaq("topics", "delete", internal, *mode)
            assert refused.returncode == 1 and f"Topic {internal} is an internal topic" in refused.stderr, \
                (mode, refused.stderr)


def _sigterm(command: list[str], out: Path) -> tuple[int, str]:
    """Start ``command``, SIGTERM it once it has printed its first message, and return (status, stderr)."""
    with open(out, "w") as stdout, subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True,
                                                    preexec_fn=die_with_parent()) as proc:
        try:
            wait_until(lambda: out.read_text().strip() != "" or proc.poll() is not None, 90,
                       f"{command[0]} to print a message")
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc.returncode, err


@pytest.mark.compat("console consumer exit status on SIGTERM, beside Kafka's", f"Kafka {V3_9}")
def test_console_consumer_exit_status_on_sigterm_beside_kafka(cluster: SharedBroker, tmp_path: Path) -> None:
    """Kafka's console consumer runs its shutdown hook on SIGTERM (the consumer is woken, the count line printed)
    and the JVM then exits 128 + 15; metaq's does the same after its clean stop."""
    b = cluster.broker.bootstrap
    ok("topics", "create", "--topic", "bs-term", "--partitions", "1", "--bootstrap-server", b)
    ok("console-producer", "--topic", "bs-term", "--bootstrap-server", b, stdin="one\ntwo\n")
    args = ["--bootstrap-server", b, "--topic", "bs-term", "--from-beginning"]
    from metaq.testing.kafka_tools import _tools_log4j, tool_class

    theirs = _sigterm(java_command(V3_9, tool_class(V3_9, "kafka-console-consumer"), [*args, "--group", "k-term"],
                                   log4j=_tools_log4j()), tmp_path / "kafka.out")
    ours = _sigterm([sys.executable, "-m", "metaq", "console-consumer", *args, "--group", "m-term"],
                    tmp_path / "metaq.out")
    assert theirs[0] == ours[0] == 128 + signal.SIGTERM, (theirs, ours)
    assert "Processed a total of 2 messages" in theirs[1] and "Processed a total of 2 messages" in ours[1]
    assert (tmp_path / "kafka.out").read_text() == (tmp_path / "metaq.out").read_text() == "one\ntwo\n"
