"""``listeners``, ``advertised.listeners`` and ``listener.security.protocol.map`` as Kafka reads them.

    listeners=PLAINTEXT://0.0.0.0:9092,SSL://:9093,CLIENT://:9094
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CLIENT:SASL_SSL

A listener's name is either a security protocol (the default map maps each to itself) or a custom name
that the map must give a protocol. Names and ports are unique; an empty host binds every address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from metaq.errors import ConfigError
from zk_layout import parse_endpoint

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: str
    host: str  # "" binds every address
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    def endpoint(self, host: str | None = None, port: int | None = None) -> str:
        """``NAME://host:port`` as registered in ZooKeeper (IPv6 hosts in brackets)."""
        h = self.host if host is None else host
        p = self.port if port is None else port
        return f"{self.name}://[{h}]:{p}" if ":" in h else f"{self.name}://{h}:{p}"


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...``; empty: Kafka's default (each protocol as its own listener name)."""
    if not text.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    result: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"config 'listener.security.protocol.map': {entry!r} must be NAME:PROTOCOL with"
                              f" PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in result:
            raise ConfigError(f"config 'listener.security.protocol.map': listener {name} is mapped twice")
        result[name] = protocol
    return result


def parse_listeners(key: str, text: str, protocol_map: Mapping[str, str]) -> tuple[Listener, ...]:
    """Every ``NAME://host:port`` of ``text``; ConfigError naming ``key`` and the entry at fault."""
    listeners: list[Listener] = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        parsed = parse_endpoint(entry)
        if parsed is None or parsed.port > 65535:
            raise ConfigError(f"config {key!r}: {entry!r} is not NAME://host:port")
        name, host, port = parsed.listener.upper(), parsed.host, parsed.port
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(f"config {key!r}: listener {name} has no security protocol in"
                              " 'listener.security.protocol.map'")
        if any(other.name == name for other in listeners):
            raise ConfigError(f"config {key!r}: listener {name} is given twice")
        if port and any(other.port == port for other in listeners):
            raise ConfigError(f"config {key!r}: port {port} is used by two listeners")
        listeners.append(Listener(name, protocol, host, port))
    if not listeners:
        raise ConfigError(f"config {key!r}: at least one listener is required")
    return tuple(listeners)


def advertised_endpoints(listeners: Sequence[Listener], advertised: Sequence[Listener] | None,
                         bound: Mapping[str, int]) -> tuple[Listener, ...]:
    """What to register: ``advertised.listeners`` when given (as in Kafka, only those), else every listener
    with the port actually bound (for ``port 0``) and a wildcard host replaced by 127.0.0.1."""
    if advertised:
        unknown = sorted({a.name for a in advertised} - {listener.name for listener in listeners})
        if unknown:
            raise ConfigError(f"config 'advertised.listeners': {', '.join(unknown)} not in 'listeners'")
        return tuple(advertised)
    result = []
    for listener in listeners:
        host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        result.append(Listener(listener.name, listener.protocol, host, bound.get(listener.name, listener.port)))
    return tuple(result)
