"""Crash safety: SIGKILL the broker under load; every acknowledged message survives, and a torn tail
and a corrupted index found at restart are repaired."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import confluent_kafka

from integration_tests import peers
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until


class LoadProducer(threading.Thread):
    """confluent-kafka producing without pause; records every acknowledged (partition, offset) -> value."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="load-producer", daemon=True)
        self.acked: dict[tuple[int, int], bytes] = {}
        self.stop_event = threading.Event()
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "linger.ms": 2, "acks": 1, "message.timeout.ms": 60000,
            "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 200,
        })

    def _on_delivery(self, err: object, msg: confluent_kafka.Message) -> None:
        if err is None:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def run(self) -> None:
        seq = 0
        while not self.stop_event.is_set():
            try:
                self.producer.produce("crash", b"v%08d" % seq, partition=seq % 3, on_delivery=self._on_delivery)
                seq += 1
            except BufferError:
                pass
            self.producer.poll(0 if seq % 100 else 0.001)
        self.producer.flush(60)


def _read_all(bootstrap: str, topic: str, partition: int) -> dict[int, bytes]:
    msgs = peers.kcat_consume(bootstrap, topic, partition, "beginning", timeout=60)
    return {m.offset: m.value for m in msgs}


def _check_acked(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> dict[int, dict[int, bytes]]:
    logs = {p: _read_all(bootstrap, "crash", p) for p in range(3)}
    missing = [(p, o) for (p, o), v in acked.items() if logs[p].get(o) != v]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    for p, log in logs.items():
        assert sorted(log) == list(range(len(log))), f"partition {p} offsets are not dense"
    return logs


def test_sigkill_under_load_loses_no_acknowledged_message(broker, make_topic) -> None:
    make_topic("crash", partitions=3)
    load = LoadProducer(broker.bootstrap, "crash")
    load.start()
    wait_until(lambda: len(load.acked) > 2000, 30, "acknowledged messages before the crash")
    broker.kill()
    time.sleep(0.5)
    broker.start()
    acked_before_restart = len(load.acked)
    wait_until(lambda: len(load.acked) > acked_before_restart + 2000, 60, "producing after restart")
    load.stop_event.set()
    load.join(90)
    _check_acked(broker.bootstrap, load.acked)


def _segment_files(data_dir: Path, partition: int) -> tuple[Path, Path]:
    logs = sorted((data_dir / "logs-0" / f"crash-{partition}").glob("*.log"))
    active = logs[-1]
    return active, active.with_suffix(".index")


def test_torn_tail_and_corrupt_index_repaired_on_restart(broker, make_topic) -> None:
    make_topic("crash", partitions=3)
    acked: dict[tuple[int, int], bytes] = {}
    for p in range(3):
        items = [(b"k", b"v%d-%d" % (p, i), 1_700_000_000_000 + i) for i in range(3000)]
        for m in peers.confluent_produce(broker.bootstrap, "crash", p, items):
            acked[(m.partition, m.offset)] = m.value
    broker.kill()
    rng = random.Random(7)
    log0, index0 = _segment_files(broker.data_dir, 0)
    with open(log0, "ab") as f:  # a torn append: random bytes after the last whole batch
        f.write(bytes(rng.randrange(256) for _ in range(777)))
    log1, index1 = _segment_files(broker.data_dir, 1)
    index1.write_bytes(bytes(rng.randrange(256) for _ in range(203)))  # junk index, not a multiple of 8
    broker.start()
    assert topic_leaders(broker.bootstrap, "crash") == {0: 0, 1: 0, 2: 0}
    logs = _check_acked(broker.bootstrap, acked)
    assert all(len(log) == 3000 for log in logs.values())
    # appends continue at the next offset after the valid prefix
    more = peers.confluent_produce(broker.bootstrap, "crash", 0, [(b"k", b"after", 1_700_000_100_000)])
    assert more[0].offset == 3000
    assert peers.confluent_consume(broker.bootstrap, "crash", 1, 1234, 1)[0].value == b"v1-1234"
