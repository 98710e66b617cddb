"""The cleaner's I/O throttle (metaq/broker/log/cleaner/throttle.py) with an injected clock: Kafka's Throttler
arithmetic, checked once per interval (docs/compaction.md)."""

from __future__ import annotations

from metaq.broker.log.cleaner.throttle import UNTHROTTLED, IoThrottle


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0
        self.sleeps: list[float] = []

    def clock(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_ns += int(seconds * 1e9)


def test_sleeps_to_bring_the_rate_down_once_per_interval() -> None:
    t = FakeClock()
    throttle = IoThrottle(1000.0, check_interval_ms=300, clock_ns=t.clock, sleep=t.sleep)
    throttle.observe(500)  # within the first interval: never checked
    t.now_ns = 100_000_000
    throttle.observe(500)
    assert t.sleeps == []
    t.now_ns = 400_000_000  # 1500 bytes in 0.4 s: 3750 B/s, 1.1 s short of 1000 B/s
    throttle.observe(500)
    assert len(t.sleeps) == 1 and abs(t.sleeps[0] - 1.1) < 1e-9
    assert throttle.slept_s == t.sleeps[0]
    t.now_ns += 400_000_000  # a new period: 200 bytes in 0.4 s is under the rate
    throttle.observe(200)
    assert len(t.sleeps) == 1


def test_over_many_chunks_the_rate_holds() -> None:
    t = FakeClock()
    throttle = IoThrottle(10_000.0, check_interval_ms=300, clock_ns=t.clock, sleep=t.sleep)
    at_last_sleep = (0, 0)
    for chunk in range(1, 1001):
        sleeps = len(t.sleeps)
        throttle.observe(1000)  # 1 MB in all, 1 ms of work per chunk
        if len(t.sleeps) > sleeps:
            at_last_sleep = (chunk * 1000, t.now_ns)
        t.now_ns += 1_000_000
    assert len(t.sleeps) >= 3
    done, elapsed_ns = at_last_sleep  # the bytes after the last check are only counted at the next one
    assert abs(done / (elapsed_ns / 1e9) - 10_000) < 100


def test_unthrottled_by_default_never_sleeps() -> None:
    t = FakeClock()
    throttle = IoThrottle(UNTHROTTLED, clock_ns=t.clock, sleep=t.sleep)
    for _ in range(100):
        throttle.observe(1 << 30)
        t.now_ns += 1_000_000_000
    assert not throttle.enabled and t.sleeps == []
