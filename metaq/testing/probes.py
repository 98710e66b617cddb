"""What watches a broker while a test attacks it: its peak memory (:class:`RssSampler`) and a well-behaved client
next to the attacker (:class:`WellBehavedClient`), both in threads of their own."""

from __future__ import annotations

import socket
import threading
import time

import confluent_kafka
import psutil

__all__ = ["RssSampler", "WellBehavedClient", "closed_by_peer"]


class RssSampler:
    """Peak resident memory of a process, sampled in a thread while an attack runs."""

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self.baseline = int(self._proc.memory_info().rss)
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, int(self._proc.memory_info().rss))
            time.sleep(0.005)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.baseline) / 1e6


class WellBehavedClient:
    """confluent-kafka producing one message and reading it back, again and again in a thread, while an attack
    runs: each round trip's latency, and any that failed (5 s limit, as the attacks' probes)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                                   "linger.ms": 0})
        self._consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe",
                                                   "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self._consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        self._topic = topic
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="well-behaved-client", daemon=True)

    def _round_trip(self, marker: bytes, limit_s: float = 5.0) -> None:
        start = time.monotonic()
        self._producer.produce(self._topic, marker, partition=0)
        if self._producer.flush(limit_s) != 0:
            raise TimeoutError(f"produce not acknowledged within {limit_s} s")
        while time.monotonic() - start < limit_s:
            msg = self._consumer.poll(0.1)
            if msg is not None and msg.error() is None and msg.value() == marker:
                self.latencies.append(time.monotonic() - start)
                return
        raise TimeoutError(f"message not fetched back within {limit_s} s")

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                self._round_trip(f"probe-{n}".encode())
            except Exception as e:  # noqa: BLE001 - every failure is recorded and asserted on
                self.failures.append(repr(e))
            time.sleep(0.05)

    def __enter__(self) -> WellBehavedClient:
        self._round_trip(b"warm-up", 60)  # connected and served before the attack starts
        self.latencies.clear()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
        self._producer.flush(5)
        del self._producer  # librdkafka's producer has no close: its threads end when it is freed

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def closed_by_peer(s: socket.socket) -> bool:
    """True once the broker has closed ``s`` (EOF or reset); False while it is still open."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.settimeout(10.0)
