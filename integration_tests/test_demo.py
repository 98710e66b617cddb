"""``make demo`` end to end: ``metaq demo`` with its defaults starts an embedded ZooKeeper and
three brokers, SIGKILLs the broker that leads the most partitions of the RF-3 topic while the group
consumes (and one member), restarts it, and reports every acknowledged message consumed; ``--brokers 1``
is the single-broker demo."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(420)


def _demo(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "metaq", "demo", *args], capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, f"demo failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _summary(out: str, field: str) -> str:
    found = re.search(rf"^  {field}:\s+(.*)$", out, re.MULTILINE)
    assert found, f"no {field!r} in the summary:\n{out}"
    return found.group(1)


def test_demo_kills_the_busiest_leader_and_loses_nothing() -> None:
    out = _demo()
    assert "3 brokers serving at" in out and "replication factor 3, min.insync.replicas 2" in out
    killed = re.search(r"^\*\*\* SIGKILL broker (\d) \(pid \d+\), the leader of partitions ([\d,]+)", out, re.MULTILINE)
    assert killed, out
    victim, led = killed.group(1), killed.group(2).split(",")
    assert re.search(rf"^\*\*\* leaders moved off broker {victim} ", out, re.MULTILINE), out
    assert re.search(rf"^\*\*\* broker {victim} is back in the ISR of all 8 partitions", out, re.MULTILINE), out
    assert "*** SIGKILL member-0" in out and "*** adding member-3" in out
    assert "member-3=" in _summary(out, "per member"), out  # the added member took partitions over
    assert _summary(out, "missing") == "0"
    assert int(_summary(out, "produced \\(acknowledged\\)")) >= 30000
    failover = _summary(out, "broker failover")
    assert failover.startswith(f"broker {victim} killed leading {len(led)} partitions; {len(led)} leaders moved"), out
    assert "NOT back" not in failover and "never" not in failover, out
    assert out.rstrip().endswith("RESULT: OK: every produced message was consumed")


def test_single_broker_demo() -> None:
    out = _demo("--brokers", "1", "--messages", "6000")
    assert "1 broker serving at" in out and "SIGKILL broker" not in out and "broker failover" not in out
    assert _summary(out, "missing") == "0"
    assert out.rstrip().endswith("RESULT: OK: every produced message was consumed")
