"""The multi-process consumer group that ``metaq demo`` runs (and the tests reuse via :mod:`metaq.testing.group`):
member processes, a steady producer, and the offline delivery check of their event logs.

    group = GroupHarness(zk_connect, "g", "t", work_dir)
    a = group.add_member(); b = group.add_member()
    group.wait_stable(layout, partitions=12)
    a.kill()                                   # SIGKILL; also pause()/resume()/stop()
    report = check_delivery(group.events(), acked)

Members are ``metaq verifiable-consumer`` processes; each writes JSON lines (see that module), with
``time.monotonic()`` stamps comparable across processes. Production code, so it imports nothing from
:mod:`metaq.testing`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metaq.childproc import die_with_parent, stop_process
from metaq.config import Properties
from metaq.errors import MetaqError
from metaq.polling import wait_until
from zk_layout import ZkLayout

Event = dict[str, Any]


class ConsumerProcess:
    def __init__(self, harness: GroupHarness, name: str, properties: Properties) -> None:
        self.name = name
        self.events_path = harness.work_dir / f"{name}.jsonl"
        self.log_path = harness.work_dir / f"{name}.log"
        args = [sys.executable, "-m", "metaq", "--log-level", "INFO", "verifiable-consumer",
                "--zookeeper", harness.zk_connect, "--group", harness.group, "--topic", harness.topic]
        for key, value in {**harness.properties, **properties}.items():
            args += ["--property", f"{key}={value}"]
        with open(self.events_path, "ab") as out, open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, preexec_fn=die_with_parent())
        self.paused = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self) -> list[Event]:
        events = []
        for line in self.events_path.read_text().splitlines():
            try:
                events.append({**json.loads(line), "member": self.name})
            except json.JSONDecodeError:
                continue  # a line cut by SIGKILL
        return events

    def consumer_id(self) -> str | None:
        for e in self.events():
            if e["name"] == "startup_complete":
                return str(e["consumer_id"])
        return None

    def session(self) -> tuple[int, bytes] | None:
        """The ZooKeeper (session id, password) the member reported at start-up (for a real expiry)."""
        for e in self.events():
            if e["name"] == "startup_complete" and e.get("session_id") is not None:
                return int(e["session_id"]), bytes.fromhex(e["session_password"])
        return None

    def wait_started(self, timeout: float = 30) -> str:
        """Wait for startup_complete; returns the consumer id."""
        wait_until(lambda: self.consumer_id() is not None or not self.alive, timeout, f"{self.name} to start")
        consumer_id = self.consumer_id()
        if consumer_id is None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode} before starting; see {self.log_path}")
        return consumer_id

    def stop(self, timeout: float = 30) -> int | None:
        if self.paused:
            self.resume()
        return stop_process(self.proc, timeout)

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False


class GroupHarness:
    def __init__(self, zk_connect: str, group: str, topic: str, work_dir: Path,
                 properties: Properties | None = None) -> None:
        self.zk_connect = zk_connect
        self.group = group
        self.topic = topic
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.properties = {"zookeeper.session.timeout.ms": 3000, "auto.commit.interval.ms": 300,
                           "rebalance.backoff.ms": 500, "rebalance.max.retries": 10, **(properties or {})}
        self.members: list[ConsumerProcess] = []

    def add_member(self, **properties: object) -> ConsumerProcess:
        member = ConsumerProcess(self, f"member-{len(self.members)}", properties)
        self.members.append(member)
        return member

    def events(self) -> list[Event]:
        return sorted((e for m in self.members for e in m.events()), key=lambda e: e["time"])

    def stop_all(self) -> None:
        for member in self.members:
            if member.alive:
                member.stop()

    def wait_stable(self, layout: ZkLayout, partitions: int, *, members: int | None = None,
                    timeout: float = 60) -> dict[int, str]:
        """Wait until every partition has exactly one owner, all owners are live members, and the
        split is balanced within 1. Returns partition -> owner thread id."""
        last: dict[int, str] | str = "not checked yet"

        def stable() -> bool:
            nonlocal last
            try:
                last = ownership_problem(layout, self.group, self.topic, partitions, members)
            except MetaqError as e:  # ZooKeeper restarting: not stable yet
                last = f"cannot read the group: {e}"
            return isinstance(last, dict)

        wait_until(stable, timeout, lambda: f"group {self.group} to be stable: {last}", interval=0.1)
        assert isinstance(last, dict)
        return last


def ownership_problem(layout: ZkLayout, group: str, topic: str, partitions: int,
                      members: int | None) -> dict[int, str] | str:
    """The owner map if ownership is exclusive, complete and balanced; otherwise what is wrong."""
    live = set(layout.consumer_ids(group))
    if members is not None and len(live) != members:
        return f"{len(live)} members registered, expected {members}"
    owners = {p: o for (t, p), o in layout.owners(group).items() if t == topic}
    if sorted(owners) != list(range(partitions)):
        return f"owned partitions {sorted(owners)}"
    by_member = Counter(o.rsplit("-", 1)[0] for o in owners.values())
    if not set(by_member) <= live:
        return f"owners {sorted(by_member)} include non-members (live: {sorted(live)})"
    if len(live) and len(by_member) == min(len(live), partitions):
        counts = list(by_member.values())
        if max(counts) - min(counts) <= 1:
            return owners
    return f"unbalanced: {dict(by_member)}"


class SteadyProducer(threading.Thread):
    """Produces (seq) values at a steady rate with metaq.Producer; records acknowledged offsets and when each
    acknowledgement arrived (``time.monotonic()``). ``acks="all"`` for a replicated topic."""

    def __init__(self, zk_connect: str, topic: str, rate: float = 500.0, acks: int | str = 1) -> None:
        super().__init__(name="steady-producer", daemon=True)
        from metaq.producer import Producer

        self._producer = Producer({"zookeeper.connect": zk_connect, "linger.ms": 5, "retries": 50, "acks": acks})
        self.topic = topic
        self.rate = rate
        self.stop_event = threading.Event()
        self.acked: dict[tuple[int, int], bytes] = {}
        self.acked_at: dict[tuple[int, int], float] = {}
        self.failed = 0
        self._lock = threading.Lock()

    def _done(self, fut: Any) -> None:
        try:
            md = fut.result()
        except Exception:
            with self._lock:
                self.failed += 1
            return
        now = time.monotonic()
        with self._lock:
            self.acked[(md.partition, md.offset)] = b""
            self.acked_at[(md.partition, md.offset)] = now

    def run(self) -> None:
        seq = 0
        start = time.monotonic()
        while not self.stop_event.is_set():
            self._producer.send(self.topic, b"%012d" % seq).add_done_callback(self._done)
            seq += 1
            ahead = seq / self.rate - (time.monotonic() - start)
            if ahead > 0:
                self.stop_event.wait(ahead)
        self._producer.flush(60)
        self._producer.close()

    def finish(self) -> dict[tuple[int, int], bytes]:
        self.stop_event.set()
        self.join(90)
        return dict(self.acked)


@dataclass
class DeliveryReport:
    consumed: dict[int, Counter[int]] = field(default_factory=dict)
    missing: list[tuple[int, int]] = field(default_factory=list)
    duplicates: int = 0
    unexplained_duplicates: list[tuple[int, int]] = field(default_factory=list)
    backwards_commits: list[str] = field(default_factory=list)

    def assert_ok(self) -> None:
        assert not self.missing, f"{len(self.missing)} acknowledged messages never consumed, e.g. {self.missing[:5]}"
        assert not self.backwards_commits, self.backwards_commits[:5]
        assert not self.unexplained_duplicates, (
            f"duplicates outside a failed member's uncommitted window: {self.unexplained_duplicates[:5]}")


def check_delivery(events: Iterable[Event], acked: Iterable[tuple[int, int]],
                   failed_members: Iterable[str] = ()) -> DeliveryReport:
    """I1 no acked loss; I2 duplicates only from failed members' uncommitted windows; I5 commits
    never go backwards."""
    events = list(events)
    report = DeliveryReport()
    consumed: dict[int, Counter[int]] = defaultdict(Counter)
    for e in events:
        if e["name"] == "records_consumed":
            for part in e["partitions"]:
                consumed[part["partition"]].update(range(part["minOffset"], part["maxOffset"] + 1))
    report.consumed = dict(consumed)
    report.missing = sorted((p, o) for p, o in acked if consumed[p][o] == 0)
    allowed = _uncommitted_windows(events, set(failed_members))
    for p, counter in consumed.items():
        for offset, n in counter.items():
            if n > 1:
                report.duplicates += n - 1
                if not any(lo <= offset <= hi for lo, hi in allowed.get(p, ())):
                    report.unexplained_duplicates.append((p, offset))
    report.backwards_commits = _backwards_commits(events)
    return report


def _uncommitted_windows(events: list[Event], failed: set[str]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, offsets a failed member consumed and did not commit: per assignment epoch (an epoch
    ends at the member's next partitions_assigned event), ``[last commit in the epoch, highest consumed]``,
    or everything it consumed in the epoch if it committed nothing then. A member that lost its session
    and came back (a zombie, an expired session) thus leaves one window per epoch it failed in."""
    windows: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for member in failed:
        epoch = _Epoch()
        for e in (e for e in events if e["member"] == member):
            if e["name"] == "partitions_assigned":
                epoch.close(windows)
            elif e["name"] == "offsets_committed":
                for o in e["offsets"]:
                    epoch.commit[o["partition"]] = o["offset"]
            elif e["name"] == "records_consumed":
                for part in e["partitions"]:
                    p = part["partition"]
                    epoch.low[p] = min(epoch.low.get(p, part["minOffset"]), part["minOffset"])
                    epoch.high[p] = max(epoch.high.get(p, -1), part["maxOffset"])
        epoch.close(windows)
    return windows


@dataclass
class _Epoch:
    """What one member consumed and committed per partition within one assignment epoch."""

    low: dict[int, int] = field(default_factory=dict)
    high: dict[int, int] = field(default_factory=dict)
    commit: dict[int, int] = field(default_factory=dict)

    def close(self, windows: dict[int, list[tuple[int, int]]]) -> None:
        for p, hi in self.high.items():
            lo = self.commit.get(p, self.low[p])
            if lo <= hi:
                windows[p].append((lo, hi))
        self.low.clear()
        self.high.clear()
        self.commit.clear()


def _commit_started(event: Event) -> float:
    started = event.get("started")
    return float(started if started is not None else event["time"])


def _backwards_commits(events: list[Event]) -> list[str]:
    """Commits in the order they began: a successful (fenced) commit took effect between its start and its
    report, before the next owner's fence, so a member paused (SIGSTOP) in the middle of a commit reports it
    late but it still precedes every commit of the partition's next owner."""
    last: dict[int, tuple[int, str]] = {}
    problems = []
    commits = sorted((e for e in events if e["name"] == "offsets_committed"), key=_commit_started)
    for e in commits:
        for o in e["offsets"]:
            prev = last.get(o["partition"])
            if prev is not None and o["offset"] < prev[0]:
                problems.append(f"partition {o['partition']}: {e['member']} committed {o['offset']} after "
                                f"{prev[1]} committed {prev[0]}")
            last[o["partition"]] = (o["offset"], e["member"])
    return problems
