"""``metrics.enabled=false``: a stand-in whose methods do nothing, so the hot paths pay one empty call and
nothing is registered in any registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from metaq.errors import ConfigError

T = TypeVar("T")


def _nothing(*args: object, **kwargs: object) -> None:
    return None


class NoMetrics:
    """Has every public method of ``kind`` (ConsumerMetrics, BrokerMetrics), each doing nothing; a name that
    ``kind`` lacks is still an AttributeError, so a typo does not pass silently."""

    def __init__(self, kind: type) -> None:
        self._kind = kind

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_") or not callable(getattr(self._kind, name, None)):
            raise AttributeError(f"{self._kind.__name__} has no method {name!r}")
        setattr(self, name, _nothing)  # found once; later calls are a plain attribute lookup
        return _nothing


def disabled(kind: type[T]) -> T:
    """A do-nothing ``kind`` (metaq.metrics.consumer.ConsumerMetrics or metaq.metrics.broker.BrokerMetrics)."""
    return cast(T, NoMetrics(kind))


def check_metrics(enabled: bool, port: int | None) -> None:
    """A metrics endpoint with metrics off would serve nothing: refuse the combination."""
    if not enabled and port is not None:
        raise ConfigError(f"config 'metrics.port': {port} is set but 'metrics.enabled' is false (remove one)")
