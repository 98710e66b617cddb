"""Storage faults with a real broker process and real clients: a log disk that fills up
while producing loses no acknowledged message across a later roll and kill -9, and two brokers never share
a log directory."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pytest

from integration_tests import peers
from metaq.errors import MetaqError
from metaq.testing.broker import BrokerCluster

SEGMENT_BYTES = 1 << 20
DISK_SIZE = 3 << 20
FILLER_BYTES = 1_300_000
"""Leaves ~1.7 MB for the log: full part-way through the second segment."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs mounted for this test (requires root / CAP_SYS_ADMIN)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill a log disk: {result.stderr.strip() or result.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


class Producer:
    """confluent-kafka with acks=1 and no retries: every delivery report says acknowledged or failed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: dict[int, bytes] = {}
        self.errors: list[confluent_kafka.KafkaError] = []
        self._lock = threading.Lock()
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": 1, "retries": 0, "linger.ms": 5, "batch.size": 65536,
            "message.timeout.ms": 60000, "message.max.bytes": 1_000_000,
        })

    def _on_delivery(self, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.offset()] = msg.value()
            else:
                self.errors.append(err)

    def send(self, values: list[bytes]) -> None:
        for value in values:
            while True:
                try:
                    self._producer.produce(self.topic, value, partition=0, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            self._producer.poll(0)
        assert self._producer.flush(60) == 0

    def close(self) -> None:
        """Flush and drop the client (so it stops reconnecting once the broker is killed)."""
        self._producer.flush(60)
        del self._producer

    def storage_errors(self) -> int:
        return sum(e.code() == confluent_kafka.KafkaError.KAFKA_STORAGE_ERROR for e in self.errors)


def _values(start: int, count: int, size: int) -> list[bytes]:
    return [(b"m%09d-" % i).ljust(size, b"x") for i in range(start, start + count)]


def _read_log(bootstrap: str, topic: str, count: int) -> dict[int, bytes]:
    msgs = peers.confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, count, timeout=60)
    return {m.offset: m.value for m in msgs if m.value is not None}


def test_full_disk_then_roll_then_kill_loses_no_acknowledged_message(
    small_disk: Path, broker_cluster: BrokerCluster, make_topic: Callable[..., str]
) -> None:
    log_dir = small_disk / "logs"
    broker = broker_cluster.add(0, **{"log.dirs": log_dir, "log.segment.bytes": SEGMENT_BYTES})
    topic = make_topic("full", partitions=1)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * FILLER_BYTES)
    producer = Producer(broker.bootstrap, topic)

    # 1. Produce until the disk is full: the broker answers KAFKA_STORAGE_ERROR, and still serves reads.
    sent = 0
    while producer.storage_errors() < 50:
        assert sent < 5000, f"the disk never filled: {len(producer.acked)} acknowledged, {producer.errors[:3]}"
        producer.send(_values(sent, 200, 1000))
        sent += 200
    assert len(producer.acked) > 1000
    assert set(producer.acked) == set(range(len(producer.acked)))
    head = peers.confluent_consume(broker.bootstrap, topic, 0, 0, 5)
    assert [m.value for m in head] == [producer.acked[o] for o in range(5)]

    # 2. Free space; a large message does not fit in the active segment, so the log rolls.
    filler.unlink()
    end_before = len(producer.acked)
    producer.send([b"big".ljust(900_000, b"B")])
    producer.send(_values(sent, 50, 1000))
    assert len(producer.acked) == end_before + 51, producer.errors[-3:]
    bases = sorted(int(p.stem) for p in (log_dir / f"{topic}-0").glob("*.log"))
    assert len(bases) >= 3 and end_before in bases, bases
    producer.close()

    # 3. kill -9, restart, and read every acknowledged message back, offset by offset.
    broker.kill()
    broker.start()
    total = max(producer.acked) + 1
    stored = _read_log(broker.bootstrap, topic, total)
    lost = sorted(o for o, v in producer.acked.items() if stored.get(o) != v)
    assert not lost, f"{len(lost)} of {len(producer.acked)} acknowledged messages lost, e.g. offsets {lost[:5]}"
    assert sorted(stored) == list(range(total))
    assert "are lost" not in broker.log_path.read_text()


def test_second_broker_on_same_log_dir_refuses_to_start(
    broker_cluster: BrokerCluster, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    log_dir = tmp_path / "shared-logs"
    first = broker_cluster.add(0, **{"log.dirs": log_dir})
    topic = make_topic("locked", partitions=1)
    peers.kcat_produce(first.bootstrap, topic, 0, [("k", f"before-{i}") for i in range(10)])
    files_before = {p: p.stat().st_size for p in log_dir.rglob("*") if p.is_file()}

    with pytest.raises(MetaqError) as excinfo:
        broker_cluster.add(1, **{"log.dirs": log_dir})
    second = broker_cluster.brokers[1]
    output = second.log_path.read_text()
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert errors == [
        f"metaq broker: error: log directory {log_dir} is in use by another process"
        f" (it holds the lock on {log_dir / '.lock'})"
    ], output
    assert "Traceback" not in output
    assert "exited with 1" in str(excinfo.value)
    assert {p: p.stat().st_size for p in log_dir.rglob("*") if p.is_file()} == files_before

    # the first broker is unaffected
    peers.kcat_produce(first.bootstrap, topic, 0, [("k", f"after-{i}") for i in range(10)])
    values = [m.value for m in peers.kcat_consume(first.bootstrap, topic, 0, "beginning")]
    assert values == [f"before-{i}".encode() for i in range(10)] + [f"after-{i}".encode() for i in range(10)]
    # a crashed broker leaves no stale lock: the kernel drops it with the process
    first.kill()
    first.start()
    assert len(peers.kcat_consume(first.bootstrap, topic, 0, "beginning")) == 20
