"""The log cleaner's dirty ratio per partition, as a broker exports it on its Prometheus endpoint
(``metaq_broker_log_cleaner_dirty_ratio``, metaq/metrics/broker.py). Kafka's protocol carries no such figure, so
``metaq topics describe --metrics-url`` reads it there: the broker's own measure, from its last choice of a log
to clean (docs/compaction.md, "Metrics")."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from metaq.errors import BrokerConnectionError, ConfigError

__all__ = ["DIRTY_RATIO", "MetricsSource", "dirty_ratios", "parse_source"]

DIRTY_RATIO = "metaq_broker_log_cleaner_dirty_ratio"
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class MetricsSource:
    """A broker's metrics endpoint; ``broker_id`` None: use it for whatever partitions it reports."""

    url: str
    broker_id: int | None = None


def parse_source(text: str) -> MetricsSource:
    """``[BROKER_ID=]URL`` (``http://host:port/metrics``; the ``/metrics`` path is added when missing)."""
    broker, sep, url = text.partition("=")
    if not sep:
        broker, url = "", text
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--metrics-url {text!r}: expected [BROKER_ID=]http://host:port/metrics")
    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    try:
        return MetricsSource(url, int(broker) if broker else None)
    except ValueError:
        raise ConfigError(f"--metrics-url {text!r}: {broker!r} is not a broker id") from None


def dirty_ratios(url: str) -> dict[tuple[str, int], float]:
    """The dirty ratio of each compacted log the broker at ``url`` holds (leader or follower copy)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError) as e:
        raise BrokerConnectionError(f"cannot read broker metrics from {url}: {e}") from e
    found: dict[tuple[str, int], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != DIRTY_RATIO:
            continue
        for sample in family.samples:
            found[(sample.labels["topic"], int(sample.labels["partition"]))] = float(sample.value)
    return found
