"""Codecs of the broker registrations, ``/brokers/ids/<id>``, and of the listener endpoints they hold.

Kafka writes v1..v5 of the registration; MetaQ wrote ``meta://host:port``. See :mod:`zk_layout._codec` for how
decoders fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, NamedTuple, Self

from zk_layout._codec import _dumps, _Fields, _Node, _parse_int_text, now_ms
from zk_layout.paths import INT32_MAX

BROKER_REGISTRATION_VERSION: Final = 5
# Broker ids, partitions, replicas, leaders and epochs are int32 on the Kafka wire (INT32_MAX): a node
# holding a larger one cannot be served to any client, so the decoders refuse it (no Metadata would encode).
MAX_PORT: Final = 65535
_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENDPOINT = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>[0-9]{1,5})")
_META_URI = re.compile(r"meta://(?P<host>\[[^\]]+\]|[^:/\[\]]+):(?P<port>[0-9]{1,5})")


def decode_broker_id(node_path: str, name: str) -> int:
    """The broker id a ``/brokers/ids`` child name stands for: decimal digits, 0..2^31-1 (Kafka's int32);
    MalformedNodeError naming the node otherwise."""
    node = _Node(node_path, None)
    broker_id = _parse_int_text(node, name, "the broker id (the node's name)", signed=False)
    if broker_id > INT32_MAX:
        node.fail(f"broker id {broker_id} does not fit a Kafka int32 (0..{INT32_MAX}); no client could be told "
                  "about it")
    return broker_id


class ParsedEndpoint(NamedTuple):
    """One ``NAME://host:port`` of a registration's ``endpoints`` or a broker's ``listeners``."""

    listener: str
    host: str
    port: int


def parse_endpoint(endpoint: str) -> ParsedEndpoint | None:
    """``"PLAINTEXT://127.0.0.1:9092"`` -> ``ParsedEndpoint("PLAINTEXT", "127.0.0.1", 9092)``; IPv6 hosts
    lose their brackets. None if it is not of that form."""
    match = _ENDPOINT.fullmatch(endpoint)
    if match is None:
        return None
    host = match["host"]
    if host.startswith("["):
        host = host[1:-1]
    return ParsedEndpoint(match["name"], host, int(match["port"]))


def _format_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class BrokerInfo:
    """A broker registration, ``/brokers/ids/<id>`` (ephemeral).

    ``host``/``port`` are the first PLAINTEXT endpoint (None/-1 without one), what 0.8-era readers use;
    newer readers use ``endpoints``. ``version`` is the version the node was read from (0 for MetaQ's
    ``meta://host:port``); :meth:`encode` writes v5 unless told otherwise.
    """

    id: int
    host: str | None
    port: int
    endpoints: tuple[str, ...]
    timestamp_ms: int
    jmx_port: int = -1
    rack: str | None = None
    version: int = BROKER_REGISTRATION_VERSION
    security_protocol_map: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        if not self.security_protocol_map:  # derived, so that a decoded node equals what was encoded
            names = [parsed[0] for parsed in map(parse_endpoint, self.endpoints) if parsed is not None]
            derived = {name: (name if name in _SECURITY_PROTOCOLS else "PLAINTEXT") for name in names}
            object.__setattr__(self, "security_protocol_map", derived)

    @classmethod
    def plaintext(
        cls,
        broker_id: int,
        host: str,
        port: int,
        *,
        timestamp_ms: int | None = None,
        jmx_port: int = -1,
        rack: str | None = None,
    ) -> Self:
        """A broker with one PLAINTEXT listener, registered now."""
        return cls(
            id=broker_id,
            host=host,
            port=port,
            endpoints=(f"PLAINTEXT://{_format_host_port(host, port)}",),
            timestamp_ms=now_ms() if timestamp_ms is None else timestamp_ms,
            jmx_port=jmx_port,
            rack=rack,
        )

    def address(self, listener: str = "PLAINTEXT") -> tuple[str, int] | None:
        """(host, port) of the named listener, falling back to ``host``/``port`` for PLAINTEXT."""
        for endpoint in self.endpoints:
            parsed = parse_endpoint(endpoint)
            if parsed is not None and parsed[0] == listener:
                return parsed[1], parsed[2]
        if listener == "PLAINTEXT" and self.host is not None and self.port >= 0:
            return self.host, self.port
        return None

    def encode(self, version: int = BROKER_REGISTRATION_VERSION) -> bytes:
        """Kafka's JSON. Keys are in the order a Kafka 2.8+ broker happens to write them, so that the v5
        node of a single PLAINTEXT broker is byte-identical to Kafka's."""
        if not 1 <= version <= BROKER_REGISTRATION_VERSION:
            raise ValueError(f"broker registration version must be 1..5, got {version}")
        obj: dict[str, object] = {}
        if version >= 5:
            obj["features"] = {}
        if version >= 4:
            obj["listener_security_protocol_map"] = dict(self.security_protocol_map) or {"PLAINTEXT": "PLAINTEXT"}
        if version >= 2:
            obj["endpoints"] = list(self.endpoints)
        if version >= 3 and self.rack is not None:
            obj["rack"] = self.rack
        obj["jmx_port"] = self.jmx_port
        obj["port"] = self.port
        obj["host"] = self.host
        obj["version"] = version
        obj["timestamp"] = str(self.timestamp_ms)
        return _dumps(obj)

    @classmethod
    def decode(cls, path: str, raw: bytes | None, *, broker_id: int | None = None) -> Self:
        """Decode v1..v5 JSON or MetaQ's ``meta://host:port``. The id comes from ``broker_id`` or else from
        the last segment of ``path``."""
        node = _Node(path, raw)
        if broker_id is None:
            broker_id = decode_broker_id(path, path.rstrip("/").rpartition("/")[2])
        elif not 0 <= broker_id <= INT32_MAX:
            node.fail(f"broker id {broker_id} does not fit a Kafka int32 (0..{INT32_MAX})")
        text = node.text()
        if text.startswith("meta://"):
            return cls._decode_meta(node, broker_id, text)
        fields = _Fields(node, node.json_object())
        endpoints = fields.value("endpoints", [])
        if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
            node.fail("'endpoints' must be a list of strings")
        protocol_map = fields.object("listener_security_protocol_map", {})
        if not all(isinstance(v, str) for v in protocol_map.values()):
            node.fail("'listener_security_protocol_map' values must be strings")
        return cls(
            id=broker_id,
            host=fields.str("host", None, nullable=True),
            port=fields.int("port", -1, minimum=-1, maximum=MAX_PORT),
            endpoints=tuple(endpoints),
            timestamp_ms=fields.timestamp(),
            jmx_port=fields.int("jmx_port", -1),
            rack=fields.str("rack", None, nullable=True),
            version=fields.int("version", minimum=1),
            security_protocol_map={k: str(v) for k, v in protocol_map.items()},  # all strings, checked above
        )

    @classmethod
    def _decode_meta(cls, node: _Node, broker_id: int, text: str) -> Self:
        match = _META_URI.fullmatch(text.strip())
        if match is None:
            node.fail("expected meta://host:port")
        host = match["host"].strip("[]")
        if int(match["port"]) > MAX_PORT:
            node.fail(f"port {match['port']} is above {MAX_PORT}")
        return cls(id=broker_id, host=host, port=int(match["port"]), endpoints=(), timestamp_ms=-1, version=0)
