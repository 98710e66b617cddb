"""Metric families shared by every metaq object that reports into the same registry.

prometheus_client refuses a second family with the same name in one registry, and Prometheus rejects an
exposition that repeats a family; so each registry gets one set of families (created on first use) and one
collector per kind of live state, which reports every registered source under its labels.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Sampler = Callable[[], Iterable[tuple[str, list[str], float]]]
"""Returns (family name, label values, value) samples when Prometheus scrapes."""


class StateCollector(Collector):
    """Gauges computed at scrape time from registered samplers (one collector per registry and kind)."""

    def __init__(self, gauges: dict[str, tuple[str, list[str]]]) -> None:
        self._gauges = gauges  # name -> (help, label names)
        self._samplers: dict[int, Sampler] = {}
        self._lock = threading.Lock()
        self._next = 0

    def add(self, sampler: Sampler) -> int:
        with self._lock:
            self._next += 1
            self._samplers[self._next] = sampler
            return self._next

    def remove(self, token: int) -> None:
        with self._lock:
            self._samplers.pop(token, None)

    def describe(self) -> Iterator[Metric]:
        for name, (doc, labels) in self._gauges.items():
            yield GaugeMetricFamily(name, doc, labels=labels)

    def collect(self) -> Iterator[Metric]:
        families = {name: GaugeMetricFamily(name, doc, labels=labels) for name, (doc, labels) in self._gauges.items()}
        with self._lock:
            samplers = list(self._samplers.values())
        for sampler in samplers:
            for name, labels, value in sampler():
                families[name].add_metric(labels, value)
        yield from families.values()


_per_registry: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, object]] = weakref.WeakKeyDictionary()
_F = TypeVar("_F")
_lock = threading.Lock()


def shared(registry: CollectorRegistry, kind: str, build: Callable[[CollectorRegistry], _F]) -> _F:
    """The ``kind`` families of ``registry``, built (and registered) by ``build`` the first time."""
    with _lock:
        kinds = _per_registry.setdefault(registry, {})
        if kind not in kinds:
            kinds[kind] = build(registry)
        return cast(_F, kinds[kind])  # what build made for this kind (each kind has one build)
