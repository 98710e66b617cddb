"""The broker's cost of the legacy wire: CPU per million messages of Produce v2 (message sets v1, up-converted
to record batch v2) next to Produce v3 (v2 batches, stored as they come), of Fetch v3 (down-converted to
magic 1) next to Fetch v4 (file slices), plain and gzip, and the broker's peak RSS growth while it answers one
Fetch v3 of about 100 MB (converted lazily, 128 KiB at a time) next to one Fetch v4 of the same bytes.

    python -m bench.legacy [--messages 200000] [--fetch-mb 100]

The requests are encoded before the clock starts and sent one at a time on one connection, so the client
costs little; the broker's CPU (user + system, from /proc) is what is reported, scaled to 1M messages.
Values are 100 bytes, keys null, 1,000 messages per produced set / batch. The peak RSS is the broker's
VmHWM (Linux) before and after the fetch; the fetch with the larger growth runs last.
"""

from __future__ import annotations

import argparse
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from bench.environment import Environment, environment
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.protocol.builder import BatchBuilder
from metaq.testing.broker import call, topic_leaders
from metaq.testing.wait import wait_until

PER_REQUEST = 1000
VALUE = b"v" * 100
TS = 1_700_000_000_000


def legacy_set(codec: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=codec, batch_size=1 << 30)
    for i in range(PER_REQUEST):
        builder.append(i, TS + i, None, VALUE)
    return bytes(builder.build())


def v2_batch(codec: str) -> bytes:
    builder = BatchBuilder(1 << 30, codec)
    for i in range(PER_REQUEST):
        builder.append(TS + i, None, VALUE)
    return builder.build()


def produce_request(version: int, topic: str, records: bytes) -> ProduceRequest:
    data = ProduceRequest.TopicProduceData
    return ProduceRequest[version](transactional_id=None, acks=1, timeout_ms=30000, topic_data=[data(
        name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)])])


def fetch_request(version: int, topic: str, offset: int, max_bytes: int) -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)
    return FetchRequest[version](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])])


def broker_cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/<pid>/status")


def timed(pid: int, job: Callable[..., int], *args: Any) -> tuple[float, int]:
    """(broker CPU seconds, messages) of ``job(*args)``."""
    before = broker_cpu(pid)
    count = job(*args)
    return broker_cpu(pid) - before, count


def produce_all(sock: socket.socket, version: int, topic: str, records: bytes, requests: int) -> int:
    for i in range(requests):
        response = call(sock, produce_request(version, topic, records), ProduceResponse, version, i + 1)
        error = response.responses[0].partition_responses[0].error_code
        if error:
            raise RuntimeError(f"Produce v{version} to {topic}: error {error}")
    return requests * PER_REQUEST


def fetch_all(sock: socket.socket, version: int, topic: str, end: int, max_bytes: int = 1 << 20) -> int:
    """Fetch ``topic`` from 0 to ``end``; returns the messages read (decoded as the consumer does)."""
    from metaq.protocol.records import decode_records

    offset, n, correlation = 0, 0, 1
    while offset < end:
        response = call(sock, fetch_request(version, topic, offset, max_bytes), FetchResponse, version, correlation)
        correlation += 1
        part = response.responses[0].partitions[0]
        if part.error_code:
            raise RuntimeError(f"Fetch v{version} of {topic}: error {part.error_code}")
        result = decode_records(part.records or b"", offset)
        if result.next_offset is None:
            raise RuntimeError(f"Fetch v{version} of {topic} at {offset}: no complete message")
        n += len(result.records)
        offset = result.records[-1][0] + 1 if result.records else result.next_offset
    return n


def topic(env: Environment, name: str) -> str:
    create_topic(env.layout, name, 1)
    wait_until(lambda: len(topic_leaders(env.bootstrap, name)) == 1, 20, f"topic {name}")
    return name


def run(messages: int, fetch_mb: int) -> None:
    requests = max(1, messages // PER_REQUEST)
    rows: list[tuple[str, float]] = []
    def configure(zk: str, broker: BrokerProcess, work: Path) -> None:
        broker.properties["fetch.max.bytes"] = str(2 * (fetch_mb << 20))  # one answer of fetch_mb

    with environment(configure) as env:
        pid = env.broker.pid
        assert pid is not None
        host, port = env.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=120) as sock:
            for codec, name in ((0, "none"), (1, "gzip")):
                old, new = topic(env, f"legacy-{name}"), topic(env, f"v2-{name}")
                cpu, n = timed(pid, produce_all, sock, 2, old, legacy_set(codec), requests)
                rows.append((f"Produce v2 (message set v1, {name}) -> up-converted", cpu / n * 1e6))
                cpu, n = timed(pid, produce_all, sock, 3, new, v2_batch(name), requests)
                rows.append((f"Produce v3 (record batch v2, {name})", cpu / n * 1e6))
                cpu, n = timed(pid, fetch_all, sock, 3, new, requests * PER_REQUEST)
                rows.append((f"Fetch v3 (down-converted to magic 1, {name})", cpu / n * 1e6))
                cpu, n = timed(pid, fetch_all, sock, 4, new, requests * PER_REQUEST)
                rows.append((f"Fetch v4 (as stored, {name})", cpu / n * 1e6))
            big = topic(env, "legacy-big")
            value = b"x" * 1000
            builder = BatchBuilder(1 << 30)
            for i in range(1000):
                builder.append(TS + i, None, value)
            batch = builder.build()
            produce_all(sock, 3, big, batch, fetch_mb * 1000 * 1000 // len(batch) + 1)
            rss: list[tuple[str, float]] = []
            for version in (4, 3):
                before = peak_rss_mb(pid)
                t0 = time.monotonic()
                response = call(sock, fetch_request(version, big, 0, fetch_mb << 20), FetchResponse, version, 99)
                got = len(response.responses[0].partitions[0].records or b"")
                rss.append((f"Fetch v{version}, one answer of {got / 1e6:.0f} MB "
                            f"({time.monotonic() - t0:.1f} s)", peak_rss_mb(pid) - before))
    width = max(len(label) for label, _ in rows + rss)
    print(f"{'broker CPU seconds per 1M 100-byte messages'.ljust(width)}")
    for label, value in rows:
        print(f"  {label.ljust(width)}  {value:8.2f}")
    print("broker peak RSS growth (VmHWM) during one large fetch")
    for label, value in rss:
        print(f"  {label.ljust(width)}  {value:8.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--fetch-mb", type=int, default=100)
    args = parser.parse_args()
    run(args.messages, args.fetch_mb)


if __name__ == "__main__":
    main()
