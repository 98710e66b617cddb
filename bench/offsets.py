"""Offset commits through the offsets channel versus ZooKeeper, and how fast a standard-client group settles.

    python -m bench.offsets [--commits 300] [--big-commits 40] [--groups 5]   # own ZooKeeper and broker

Commit rows: one committer, commits back to back, every commit moving every offset (so nothing is skipped as
unchanged). ``zookeeper`` is ZooKeeperOffsetStore (one version-checked multi-op); ``kafka`` is what
``offsets.storage=kafka`` costs, KafkaOffsetStore (that same ZooKeeper write, the fence, then OffsetCommit
v2 to the coordinator); ``channel only`` is the OffsetCommit round trip alone, over the same channel.
Latency is per commit call (median and p99); offsets/s = commits/s x partitions per commit.

Group rows: three confluent-kafka consumers (one process) subscribe to a 12-partition topic at once (a fresh
group each time, its coordinator partition loaded beforehand); the time from the first subscribe until every
partition is assigned and the three assignments are disjoint, median and max of ``--groups`` runs, with
librdkafka's default heartbeat (3 s) and with 300 ms, on a broker with group.initial.rebalance.delay.ms=0
(the default) and then 500. With no delay the first member to arrive usually gets a generation of its own,
and the others' join then waits until it heartbeats (one heartbeat interval); a short delay puts the first
joins in one generation.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.kafka_offsets import KafkaOffsetStore
from metaq.consumer.offset_store import OffsetStore, TopicPartition, ZooKeeperOffsetStore
from metaq.testing.broker import request, topic_leaders
from metaq.testing.wait import wait_until
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout

GROUP_PARTITIONS = 12
GROUP_MEMBERS = 3


@dataclass
class Row:
    what: str
    detail: str
    count: int
    median_ms: float
    p99_ms: float
    per_s: float  # commits/s, or 0 for group rows

    def cells(self) -> list[str]:
        return [self.what, self.detail, f"{self.count:,}", f"{self.median_ms:.2f}", f"{self.p99_ms:.2f}",
                f"{self.per_s:,.0f}" if self.per_s else "-"]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(fn: Callable[[int], object], n: int) -> tuple[list[float], float]:
    """Per-call latencies (ms) of fn(1..n) and the wall time."""
    fn(0)  # warm-up: connections, coordinator lookup, partition load
    latencies = []
    start = time.perf_counter()
    for i in range(1, n + 1):
        t0 = time.perf_counter()
        fn(i)
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies, time.perf_counter() - start


def _row(what: str, partitions: int, latencies: list[float], seconds: float) -> Row:
    return Row(what, f"{partitions} partition(s)/commit", len(latencies), statistics.median(latencies),
               _percentile(latencies, 0.99), len(latencies) / seconds)


def _store_row(what: str, store: OffsetStore, tps: list[TopicPartition], n: int) -> Row:
    store.take_ownership(tps)

    def commit(i: int) -> None:
        result = store.commit(dict.fromkeys(tps, i + 1))
        assert len(result.committed) == len(tps), result

    return _row(what, len(tps), *_timed(commit, n))


def _commit_rows(zk: str, layout: ZkLayout, commits: int, big_commits: int) -> list[Row]:
    rows = []
    for partitions, n in ((1, commits), (1000, big_commits)):
        tps = [("bench-offsets", p) for p in range(partitions)]
        config = ConsumerConfig.from_properties({"group.id": f"bench-k{partitions}", "zookeeper.connect": zk,
                                                 "offsets.storage": "kafka"})
        zk_store = ZooKeeperOffsetStore(layout, f"bench-z{partitions}")
        kafka_store = KafkaOffsetStore(layout, config)
        rows.append(_store_row("zookeeper", zk_store, tps, n))
        rows.append(_store_row("kafka (zk fence + channel)", kafka_store, tps, n))
        assert not kafka_store.unsynced()

        def channel_only(i: int, tps: list[TopicPartition] = tps, store: KafkaOffsetStore = kafka_store) -> None:
            store._commit_kafka(dict.fromkeys(tps, 10_000 + i))

        rows.append(_row("channel only (OffsetCommit v2)", partitions, *_timed(channel_only, n)))
        zk_store.close()
        kafka_store.close()
    return rows


def _stable_once(bootstrap: str, topic: str, group: str, conf: dict[str, object]) -> float:
    """Seconds from the first subscribe until the three members hold disjoint, complete assignments."""
    assigned: dict[int, set[int]] = {}

    def on_assign(i: int) -> Callable[[object, list[confluent_kafka.TopicPartition]], None]:
        def cb(_: object, parts: list[confluent_kafka.TopicPartition]) -> None:
            assigned[i] = {p.partition for p in parts}
        return cb

    def on_revoke(i: int) -> Callable[[object, list[confluent_kafka.TopicPartition]], None]:
        return lambda _, parts: assigned.pop(i, None)

    consumers = [confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
                 for _ in range(GROUP_MEMBERS)]
    try:
        start = time.perf_counter()
        for i, c in enumerate(consumers):
            c.subscribe([topic], on_assign=on_assign(i), on_revoke=on_revoke(i))
        deadline = start + 60
        while time.perf_counter() < deadline:
            for c in consumers:
                c.poll(0.005)
            if len(assigned) == GROUP_MEMBERS and all(assigned.values()):
                parts = sorted(p for a in assigned.values() for p in a)
                if parts == list(range(GROUP_PARTITIONS)):
                    return time.perf_counter() - start
        raise RuntimeError(f"group {group} not stable within 60 s: {assigned}")
    finally:
        for c in consumers:
            c.close()


def _warm(bootstrap: str, group: str) -> None:
    """Load the group's __consumer_offsets partition first, so that no run waits out a
    COORDINATOR_LOAD_IN_PROGRESS (librdkafka backs off for about a second on it)."""
    def loaded() -> bool:
        found = request(bootstrap, FindCoordinatorRequest[1](key=group, key_type=0), FindCoordinatorResponse, 1)
        if found.error_code:
            return False  # the first lookup creates __consumer_offsets
        req = OffsetFetchRequest[3](group_id=group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="bench-group", partition_indexes=[0])])
        return request(bootstrap, req, OffsetFetchResponse, 3).error_code == 0
    wait_until(loaded, 15, f"the coordinator of {group} to load")


def _group_rows(bootstrap: str, layout: ZkLayout, groups: int, settings: list[tuple[str, dict[str, object]]],
                prefix: str) -> list[Row]:
    if "bench-group" not in layout.topics():
        create_topic(layout, "bench-group", GROUP_PARTITIONS)
    wait_until(lambda: len(topic_leaders(bootstrap, "bench-group")) == GROUP_PARTITIONS, 10, "topic")
    rows = []
    for label, conf in settings:
        names = [f"{prefix}-{len(rows)}-{i}" for i in range(groups)]
        for name in names:
            _warm(bootstrap, name)
        times = [_stable_once(bootstrap, "bench-group", name, conf) * 1000 for name in names]
        rows.append(Row(f"{GROUP_MEMBERS} confluent-kafka members stable", label, groups, statistics.median(times),
                        max(times), 0.0))
    return rows


@contextmanager
def _environment() -> Iterator[tuple[str, ZkLayout, Path]]:
    work = Path(tempfile.mkdtemp(prefix="metaq-bench-offsets-"))
    external = os.environ.get("ZOOKEEPER_CONNECT")
    zk_server = None if external else ZooKeeperServer(data_dir=work / "zk", force_sync=False).start()
    zk = f"{external or zk_server.connect_string}/metaq-bench-offsets-{os.getpid()}"  # type: ignore[union-attr]
    client = connect(zk)
    try:
        yield zk, ZkLayout(client), work
    finally:
        client.stop()
        client.close()
        if zk_server:
            zk_server.stop()
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _broker(zk: str, work: Path, broker_id: int, **properties: object) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(zk, broker_id, work, log_level="WARNING",
                           properties={"offsets.topic.num.partitions": 10, **properties}).start()
    try:
        yield broker
    finally:
        broker.stop()


def run(commits: int = 300, big_commits: int = 40, groups: int = 5) -> list[Row]:
    rows: list[Row] = []

    def add(new: list[Row]) -> None:
        for row in new:
            print("  " + " | ".join(row.cells()), flush=True)
        rows.extend(new)

    with _environment() as (zk, layout, work):
        with _broker(zk, work, 0) as broker:
            add(_commit_rows(zk, layout, commits, big_commits))
            add(_group_rows(broker.bootstrap, layout, groups, [
                ("librdkafka defaults (heartbeat 3 s)", {}),
                ("heartbeat.interval.ms=300", {"heartbeat.interval.ms": 300})], "plain"))
        # the same broker data restarted with an initial rebalance delay: the first joins share a generation
        with _broker(zk, work, 0, **{"group.initial.rebalance.delay.ms": 500}) as broker:
            add(_group_rows(broker.bootstrap, layout, groups, [
                ("librdkafka defaults, broker group.initial.rebalance.delay.ms=500", {})], "delayed"))
    return rows


def print_table(rows: list[Row]) -> None:
    header = ["what", "detail", "n", "median ms", "p99/max ms", "commits/s"]
    table = [header] + [r.cells() for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print("  ".join(c.rjust(w) if j > 1 else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300, help="commits of 1 partition per store")
    parser.add_argument("--big-commits", type=int, default=40, help="commits of 1,000 partitions per store")
    parser.add_argument("--groups", type=int, default=5, help="group formations per setting")
    args = parser.parse_args()
    rows = run(args.commits, args.big_commits, args.groups)
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
