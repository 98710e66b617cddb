"""SIGTERM and SIGINT stop every consuming process cleanly: what was handed
out is committed, the next member starts exactly there, and a second signal exits at once.

Members are real processes on a real ZooKeeper and broker, fed by a steady producer so that the signal lands
mid-stream.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from metaq.childproc import die_with_parent
from metaq.testing.group import SteadyProducer
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

PARTITIONS = 6


def _lines(path: Path) -> list[dict]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _spawn(args: list[str], out: Path, err: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        return subprocess.Popen(args, stdout=stdout, stderr=stderr, preexec_fn=die_with_parent())


def _console_consumer(zk_connect: str, group: str, out: Path, err: Path, *extra: str) -> subprocess.Popen[bytes]:
    return _spawn([sys.executable, "-m", "metaq", "console-consumer", "--zookeeper", zk_connect, "--topic", "sig",
                   "--group", group, "--from-beginning", "--json",
                   "--property", "auto.commit.interval.ms=600000", *extra], out, err)


def _positions(rows: list[dict]) -> list[tuple[int, int]]:
    return [(row["partition"], row["offset"]) for row in rows]


def _assert_prefixes(printed: list[tuple[int, int]], committed: dict[tuple[str, int], int]) -> None:
    """What a member handed out is exactly [0, committed) of each partition: nothing more, nothing less."""
    assert len(printed) == len(set(printed)), "a message was printed twice"
    for p in range(PARTITIONS):
        offsets = sorted(o for q, o in printed if q == p)
        assert offsets == list(range(committed.get(("sig", p), 0))), f"partition {p}"


def test_console_consumer_commits_on_sigterm_and_the_next_member_resumes_there(
        broker, make_topic, zk_connect: str, zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("sig", partitions=PARTITIONS)
    producer = SteadyProducer(zk_connect, "sig", rate=2000)
    producer.start()
    first_out = tmp_path / "first.jsonl"
    first = _console_consumer(zk_connect, "g", first_out, tmp_path / "first.err")
    try:
        wait_until(lambda: len(_lines(first_out)) >= 1500, 60, "the first member to print 1500 messages")
        first.send_signal(signal.SIGTERM)
        # 128 + SIGTERM after the clean stop, as Kafka's console consumer (test_bootstrap_only.py runs both)
        assert first.wait(30) == 143, (tmp_path / "first.err").read_text()
    finally:
        if first.poll() is None:
            first.kill()
    acked = producer.finish()
    printed = _positions(_lines(first_out))
    _assert_prefixes(printed, zk_layout.offsets("g"))
    assert zk_layout.owners("g") == {} and zk_layout.consumer_ids("g") == []
    assert "Processed a total of" in (tmp_path / "first.err").read_text()

    second_out = tmp_path / "second.jsonl"
    second = _console_consumer(zk_connect, "g", second_out, tmp_path / "second.err", "--timeout-ms", "4000")
    assert second.wait(120) == 0, (tmp_path / "second.err").read_text()
    rest = _positions(_lines(second_out))
    assert not set(printed) & set(rest), "the next member re-read what the first one printed"
    assert set(printed) | set(rest) == set(acked), "an acknowledged message was never printed"


_SLOW_STOP = textwrap.dedent("""
    import sys, time
    from metaq.signals import TerminationHandler
    handler = TerminationHandler(lambda: (print("stopping", flush=True), time.sleep(60))).install()
    print("ready", flush=True)
    handler.wait(120)
    print("stopped cleanly", flush=True)
""")


def test_a_second_signal_exits_at_once_while_the_first_stop_is_still_running(tmp_path: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", _SLOW_STOP], stdout=subprocess.PIPE,
                          preexec_fn=die_with_parent()) as proc:  # closes the pipe
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            proc.send_signal(signal.SIGTERM)
            assert proc.stdout.readline() == b"stopping\n"  # the first stop is now sleeping in on_stop
            assert proc.poll() is None, "the first signal must not exit at once"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(10) == 128 + signal.SIGINT
            assert b"stopped cleanly" not in proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()


_LISTENER_MEMBER = textwrap.dedent("""
    import json, sys, threading, time
    from metaq.consumer import MessageConsumer

    out = open(sys.argv[2], "a", buffering=1)
    lock = threading.Lock()

    class Recorder:
        def receive_message(self, message):
            time.sleep(0.0005)
            with lock:
                out.write(json.dumps({"partition": message.partition, "offset": message.offset}) + "\\n")

    config = {"group.id": "lg", "zookeeper.connect": sys.argv[1], "auto.offset.reset": "smallest",
              "auto.commit.interval.ms": 600000, "zookeeper.session.timeout.ms": 6000}
    with MessageConsumer(config, recover_initial_delay_s=60) as consumer:
        consumer.subscribe("sig", 1 << 20, Recorder()).complete_subscribe()
        consumer.stop_on_signals()
        print("ready", flush=True)
        consumer.wait()
    print("closed", flush=True)
""")


def test_message_consumer_stop_on_signals_commits_what_listeners_processed(
        broker, make_topic, zk_connect: str, zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("sig", partitions=PARTITIONS)
    producer = SteadyProducer(zk_connect, "sig", rate=1500)
    producer.start()
    script = tmp_path / "member.py"
    script.write_text(_LISTENER_MEMBER)
    env_dir = tmp_path / "recover"
    env_dir.mkdir()
    runs: list[list[tuple[int, int]]] = []
    try:
        for n in range(2):
            out = tmp_path / f"member-{n}.jsonl"
            with open(tmp_path / f"member-{n}.err", "wb") as err, subprocess.Popen(
                    [sys.executable, str(script), zk_connect, str(out)], stdout=subprocess.PIPE, stderr=err,
                    cwd=env_dir, env={**os.environ, "HOME": str(env_dir)}, preexec_fn=die_with_parent()) as member:
                assert member.stdout is not None and member.stdout.readline() == b"ready\n"
                wait_until(lambda out=out: len(_lines(out)) >= 800, 60, f"member {n} to process 800 messages")
                member.send_signal(signal.SIGTERM)
                assert member.wait(45) == 0, (tmp_path / f"member-{n}.err").read_text()
                assert member.stdout.read() == b"closed\n"
            runs.append(_positions(_lines(out)))
            assert zk_layout.owners("lg") == {} and zk_layout.consumer_ids("lg") == []
    finally:
        acked = producer.finish()
    first, second = runs
    _assert_prefixes(first + second, zk_layout.offsets("lg"))
    assert not set(first) & set(second)
    assert set(first + second) <= set(acked)


def test_console_consumer_without_a_group_removes_the_group_it_generated(
        broker, make_topic, zk_connect: str, zk_layout: ZkLayout, tmp_path: Path) -> None:
    make_topic("sig", partitions=2)
    producer = SteadyProducer(zk_connect, "sig", rate=500)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 300, 60, "300 acknowledged messages")
    acked = producer.finish()
    out, err = tmp_path / "out.jsonl", tmp_path / "err.txt"
    proc = _spawn([sys.executable, "-m", "metaq", "console-consumer", "--zookeeper", zk_connect, "--topic", "sig",
                   "--from-beginning", "--json", "--timeout-ms", "3000"], out, err)
    wait_until(lambda: any(g.startswith("console-consumer-") for g in zk_layout.groups()), 60,
               "the generated group to appear")
    assert proc.wait(60) == 0, err.read_text()
    assert set(_positions(_lines(out))) == set(acked) and acked
    assert [g for g in zk_layout.groups() if g.startswith("console-consumer-")] == []
