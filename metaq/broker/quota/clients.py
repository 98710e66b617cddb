"""Client quotas of one type (produce bytes, fetch bytes, request time): the configured quotas, one windowed
rate per :class:`QuotaKey`, and the throttle time of a request that takes its rate over the bound.

Kafka's ``ClientQuotaManager`` records a value and then checks the rate (the request that crosses the bound
is itself throttled, ``Sensor.record(value, now, checkQuotas=true)``); ``ClientRequestQuotaManager`` caps
the throttle time at one quota window. Rates of keys not used for ``INACTIVE_EXPIRY_MS`` are dropped, as
Kafka expires its quota sensors after an hour. Used on the event loop only; the configured quotas are
replaced whole (from ZooKeeper, by metaq/broker/quota/config_store.py's watcher), never edited in place.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from metaq.broker.quota.entities import QuotaKey, resolve
from metaq.broker.quota.rate import WindowConfig, WindowedRate, throttle_time_ms
from zk_layout.quotas import ClientQuotaEntity

log = logging.getLogger(__name__)

INACTIVE_EXPIRY_MS = 3600 * 1000  # Kafka's InactiveSensorExpirationTimeSeconds


@dataclass
class _Tracked:
    rate: WindowedRate
    bound: float
    used_ms: int
    throttle_ms_total: int = 0


@dataclass
class ClientQuotas:
    """One quota type (``quota_key``: ``producer_byte_rate``, ``consumer_byte_rate`` or ``request_percentage``)."""

    quota_key: str
    window: WindowConfig = field(default_factory=WindowConfig)
    max_throttle_ms: int | None = None  # the request quota's cap (one window); byte quotas are not capped
    _quotas: Mapping[ClientQuotaEntity, Mapping[str, float]] = field(default_factory=dict)
    _rates: dict[QuotaKey, _Tracked] = field(default_factory=dict)
    _enabled: bool = False

    def update(self, quotas: Mapping[ClientQuotaEntity, Mapping[str, float]]) -> None:
        """Replace the configured quotas (every entity's values); rates already counted are kept, their
        bounds follow the new values on the next request."""
        self._quotas = quotas
        self._enabled = any(self.quota_key in values for values in quotas.values())

    @property
    def enabled(self) -> bool:
        """Whether any entity has a quota of this type (otherwise nothing is counted, as in Kafka)."""
        return self._enabled

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Count ``value`` for the client and answer the throttle time in ms (0: within its quota)."""
        tracked = self._tracked(user, client_id, now_ms)
        if tracked is None:
            return 0
        tracked.rate.record(value, now_ms)
        observed = tracked.rate.measure(now_ms)
        throttle = throttle_time_ms(observed, tracked.bound, tracked.rate.window_ms(now_ms))
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        tracked.throttle_ms_total += throttle
        return throttle

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back ``value`` (a throttled fetch answers no records, so its bytes are not counted)."""
        tracked = self._tracked(user, client_id, now_ms)
        if tracked is not None:
            tracked.rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most a client may take in one quota window without being throttled (Kafka's
        ``getMaxValueInQuotaWindow``: bound * (samples - 1) * window seconds); None without a quota."""
        bound = resolve(self._quotas, self.quota_key, user, client_id).bound
        if bound is None:
            return None
        return bound * (self.window.samples - 1) * self.window.window_ms / 1000.0

    def _tracked(self, user: str, client_id: str, now_ms: int) -> _Tracked | None:
        if not self._enabled:  # the common case: no quota of this type anywhere
            return None
        resolved = resolve(self._quotas, self.quota_key, user, client_id)
        if resolved.bound is None:
            return None
        tracked = self._rates.get(resolved.key)
        if tracked is None:
            self._expire(now_ms)
            tracked = self._rates[resolved.key] = _Tracked(WindowedRate(self.window), resolved.bound, now_ms)
        tracked.bound = resolved.bound
        tracked.used_ms = now_ms
        return tracked

    def _expire(self, now_ms: int) -> None:
        stale = [key for key, t in self._rates.items() if now_ms - t.used_ms >= INACTIVE_EXPIRY_MS]
        for key in stale:
            del self._rates[key]
