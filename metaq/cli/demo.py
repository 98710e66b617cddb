"""``metaq demo``: the main job on the embedded default.

A real ZooKeeper (child Java process) and a broker process; a topic; a steady producer; a group of
consumers in separate processes with a live view of who owns which partition and the progress; one
consumer killed (SIGKILL) and one added midway; and a final check that every produced message was
consumed, with the duplicate count (duplicates may only come from the killed member's uncommitted
window). Set ZOOKEEPER_CONNECT to use an external ZooKeeper.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.cli.demo_harness import GroupHarness, SteadyProducer, check_delivery
from metaq.zkclient import connect
from zk_layout import ZkLayout


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("demo", help="run the demo on an embedded ZooKeeper and broker")
    parser.add_argument("--messages", type=int, default=20000, help="messages to produce (default 20000)")
    parser.add_argument("--rate", type=float, default=1500.0, help="messages per second (default 1500)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=3)
    parser.set_defaults(func=_run)


def _say(text: str) -> None:
    print(text, flush=True)


def _run(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="metaq-demo-"))
    zk_server = None
    try:
        external = os.environ.get("ZOOKEEPER_CONNECT")
        if external:
            base = external
            _say(f"ZooKeeper: external {external}")
        else:
            from metaq.zkserver import ZooKeeperServer

            _say("Starting an embedded ZooKeeper (a real Java server)...")
            zk_server = ZooKeeperServer(data_dir=work / "zk", tick_time_ms=200, force_sync=False).start()
            base = zk_server.connect_string
            _say(f"  ZooKeeper at {base}")
        zk = f"{base}/metaq-demo-{uuid.uuid4().hex[:8]}"
        return _demo(args, zk, work)
    finally:
        if zk_server is not None:
            zk_server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _demo(args: argparse.Namespace, zk: str, work: Path) -> int:
    broker = BrokerProcess(zk, 0, work, log_level="WARNING").start()
    client = connect(zk)
    layout = ZkLayout(client)
    group = GroupHarness(zk, "demo-group", "demo", work / "group")
    try:
        _say(f"Broker 0 serving at {broker.bootstrap}")
        create_topic(layout, "demo", args.partitions)
        _say(f"Topic 'demo' with {args.partitions} partitions; starting {args.consumers} consumer processes")
        for _ in range(args.consumers):
            group.add_member()
        group.wait_stable(layout, args.partitions, members=args.consumers, timeout=60)
        producer = SteadyProducer(zk, "demo", rate=args.rate)
        producer.start()
        _watch(args, group, layout, producer)
        acked = producer.finish()
        _say(f"Produced {len(acked)} messages (failed: {producer.failed}); waiting for the group to drain...")
        _wait_drained(group, acked, timeout=120)
        group.stop_all()
        return _verdict(group, acked)
    finally:
        group.stop_all()
        for member in group.members:
            member.kill()
        broker.stop()
        client.stop()
        client.close()


def _watch(args: argparse.Namespace, group: GroupHarness, layout: ZkLayout, producer: SteadyProducer) -> None:
    killed = added = False
    start = time.monotonic()
    while len(producer.acked) < args.messages:
        time.sleep(1.0)
        done = len(producer.acked) / args.messages
        if done > 0.35 and not killed:
            victim = group.members[0]
            _say(f"*** SIGKILL {victim.name} (pid {victim.pid})")
            victim.kill()
            killed = True
        if done > 0.6 and not added:
            member = group.add_member()
            _say(f"*** adding {member.name}")
            added = True
        _say(_status_line(time.monotonic() - start, group, layout, len(producer.acked), args))
    producer.stop_event.set()


def _status_line(elapsed: float, group: GroupHarness, layout: ZkLayout, produced: int,
                 args: argparse.Namespace) -> str:
    consumed = sum(n for e in group.events() if e["name"] == "records_consumed" for p in e["partitions"]
                   for n in [p["count"]])
    owners: dict[str, list[int]] = {}
    names = {m.consumer_id(): m.name for m in group.members}
    for (_topic, partition), owner in sorted(layout.owners("demo-group").items()):
        owners.setdefault(names.get(owner.rsplit("-", 1)[0], "?"), []).append(partition)
    view = " | ".join(f"{name}: {','.join(map(str, parts))}" for name, parts in sorted(owners.items()))
    bar = _bar(produced / args.messages)
    return f"{elapsed:5.1f}s {bar} produced {produced:>6} consumed {consumed:>6}  owners {view or '-'}"


def _bar(fraction: float, width: int = 20) -> str:
    filled = int(min(max(fraction, 0.0), 1.0) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _wait_drained(group: GroupHarness, acked: dict[tuple[int, int], bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = check_delivery(group.events(), acked)
        if not report.missing:
            return
        time.sleep(0.5)


def _verdict(group: GroupHarness, acked: dict[tuple[int, int], bytes]) -> int:
    failed = [m.name for m in group.members[:1]]
    report = check_delivery(group.events(), acked, failed_members=failed)
    per_member: Counter[str] = Counter()
    for e in group.events():
        if e["name"] == "records_consumed":
            per_member[e["member"]] += sum(p["count"] for p in e["partitions"])
    _say("")
    _say("Summary")
    _say(f"  produced (acknowledged): {len(acked)}")
    _say(f"  consumed, distinct:      {sum(len(c) for c in report.consumed.values())}")
    _say(f"  duplicates:              {report.duplicates} (allowed only from {failed[0]}'s uncommitted window)")
    _say(f"  missing:                 {len(report.missing)}")
    _say("  per member:              " + ", ".join(f"{k}={v}" for k, v in sorted(per_member.items())))
    ok = not report.missing and not report.unexplained_duplicates and not report.backwards_commits
    _say("RESULT: " + ("OK: every produced message was consumed" if ok else "FAILED"))
    if not ok:
        print(report, file=sys.stderr)
    return 0 if ok else 1
