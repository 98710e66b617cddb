"""A windowed rate as Kafka's quota sensors keep it, and the throttle time of a rate over its bound.

Kafka measures a quota with a ``Rate`` over a ``WindowedSum`` (clients' ``metrics/stats/Rate.java`` and
``SampledStat.java``): ``samples`` windows of ``window_ms`` each, a sample reset once no event touched it for
``samples * window_ms``, and a rate of (sum of the samples) / (the elapsed window, at least ``samples - 1``
full windows). Replication quotas use ``SimpleRate`` (the elapsed window is at least one window). The
throttle time is Kafka's ``QuotaUtils.throttleTime``: the delay X that brings an observed rate O over a
window W down to the bound T, ``O * W / (W + X) = T``, so ``X = (O - T) / T * W``. See docs/quotas.md.

Times are milliseconds from any monotonic clock; nothing here reads the clock (the callers pass ``now_ms``),
so the arithmetic is tested directly (tests/broker/test_quota_rate.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WindowConfig:
    """``samples`` windows of ``window_ms``: Kafka's ``quota.window.num`` (11) and ``quota.window.size.seconds``
    (1) for client quotas, ``replication.quota.window.*`` for replication quotas."""

    samples: int = 11
    window_ms: int = 1000

    @property
    def expire_ms(self) -> int:
        """A sample no event touched for this long starts over (SampledStat.purgeObsoleteSamples)."""
        return self.samples * self.window_ms


@dataclass
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0


@dataclass
class WindowedRate:
    """Sum of values per second over the last ``samples`` windows (Kafka's ``Rate``; ``simple`` for its
    ``SimpleRate``). ``samples + 1`` slots are kept, as Kafka keeps one for the window overlapping the edge."""

    config: WindowConfig = field(default_factory=WindowConfig)
    simple: bool = False
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (a negative value takes back an earlier one, as Kafka's unrecord)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_ms(now_ms) / 1000.0)

    def window_ms(self, now_ms: int) -> int:
        """The window the rate divides by (Rate.windowSize / SimpleRate.windowSize)."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        if self.simple:
            return max(elapsed, self.config.window_ms)
        full = elapsed // self.config.window_ms
        least = self.config.samples - 1
        if full < least:
            elapsed += (least - full) * self.config.window_ms
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self.config.samples + 1)
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms, now_ms))
        else:
            self._samples[self._current].reset(now_ms)
        return self._samples[self._current]

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return min(self._samples, key=lambda s: s.start_ms)

    def _purge(self, now_ms: int) -> None:
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= self.config.expire_ms:
                sample.reset(now_ms)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: the delay that brings ``observed`` down to ``bound`` over
    ``window_ms``; 0 when the rate is within the bound."""
    if observed <= bound:
        return 0
    if bound <= 0:
        return window_ms
    return int((observed - bound) / bound * window_ms + 0.5)  # Java's Math.round: halves up
