"""``metaq top`` as a person uses it: run in a real terminal (a tmux pane on a private tmux server), read
from the screen (capture-pane) and driven with keys (send-keys), against a real ZooKeeper, a real broker and
a real metaq group (an in-process member that commits only when told, so that the lag is exact, and member
processes that join and are SIGKILLed); plus ``--once`` for scripts and a protocol group of a standard client.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import psutil
import pytest

from metaq.broker.process import free_port
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.producer import Producer
from metaq.testing.group import GroupHarness, ownership_problem
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make install adds it)")]

GROUP_PROPERTIES = {"zookeeper.session.timeout.ms": 3000, "auto.commit.interval.ms": 200,
                    "rebalance.backoff.ms": 300, "rebalance.max.retries": 10}


class Pane:
    """One tmux pane running a command, on a tmux server of its own (``-L``), so nothing else is touched."""

    def __init__(self, command: list[str], *, width: int = 220, height: int = 60) -> None:
        self.socket = f"metaq-top-test-{uuid.uuid4().hex[:8]}"
        # after top: its exit code, and whether it gave the terminal back (line editing and echo on again)
        modes = "stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '"
        shell = f"{shlex.join(command)}; echo \"top exited $?\"; echo \"tty: $({modes})\"; sleep 600"
        # the pane's size also in COLUMNS/LINES, which rich reads first: under pytest-xdist workers the view was
        # drawn 80 columns wide (the header cut before "orphans") although the pane was wider
        self._size = {"COLUMNS": str(width), "LINES": str(height)}
        self._tmux("new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height), shell)

    def _tmux(self, *args: str) -> str:
        env = {**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", **self._size}
        return subprocess.run(["tmux", "-u", "-L", self.socket, *args], capture_output=True, text=True, env=env,
                              check=True, timeout=30).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "top")

    def pid(self) -> int:
        """The pane's shell, whose child is the command."""
        return int(self._tmux("display-message", "-p", "-t", "top", "#{pane_pid}"))

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "top", *keys)

    def wait(self, predicate: Callable[[str], bool], what: str, timeout: float = 60) -> str:
        """The first screen ``predicate`` accepts; the last screen is in the failure message."""
        screen = ""

        def shown() -> bool:
            nonlocal screen
            screen = self.screen()
            return predicate(screen)

        wait_until(shown, timeout, lambda: f"{what}; the screen:\n{screen}", interval=0.2)
        return screen

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


def top_command(group: str, zk_connect: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "metaq", "top", group, "--zookeeper", zk_connect, "--interval", "0.5", *extra]


def row(screen: str, topic: str, partition: int) -> list[str] | None:
    """The cells of a partition row on the screen (split on blanks), or None."""
    for line in screen.splitlines():
        cells = line.split()
        if cells[:2] == [topic, str(partition)]:
            return cells
    return None


def produce(zk_connect: str, topic: str, counts: dict[int, int]) -> None:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, f"m{p}-{i}".encode(), partition=p) for p, n in counts.items()
                   for i in range(n)]
        producer.flush(30)
        for future in futures:
            future.result()


def consume_all(consumer: Consumer, stream: Any, expected: int) -> None:
    count = 0
    try:
        while count < expected:
            next(stream)
            count += 1
    except ConsumerTimeoutError:
        pytest.fail(f"{consumer.consumer_id} got {count} of {expected} messages and then nothing")
    consumer.commit_offsets()


def test_top_in_a_terminal_shows_lag_members_rebalances_and_orphans(broker, make_topic, zk_connect: str,
                                                                     zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("t", partitions=3)
    missing = metaq("top", "g", "--once", "--zookeeper", zk_connect)
    path = zk_layout.full_path("/consumers/g")
    assert missing.returncode == 1 and missing.stderr == f"metaq top: error: group 'g' does not exist (no {path})\n"
    member = Consumer({"group.id": "g", "zookeeper.connect": zk_connect, "auto.commit.enable": False,
                       "auto.offset.reset": "smallest", "consumer.timeout.ms": 5000,
                       "zookeeper.session.timeout.ms": 3000, "rebalance.backoff.ms": 300})
    harness = GroupHarness(zk_connect, "g", "t", tmp_path / "group", GROUP_PROPERTIES)
    pane = None
    try:
        [stream] = member.create_message_streams({"t": 1})["t"]
        wait_until(lambda: isinstance(ownership_problem(zk_layout, "g", "t", 3, 1), dict), 30, "a stable group")
        produce(zk_connect, "t", {0: 10, 1: 20, 2: 30})
        consume_all(member, stream, 60)  # committed: 10, 20, 30
        produce(zk_connect, "t", {0: 5, 1: 7, 2: 9})  # fetched maybe, but neither handed out nor committed
        me = member.consumer_id.removeprefix("g_")

        pane = Pane(top_command("g", zk_connect))
        # a capture can catch the screen half redrawn: wait for a whole frame
        screen = pane.wait(lambda s: "total lag 21" in s and "metaq top · g · ZooKeeper group" in s
                           and "members 1 ·" in s and "orphans 0" in s, "the lag of the unconsumed messages")
        assert any(line.split()[:1] == [member.consumer_id] and "t:0,1,2" in line for line in screen.splitlines())
        for p, (committed, end) in enumerate([(10, 15), (20, 27), (30, 39)]):
            cells = row(screen, "t", p)
            assert cells is not None and cells[2:6] == [f"{me}-0", str(committed), str(end), str(end - committed)]
            assert cells[-1] == "OK" and "█" in cells[6], screen
        assert "last rebalance: 3 partition(s) claimed by 1 member(s)" in screen
        assert "watching g (zookeeper group): 1 member, 3 partition(s)" in screen

        # a member process joins: the log shows it, it owns partitions and consumes them (their lag goes to 0)
        joiner = harness.add_member()
        joiner_id = joiner.wait_started()
        harness.wait_stable(zk_layout, 3, members=2)
        screen = pane.wait(lambda s: "members 2 ·" in s and f"joined: {joiner_id[2:]}" in s
                           and re.search(rf"rebalance: .*-> {re.escape(joiner_id[2:])}", s) is not None,
                           "the joiner in the rebalance log")
        owned = {p for (_, p), o in zk_layout.owners("g").items() if o.startswith(joiner_id)}
        screen = pane.wait(lambda s: all((c := row(s, "t", p)) is not None and c[5] == "0" for p in owned),
                           f"the joiner's partitions {owned} consumed")
        assert any(line.split()[:1] == [joiner_id] for line in screen.splitlines()), screen

        # SIGKILL the joiner: its session expires, the member takes everything back; then an owner node naming
        # the dead member is left behind (as a stuck session or a buggy tool leaves one): an orphan
        joiner.kill()
        harness.wait_stable(zk_layout, 3, members=1)
        for _ in range(5):
            zk_layout.release_partition("g", "t", 1)
            if zk_layout.claim_partition("g", "t", 1, f"{joiner_id}-0"):
                break
        assert zk_layout.owner("g", "t", 1) == f"{joiner_id}-0"
        screen = pane.wait(lambda s: "orphans 1" in s and f"left: {joiner_id[2:]}" in s, "the orphan")
        cells = row(screen, "t", 1)
        assert cells is not None and cells[2] == f"{joiner_id[2:]}-0" and cells[-1] == "ORPHAN", screen
        assert f"orphan: t/1 owned by {joiner_id[2:]}-0, which is not a live member" in screen

        pane.keys("q")
        screen = pane.wait(lambda s: "tty:" in s, "top to quit on q")
        assert "top exited 0" in screen and "tty: icanon echo" in screen and "Traceback" not in screen
        assert zk_layout.topic_assignment("__consumer_offsets") is None  # top asked no coordinator (creates it)
    finally:
        if pane is not None:
            pane.close()
        harness.stop_all()
        member.shutdown()


def metaq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=60)


def test_top_once_and_a_protocol_group(broker, make_topic, zk_connect: str, zk_layout: ZkLayout) -> None:
    make_topic("ko", partitions=2)
    produce(zk_connect, "ko", {0: 20, 1: 20})
    committer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stdg",
                                          "enable.auto.commit": False})
    try:  # a standard client's group: it exists only in the broker's coordinator
        committer.commit(offsets=[confluent_kafka.TopicPartition("ko", 0, 15),
                                  confluent_kafka.TopicPartition("ko", 1, 12)], asynchronous=False)
    finally:
        committer.close()
    assert not zk_layout.group_exists("stdg")

    once = metaq("top", "stdg", "--once", "--zookeeper", zk_connect)
    assert once.returncode == 0 and once.stderr == "", once.stderr
    screen = once.stdout
    assert "metaq top · stdg · protocol group (broker coordinator)" in screen
    assert "members 0 ·" in screen and "total lag 13" in screen  # DescribeGroups: no live members now
    assert row(screen, "ko", 0)[2:6] == ["-", "15", "20", "5"] and row(screen, "ko", 1)[2:6] == ["-", "12", "20", "8"]
    assert "watching stdg (protocol group): 0 members, 2 partition(s)" in screen
    document = json.loads(metaq("top", "stdg", "--once", "--json", "--zookeeper", zk_connect).stdout)
    assert document["kind"] == "protocol" and document["members"] == [] and document["total_lag"] == 13
    assert [(p["partition"], p["offset"], p["lag"], p["offset_source"]) for p in document["partitions"]] == [
        (0, 15, 5, "kafka"), (1, 12, 8, "kafka")]

    # live, in a terminal: the same; r refreshes at once (the interval is a minute), Ctrl-C ends it
    pane = Pane([*top_command("stdg", zk_connect)[:-2], "--interval", "60"])
    try:
        screen = pane.wait(lambda s: "members 0 ·" in s and "total lag 13" in s,
                           "the protocol group")
        assert row(screen, "ko", 0)[-2:] == ["-", "OK"]  # no commit time in Kafka, and no move seen yet
        committer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stdg",
                                              "enable.auto.commit": False})
        try:
            committer.commit(offsets=[confluent_kafka.TopicPartition("ko", 0, 20)], asynchronous=False)
        finally:
            committer.close()
        pane.keys("r")
        screen = pane.wait(lambda s: "total lag 8" in s, "the new commit after r")
        cells = row(screen, "ko", 0)
        assert cells[3:6] == ["20", "20", "0"] and re.fullmatch(r"~\d+s", cells[-2]), screen
        pane.keys("C-c")
        screen = pane.wait(lambda s: "tty:" in s, "top to quit on Ctrl-C")
        assert "top exited 0" in screen and "tty: icanon echo" in screen
        assert "Traceback" not in screen and "KeyboardInterrupt" not in screen
    finally:
        pane.close()

    # SIGTERM (kill, systemd) ends it the same way
    pane = Pane(top_command("stdg", zk_connect))
    try:
        pane.wait(lambda s: "total lag 8" in s, "the protocol group again")
        [top] = [p for p in psutil.Process(pane.pid()).children() if "top" in p.cmdline()]
        top.terminate()
        screen = pane.wait(lambda s: "tty:" in s, "top to quit on SIGTERM")
        assert "top exited 0" in screen and "tty: icanon echo" in screen and "Traceback" not in screen
    finally:
        pane.close()

    # errors: one line, exit 1 (missing group, ZooKeeper down) or 2 (usage)
    missing = metaq("top", "nope", "--once", "--zookeeper", zk_connect)
    assert missing.returncode == 1 and missing.stderr.strip().startswith("metaq top: error: group 'nope' does not")
    down = f"127.0.0.1:{free_port()}"
    unreachable = metaq("top", "g", "--once", "--zookeeper", down, "--zookeeper-timeout-ms", "1000")
    assert unreachable.returncode == 1
    assert unreachable.stderr.strip() == f"metaq top: error: cannot connect to ZooKeeper at {down} within 1000 ms"
    not_a_terminal = metaq("top", "stdg", "--zookeeper", zk_connect)
    assert not_a_terminal.returncode == 2 and "use --once" in not_a_terminal.stderr
    bad_interval = metaq("top", "stdg", "--interval", "0", "--zookeeper", zk_connect)
    assert bad_interval.returncode == 2 and "--interval must be between" in bad_interval.stderr
    live_json = metaq("top", "stdg", "--json", "--zookeeper", zk_connect)
    assert live_json.returncode == 2 and "--json needs --once" in live_json.stderr
