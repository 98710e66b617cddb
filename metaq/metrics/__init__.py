"""Prometheus metrics for brokers and consumers, with the standard ``prometheus_client`` library.

    registry = CollectorRegistry()                     # or prometheus_client.REGISTRY (the default)
    consumer = Consumer(config, metrics_registry=registry)
    serve_metrics(9404, registry=registry)             # or set metrics.port in the config

Names and labels are listed in the README ("Metrics"). Counters are updated per fetched chunk, per request or
per commit, never per message, so that metrics cost nothing measurable on the hot paths; gauges that describe
state (lag, owned partitions, log sizes, groups) are computed when Prometheus scrapes, by collectors that read
the live objects.
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from metaq.errors import ConfigError

log = logging.getLogger(__name__)


class MetricsServer:
    """The HTTP endpoint (``/metrics``) of one registry; ``close()`` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(port: int, host: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> MetricsServer:
    """Serve ``registry`` on ``host:port`` (port 0: any free port) from a daemon thread."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise ConfigError(f"metrics.port {port} on {host!r}: cannot listen: {e.strerror or e}") from e
    thread.name = f"metaq-metrics-{server.server_address[1]}"
    log.info("metrics on http://%s:%d/metrics", host, server.server_address[1])
    return MetricsServer(server, thread)


__all__ = ["CollectorRegistry", "MetricsServer", "serve_metrics"]
