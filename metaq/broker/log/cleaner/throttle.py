"""The cleaner's I/O throttle, as Kafka's ``Throttler`` (``storage/.../internals/utils/Throttler.java``, used by
``LogCleaner`` with a 300 ms check interval): every byte the cleaner threads read or write is counted, and once
per check interval, if the rate since the last check exceeds ``log.cleaner.io.max.bytes.per.second``, the thread
that notices sleeps long enough to bring the rate down to it. One throttle is shared by all cleaner threads
(the limit is theirs together, as Kafka's). The sleep releases the GIL, which is the point on metaq: the broker's
request handling runs meanwhile (docs/compaction.md, "Cost")."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["CHECK_INTERVAL_MS", "UNTHROTTLED", "IoThrottle"]

logger = logging.getLogger(__name__)

UNTHROTTLED = sys.float_info.max
"""Kafka's default ``log.cleaner.io.max.bytes.per.second`` (``Double.MaxValue``): no throttling."""

CHECK_INTERVAL_MS = 300
"""Kafka's ``LogCleaner`` creates its throttler with a 300 ms check interval."""


class IoThrottle:
    """Counts bytes and sleeps when they come faster than ``rate`` per second. ``clock_ns`` and ``sleep`` are
    injectable (tests); ``sleep`` may return early (a stopping thread's event wait)."""

    def __init__(self, rate: float, *, check_interval_ms: int = CHECK_INTERVAL_MS,
                 clock_ns: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.rate = rate
        self._interval_ns = check_interval_ms * 1_000_000
        self._clock_ns = clock_ns
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start_ns = clock_ns()
        self._observed = 0.0
        self.slept_s = 0.0
        """Total time slept (the bench reports it)."""

    @property
    def enabled(self) -> bool:
        return self.rate < UNTHROTTLED

    def observe(self, size: int) -> None:
        """``size`` bytes were read or written; sleep if the rate over the current interval is too high."""
        if not self.enabled:
            return
        with self._lock:  # the sleep happens under the lock, as Kafka's: the other threads wait their turn
            self._observed += size
            elapsed_ns = self._clock_ns() - self._period_start_ns
            if elapsed_ns <= self._interval_ns or self._observed <= 0:
                return
            if self._observed * 1e9 / elapsed_ns > self.rate:
                pause_s = self._observed / self.rate - elapsed_ns / 1e9
                if pause_s > 0:
                    logger.debug("Cleaner I/O above %.0f B/s: sleeping %.3f s", self.rate, pause_s)
                    self._sleep(pause_s)
                    self.slept_s += pause_s
            self._period_start_ns = self._clock_ns()
            self._observed = 0.0
