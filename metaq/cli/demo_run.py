"""What ``metaq demo`` runs (metaq/cli/demo.py registers the command and says what the demo does):
imported only when it runs, as it brings in ZooKeeper's client, the broker's topic tools and the harness."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from metaq.broker.topics import create_topic
from metaq.cli.demo_failover import DemoBrokers, Failover
from metaq.cli.demo_harness import ConsumerProcess, GroupHarness, SteadyProducer, check_delivery
from metaq.zkclient import connect
from zk_layout import ZkLayout


def _say(text: str) -> None:
    print(text, flush=True)


def run(args: argparse.Namespace) -> int:
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
    if args.messages is None:
        args.messages = 30000 if args.brokers > 1 else 20000
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        # the producer's warnings about the killed broker's refused connections: the demo narrates the failover
        logging.getLogger("metaq.producer").setLevel(logging.ERROR)
    replication = min(args.brokers, 3)
    brokers = DemoBrokers(zk, work, args.brokers)
    client = connect(zk)
    layout = ZkLayout(client)
    group = GroupHarness(zk, "demo-group", "demo", work / "group")
    try:
        brokers.start()
        _say(f"{args.brokers} broker{'s' if args.brokers > 1 else ''} serving at {brokers.bootstrap}")
        config = {"min.insync.replicas": str(max(1, replication - 1))} if replication > 1 else {}
        create_topic(layout, "demo", args.partitions, replication_factor=replication, config=config)
        _say(f"Topic 'demo' with {args.partitions} partitions, replication factor {replication}"
             + (f", min.insync.replicas {config['min.insync.replicas']}" if config else "")
             + f"; starting {args.consumers} consumer processes")
        for _ in range(args.consumers):
            group.add_member()
        group.wait_stable(layout, args.partitions, members=args.consumers, timeout=60)
        producer = SteadyProducer(zk, "demo", rate=args.rate, acks="all" if replication > 1 else 1)
        producer.start()
        _watch(args, group, layout, producer, brokers)
        acked = producer.finish()
        _say(f"Produced {len(acked)} messages (failed: {producer.failed}); waiting for the group to drain...")
        _wait_drained(group, acked, timeout=120)
        group.stop_all()
        return _verdict(group, acked, producer, brokers.failover)
    finally:
        group.stop_all()
        for member in group.members:
            member.kill()
        brokers.stop()
        client.stop()
        client.close()


def _watch(args: argparse.Namespace, group: GroupHarness, layout: ZkLayout, producer: SteadyProducer,
           brokers: DemoBrokers) -> None:
    """The live view, one line a second, and the scripted failures: a member killed at 20% of the messages,
    the busiest broker killed at 35%, a member added at 55%, the broker restarted at 65% (once its partitions
    have new leaders). Production goes on past ``--messages`` until the added member owns partitions and the
    broker is back in the ISR (each at most 60 s)."""
    failover_wanted = len(brokers.brokers) > 1
    killed = False
    added: tuple[ConsumerProcess, float] | None = None
    start = last_line = time.monotonic()
    while True:
        time.sleep(0.1)
        done = len(producer.acked) / args.messages
        if done > 0.2 and not killed:
            victim = group.members[0]
            _say(f"*** SIGKILL {victim.name} (pid {victim.pid})")
            victim.kill()
            killed = True
        if failover_wanted:
            _broker_step(done, layout, brokers, args.partitions)
        if done > 0.55 and added is None:
            added = group.add_member(), time.monotonic()
            _say(f"*** adding {added[0].name}")
        if time.monotonic() - last_line >= 1.0:
            last_line = time.monotonic()
            _say(_status_line(last_line - start, group, layout, len(producer.acked), args, brokers))
        if done >= 1.0 and added is not None and (not failover_wanted or _failover_over(brokers.failover)) \
                and (_owns_some(layout, added[0]) or time.monotonic() - added[1] > 60):
            break
    producer.stop_event.set()


def _owns_some(layout: ZkLayout, member: ConsumerProcess) -> bool:
    consumer_id = member.consumer_id()
    return consumer_id is not None and any(
        owner.rsplit("-", 1)[0] == consumer_id for owner in layout.owners("demo-group").values())


def _broker_step(done: float, layout: ZkLayout, brokers: DemoBrokers, partitions: int) -> None:
    f = brokers.failover
    if f is None:
        if done > 0.35:
            f = brokers.kill_busiest(layout, "demo", partitions)
            _say(f"*** SIGKILL broker {f.victim} (pid {f.pid}), the leader of partitions "
                 f"{','.join(map(str, sorted(f.led)))} ({len(f.led)} of {partitions}); the group keeps consuming")
        return
    for news in brokers.poll(layout, "demo", partitions):
        _say(news)
    if f.elected_at is not None and f.restarted_at is None and done > 0.65:
        _say(brokers.restart())


def _failover_over(f: Failover | None) -> bool:
    if f is None or f.restarted_at is None:
        return False
    return f.rejoined_at is not None or f.restart_error is not None or time.monotonic() - f.restarted_at > 60


def _status_line(elapsed: float, group: GroupHarness, layout: ZkLayout, produced: int,
                 args: argparse.Namespace, brokers: DemoBrokers) -> str:
    consumed = sum(n for e in group.events() if e["name"] == "records_consumed" for p in e["partitions"]
                   for n in [p["count"]])
    owners: dict[str, list[int]] = {}
    names = {m.consumer_id(): m.name for m in group.members}
    for (_topic, partition), owner in sorted(layout.owners("demo-group").items()):
        owners.setdefault(names.get(owner.rsplit("-", 1)[0], "?"), []).append(partition)
    view = " | ".join(f"{name}: {','.join(map(str, parts))}" for name, parts in sorted(owners.items()))
    bar = _bar(produced / args.messages)
    line = f"{elapsed:5.1f}s {bar} produced {produced:>6} consumed {consumed:>6}  owners {view or '-'}"
    if len(brokers.brokers) > 1:
        line += f"  leaders {brokers.leaders_view(layout, 'demo', args.partitions)}"
    return line


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


def _verdict(group: GroupHarness, acked: dict[tuple[int, int], bytes], producer: SteadyProducer,
             failover: Failover | None) -> int:
    failed = [m.name for m in group.members[:1]]
    report = check_delivery(group.events(), acked, failed_members=failed)
    per_member: Counter[str] = Counter()
    for e in group.events():
        if e["name"] == "records_consumed":
            per_member[e["member"]] += sum(p["count"] for p in e["partitions"])
    _say("")
    _say("Summary")
    _say(f"  produced (acknowledged): {len(acked)}")
    distinct = sum(len(c) for c in report.consumed.values())
    extra = distinct - (len(acked) - len(report.missing))
    # every send was acknowledged once (or failed): an offset consumed but never acknowledged holds a second
    # copy, written by an attempt whose answer the broker kill cut off, then resent. With acks=all the producer
    # is idempotent and the brokers drop such resends (docs/delivery-guarantees.md), so this stays 0 there
    _say(f"  consumed, distinct:      {distinct}"
         + (f" ({extra} offsets never acknowledged: sends resent after the broker kill cut off the answer)"
            if extra > 0 else ""))
    _say(f"  duplicates:              {report.duplicates} (allowed only from {failed[0]}'s uncommitted window)")
    _say(f"  missing:                 {len(report.missing)}")
    _say("  per member:              " + ", ".join(f"{k}={v}" for k, v in sorted(per_member.items())))
    failover_ok = True
    if failover is not None:
        failover_ok = failover.rejoined_at is not None
        _say("  broker failover:         " + _failover_summary(failover, group, producer))
    ok = not report.missing and not report.unexplained_duplicates and not report.backwards_commits and failover_ok
    _say("RESULT: " + ("OK: every produced message was consumed" if ok else "FAILED"))
    if not ok:
        # the problems only (the report's per-offset counters run to the whole stream)
        print(f"missing (first 20): {report.missing[:20]}\nunexplained duplicates (first 20): "
              f"{report.unexplained_duplicates[:20]}\nbackwards commits: {report.backwards_commits[:5]}",
              file=sys.stderr)
    return 0 if ok else 1


def _failover_summary(f: Failover, group: GroupHarness, producer: SteadyProducer) -> str:
    """One line: what moved and how long each step took after the SIGKILL."""
    def secs(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f}s"

    parts = [f"broker {f.victim} killed leading {len(f.led)} partitions"]
    if f.elected_at is None:
        parts.append("no new leaders")
    else:
        parts.append(f"{len(f.moved)} leaders moved after {secs(f.elected_at - f.killed_at)}")
        parts.append(f"acks=all produce resumed after {secs(f.produce_resumed(producer.acked_at))}")
        parts.append(f"group read a post-failover record after "
                     f"{secs(f.read_resumed(group.events(), producer.acked_at))}")
    if f.restart_error is not None:
        parts.append(f"NOT restarted: {f.restart_error}")
    elif f.rejoined_at is None or f.restarted_at is None:
        parts.append("NOT back in the ISR")
    else:
        parts.append(f"back in the ISR {f.rejoined_at - f.restarted_at:.1f}s after its restart")
    return "; ".join(parts)
