"""How metaq's clients open a connection to a broker: the one place connection options live.

Every part of metaq (consumer fetchers, producer, offsets channel, ops tools, Spark source) opens broker
connections through :meth:`ConnectionSettings.open`::

    settings = ConnectionSettings(client_id="etl", request_timeout_ms=5000)
    conn = settings.open("127.0.0.1", 9092)       # connected, API versions negotiated
    fetcher = settings.with_limits(max_response_bytes=200 << 20).open(host, port)

Security (``security.protocol``, ``ssl.*``, ``sasl.*``, a :class:`SecurityConfig`) belongs here and nowhere
else: it is the same for every connection of a client, so a caller changes per-connection limits with
:meth:`with_limits` but never sees or copies the security options::

    settings = ConnectionSettings(client_id="etl", security=consumer_config.security())
    settings.open(host, port)     # TCP, TLS handshake, ApiVersions, SaslHandshake + SaslAuthenticate
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from metaq.client.connection import BrokerConnection
from metaq.client.sasl import SaslLogin
from metaq.client.security import SECURITY_PROTOCOLS, SecurityConfig, client_ssl_context
from metaq.client.versions import DEFAULT_FALLBACK, fallback_versions
from metaq.errors import ConfigError

__all__ = ["SECURITY_PROTOCOLS", "ConnectionSettings"]

DEFAULT_MAX_RESPONSE_BYTES = 104857600


@dataclass(frozen=True)
class ConnectionSettings:
    """What every connection of one client shares; see the module docstring.

    ``client_id``, the timeouts and ``max_response_bytes`` are limits a caller may change per connection
    (:meth:`with_limits`); ``security`` may not. Building settings checks the security options and loads the
    TLS files, so a bad path is a ConfigError naming the option before any connection is tried.
    """

    client_id: str = "metaq"
    request_timeout_ms: int = 30000
    connect_timeout_ms: int = 10000
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    security: SecurityConfig = field(default_factory=SecurityConfig)
    broker_version_fallback: str = DEFAULT_FALLBACK
    """The Kafka release whose API versions a broker without ApiVersions (before 0.10.0) is taken to speak
    (librdkafka's ``broker.version.fallback``; metaq/client/versions.py)."""

    def __post_init__(self) -> None:
        self.security.check_consistent()
        if self.security.uses_ssl:
            client_ssl_context(self.security)  # fail now, naming the option, rather than on every connect
        fallback_versions(self.broker_version_fallback)  # ConfigError naming the choices
        for name in ("request_timeout_ms", "connect_timeout_ms", "max_response_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"connection setting {name} must be positive, not {getattr(self, name)}")

    def with_limits(self, *, client_id: str | None = None, request_timeout_ms: int | None = None,
                    connect_timeout_ms: int | None = None,
                    max_response_bytes: int | None = None) -> ConnectionSettings:
        """A copy with other per-connection limits and the same security options (itself when none is given)."""
        if client_id is None and request_timeout_ms is None and connect_timeout_ms is None \
                and max_response_bytes is None:
            return self
        return dataclasses.replace(
            self, client_id=self.client_id if client_id is None else client_id,
            request_timeout_ms=self.request_timeout_ms if request_timeout_ms is None else request_timeout_ms,
            connect_timeout_ms=self.connect_timeout_ms if connect_timeout_ms is None else connect_timeout_ms,
            max_response_bytes=self.max_response_bytes if max_response_bytes is None else max_response_bytes)

    @property
    def security_protocol(self) -> str:
        return self.security.security_protocol

    def new_connection(self, host: str, port: int) -> BrokerConnection:
        """An unconnected connection to ``host:port`` (callers that connect later, or never block on it)."""
        security = self.security
        sasl = None
        if security.uses_sasl:
            assert security.sasl_username is not None and security.sasl_password is not None  # checked
            sasl = SaslLogin(security.sasl_mechanism, security.sasl_username, security.sasl_password)
        return BrokerConnection(host, port, client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=self.connect_timeout_ms,
                                max_response_bytes=self.max_response_bytes,
                                ssl_context=client_ssl_context(security) if security.uses_ssl else None,
                                sasl=sasl, broker_version_fallback=self.broker_version_fallback)

    def open(self, host: str, port: int) -> BrokerConnection:
        """A connected connection to ``host:port``; raises BrokerConnectionError."""
        conn = self.new_connection(host, port)
        conn.connect()
        return conn
