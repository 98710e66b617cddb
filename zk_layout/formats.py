"""Byte codecs for the data of every node in the Kafka 0.8 layout, plus tolerant reading of MetaQ's forms.

Pure functions over bytes: nothing here talks to ZooKeeper. Encoders write exactly what Kafka writes (compact
JSON, ``json.dumps(obj, separators=(",", ":"))``, timestamps as strings). Decoders are tolerant of older
versions and of MetaQ, and strict about everything else: each takes the node's path and raises
:class:`MalformedNodeError` naming it -- never a bare KeyError, ValueError, UnicodeDecodeError or TypeError::

    BrokerInfo.plaintext(0, "127.0.0.1", 9092).encode()
    BrokerInfo.decode("/brokers/ids/0", raw)            # accepts v1..v5 and MetaQ's b"meta://host:port"
    decode_offset("/consumers/g/offsets/t/0", b"1349857398021-10240")   # 10240
"""

from __future__ import annotations

import builtins
import functools
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, NoReturn, Self
from urllib.parse import unquote

import re2

from metaq.errors import ConfigError, MalformedNodeError
from zk_layout.paths import INT32_MAX

STATIC: Final = "static"
WHITE_LIST: Final = "white_list"
BLACK_LIST: Final = "black_list"
PATTERNS: Final = (STATIC, WHITE_LIST, BLACK_LIST)

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})

BROKER_REGISTRATION_VERSION: Final = 5
# Broker ids, partitions, replicas, leaders and epochs are int32 on the Kafka wire (INT32_MAX): a node
# holding a larger one cannot be served to any client, so the decoders refuse it (no Metadata would encode).
MAX_PORT: Final = 65535
_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_INT_TEXT = re.compile(r"-?[0-9]+")
_DIGITS = re.compile(r"[0-9]+")
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_ENDPOINT = re.compile(r"(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>[0-9]{1,5})")
_META_URI = re.compile(r"meta://(?P<host>\[[^\]]+\]|[^:/\[\]]+):(?P<port>[0-9]{1,5})")


def now_ms() -> int:
    return int(time.time() * 1000)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# -- reading helpers -------------------------------------------------------------------------------


class _Node:
    """The raw data of one node being decoded; every failure names the path and shows the data."""

    def __init__(self, path: str, raw: Any) -> None:
        self.path = path
        self.raw = bytes(raw) if isinstance(raw, bytes | bytearray | memoryview) else None
        if self.raw is None and raw is not None:
            self.fail(f"expected bytes, got {type(raw).__name__}")

    def fail(self, reason: str) -> NoReturn:
        raise MalformedNodeError(self.path, self.raw, reason)

    def text(self) -> str:
        if self.raw is None:
            self.fail("the node has no data")
        try:
            return self.raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"not UTF-8 ({e.reason} at byte {e.start})")

    def json(self) -> Any:
        text = self.text()
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:  # ValueError covers JSONDecodeError and huge integers
            self.fail(f"not JSON ({e})")

    def json_object(self) -> dict[str, Any]:
        obj = self.json()
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object, got {type(obj).__name__}")
        return obj


_REQUIRED: Any = object()


class _Fields:
    """Typed access to the keys of a decoded JSON object."""

    def __init__(self, node: _Node, obj: Mapping[str, Any], where: str = "") -> None:
        self.node = node
        self.obj = obj
        self.where = where

    def value(self, key: str, default: Any) -> Any:
        if key in self.obj:
            return self.obj[key]
        if default is _REQUIRED:
            self.node.fail(f"missing key {self.where}{key!r}")
        return default

    def int(self, key: str, default: Any = _REQUIRED, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
        value = self.value(key, default)
        if value is default and default is not _REQUIRED:
            return value  # type: ignore[no-any-return]
        return _as_int(self.node, value, f"{self.where}{key!r}", minimum, maximum)

    def int32(self, key: builtins.str, default: Any = _REQUIRED, *, minimum: builtins.int = -1) -> builtins.int:
        """A value sent to Kafka clients as int32 (leader, epoch): ``minimum``..2^31-1."""
        return self.int(key, default, minimum=minimum, maximum=INT32_MAX)

    def str(self, key: str, default: Any = _REQUIRED, *, nullable: bool = False) -> Any:
        value = self.value(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            self.node.fail(f"{self.where}{key!r} must be a string, got {value!r:.40}")
        return value

    def timestamp(self, key: builtins.str = "timestamp") -> builtins.int:
        """Kafka writes timestamps as strings of epoch milliseconds; accept numbers too. Missing: -1."""
        value = self.value(key, None)
        if value is None:
            return -1
        if isinstance(value, str):
            return _parse_int_text(self.node, value, f"{self.where}{key!r}")
        return _as_int(self.node, value, f"{self.where}{key!r}", None)

    def object(self, key: builtins.str, default: Any = _REQUIRED) -> Any:
        value = self.value(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if not isinstance(value, dict):
            self.node.fail(f"{self.where}{key!r} must be a JSON object, got {value!r:.40}")
        return value

    def broker_ids(self, key: builtins.str) -> tuple[builtins.int, ...]:
        """A list of broker ids (an ISR): each 0..2^31-1."""
        return _broker_id_tuple(self.node, self.value(key, _REQUIRED), f"{self.where}{key!r}")


def _parse_int_text(node: _Node, text: str, what: str, *, signed: bool = True) -> int:
    """Decimal digits (optionally signed) that fit in 64 bits; ``int()`` alone would accept ``" 1_0"``,
    non-ASCII digits, and raise ValueError on thousands of digits."""
    if not (_INT_TEXT if signed else _DIGITS).fullmatch(text) or len(text.lstrip("-")) > 19:
        node.fail(f"{what} must be a decimal integer, got {text!r:.40}")
    return int(text)


def _as_int(node: _Node, value: Any, what: str, minimum: int | None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        node.fail(f"{what} must be an integer, got {value!r:.40}")
    if minimum is not None and value < minimum:
        node.fail(f"{what} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        node.fail(f"{what} must be <= {maximum} (a Kafka int32), got {value}")
    return value


def _broker_id_tuple(node: _Node, value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        node.fail(f"{what} must be a list of broker ids, got {value!r:.40}")
    return tuple(_as_int(node, item, f"element of {what}", 0, INT32_MAX) for item in value)


def _partition_map(node: _Node, value: Any, what: str) -> dict[int, tuple[int, ...]]:
    """``{"0":[1,2],"1":[2]}`` -> ``{0: (1, 2), 1: (2,)}``, sorted numerically. Partitions and replicas
    must fit a Kafka int32."""
    if not isinstance(value, dict):
        node.fail(f"{what} must be a JSON object, got {value!r:.40}")
    result: dict[int, tuple[int, ...]] = {}
    for key, replicas in value.items():
        partition = _parse_int_text(node, key, f"partition {key!r} of {what}", signed=False)
        if partition > INT32_MAX:
            node.fail(f"partition {key!r} of {what} must be <= {INT32_MAX} (a Kafka int32)")
        result[partition] = _broker_id_tuple(node, replicas, f"{what}[{key!r}]")
    return dict(sorted(result.items()))


def decode_broker_id(node_path: str, name: str) -> int:
    """The broker id a ``/brokers/ids`` child name stands for: decimal digits, 0..2^31-1 (Kafka's int32);
    MalformedNodeError naming the node otherwise."""
    node = _Node(node_path, None)
    broker_id = _parse_int_text(node, name, "the broker id (the node's name)", signed=False)
    if broker_id > INT32_MAX:
        node.fail(f"broker id {broker_id} does not fit a Kafka int32 (0..{INT32_MAX}); no client could be told "
                  "about it")
    return broker_id


def _encode_partition_map(partitions: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(partitions.items())}


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


# -- brokers ---------------------------------------------------------------------------------------


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
        obj: dict[str, Any] = {}
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
            security_protocol_map=dict(protocol_map),
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


# -- topics ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: partition -> replica list. v2 adds adding/removing replicas, v3 a topic id.
    Consumers only need :attr:`partition_ids`."""

    partitions: dict[int, tuple[int, ...]]
    version: int = 1
    topic_id: str | None = None
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("partitions", "adding_replicas", "removing_replicas"):
            value = getattr(self, name)
            object.__setattr__(self, name, {int(p): tuple(r) for p, r in sorted(value.items())})

    @property
    def partition_ids(self) -> list[int]:
        return sorted(self.partitions)

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"version": self.version, "partitions": _encode_partition_map(self.partitions)}
        if self.version >= 2:
            obj["adding_replicas"] = _encode_partition_map(self.adding_replicas)
            obj["removing_replicas"] = _encode_partition_map(self.removing_replicas)
        if self.version >= 3 and self.topic_id is not None:
            obj["topic_id"] = self.topic_id
        return _dumps(obj)

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        return cls(
            partitions=_partition_map(node, fields.value("partitions", _REQUIRED), "'partitions'"),
            version=fields.int("version", 1, minimum=1),
            topic_id=fields.str("topic_id", None, nullable=True),
            adding_replicas=_partition_map(node, fields.value("adding_replicas", {}), "'adding_replicas'"),
            removing_replicas=_partition_map(node, fields.value("removing_replicas", {}), "'removing_replicas'"),
        )


@dataclass(frozen=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader and ISR, written by the controller."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = 1
    leader_recovery_state: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "isr", tuple(self.isr))

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": self.version,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state is not None:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return _dumps(obj)

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        return cls(
            leader=fields.int32("leader"),
            leader_epoch=fields.int32("leader_epoch"),
            isr=fields.broker_ids("isr"),
            controller_epoch=fields.int32("controller_epoch"),
            version=fields.int("version", 1),
            leader_recovery_state=fields.int("leader_recovery_state", None),
        )


@dataclass(frozen=True)
class TopicConfig:
    """``/config/topics/<t>``: per-topic overrides, all values strings."""

    config: dict[str, str] = field(default_factory=dict)
    version: int = 1

    def encode(self) -> bytes:
        return _dumps({"version": self.version, "config": dict(self.config)})

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        config = fields.object("config", {})
        if not all(isinstance(v, str) for v in config.values()):
            node.fail("'config' values must be strings")
        return cls(config=dict(config), version=fields.int("version", 1))


@dataclass(frozen=True)
class ConfigChange:
    """``/config/changes/config_change_<seq>``: announces that ``/config/<entity_path>`` changed (Kafka's
    version 2 notification, e.g. ``{"version":2,"entity_path":"topics/clicks"}``)."""

    entity_path: str
    version: int = 2

    def encode(self) -> bytes:
        return _dumps({"version": self.version, "entity_path": self.entity_path})

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        return cls(entity_path=fields.str("entity_path"), version=fields.int("version", 2))

    @property
    def topic(self) -> str | None:
        """The topic whose config changed, or None for another entity type."""
        kind, _, name = self.entity_path.partition("/")
        return name if kind == "topics" and name else None

    @property
    def user(self) -> str | None:
        """The (desanitized) user whose config changed, e.g. SCRAM credentials; None for another entity."""
        kind, _, name = self.entity_path.partition("/")
        return unquote(name) if kind == "users" and name and "/" not in name else None


# -- consumers -------------------------------------------------------------------------------------


def normalize_topic_filter(regex: str) -> str:
    """Kafka's ``TopicFilter`` clean-up: trim, ``,`` -> ``|``, drop spaces, strip surrounding quotes."""
    cleaned = regex.strip().replace(",", "|").replace(" ", "")
    return cleaned.lstrip("\"'").rstrip("\"'")


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is raised (and named) here; RE2 would also print it to stderr


@functools.lru_cache(maxsize=512)
def compile_topic_filter(regex: str) -> Any:
    """A normalised topic filter compiled with RE2, whose matching time is linear in the topic's length.

    Filters come from every member's ``/consumers/<g>/ids`` node, so they are untrusted: with Python's
    backtracking ``re``, ``(a+)+$`` against a 30-character topic takes seconds of CPU in every member and
    ops tool. RE2 accepts what topic filters use (classes, alternation, repetition, ``(?i)``, ``\\Q..\\E``)
    but not backreferences, lookaround or possessive quantifiers: those raise ConfigError with RE2's
    reason. ``fullmatch`` is Java's ``String.matches``."""
    try:
        return re2.compile(regex, _RE2_OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ConfigError(f"topic filter {regex!r} is not a valid regex: {reason} (topic filters are matched "
                          "with RE2, which has no backreferences, lookaround or possessive quantifiers)") from e


@dataclass(frozen=True)
class TopicCount:
    """A consumer's registration, ``/consumers/<g>/ids/<consumerId>`` (ephemeral).

    ``static``: ``subscription`` maps topics to stream counts. ``white_list``/``black_list``: one entry,
    ``{regex: streams}``, expanded by every reader against the current topics (:meth:`streams_per_topic`).
    ``version=0`` marks a MetaQ registration (a CSV topic list, one stream each).
    """

    subscription: dict[str, int]
    pattern: str = STATIC
    timestamp_ms: int = field(default_factory=now_ms)
    version: int = 1

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")
        if self.pattern != STATIC and len(self.subscription) != 1:
            raise ValueError(f"a {self.pattern} subscription has exactly one regex, got {self.subscription}")

    @property
    def is_wildcard(self) -> bool:
        return self.pattern != STATIC

    def topic_filter(self) -> tuple[str, int]:
        """(normalised regex, streams) of a wildcard subscription."""
        if not self.is_wildcard:
            raise ValueError("a static subscription has no topic filter")
        regex, streams = next(iter(self.subscription.items()))
        return normalize_topic_filter(regex), streams

    def streams_per_topic(self, topics: Iterable[str], *, exclude_internal: bool = True) -> dict[str, int]:
        """topic -> streams. Static: the subscription. Wildcard: every topic the regex fully matches (white
        list) or does not (black list), with RE2 (:func:`compile_topic_filter`) standing in for Java's
        regex: they agree on the usual subset (classes, alternation, ``.*``). ConfigError for a filter RE2
        does not support (a decoded node has been checked already, see :meth:`decode`)."""
        if not self.is_wildcard:
            return dict(self.subscription)
        regex, streams = self.topic_filter()
        compiled = compile_topic_filter(regex)
        whitelist = self.pattern == WHITE_LIST
        return {
            topic: streams
            for topic in sorted(topics)
            if bool(compiled.fullmatch(topic)) == whitelist and not (exclude_internal and topic in INTERNAL_TOPICS)
        }

    def encode(self) -> bytes:
        subscription = self.subscription if self.is_wildcard else dict(sorted(self.subscription.items()))
        return _dumps(
            {
                "version": self.version if self.version >= 1 else 1,
                "subscription": subscription,
                "pattern": self.pattern,
                "timestamp": str(self.timestamp_ms),
            }
        )

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        """Kafka's ``constructTopicCount`` rules; MetaQ's CSV topic list reads as static, one stream each."""
        node = _Node(path, raw)
        text = node.text()
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict):
            return cls._decode_csv(node, text)
        fields = _Fields(node, obj)
        subscription = fields.object("subscription")
        pattern = fields.str("pattern")
        counts = {
            topic: _as_int(node, streams, f"'subscription'[{topic!r}]", 0) for topic, streams in subscription.items()
        }
        if not counts or pattern not in (WHITE_LIST, BLACK_LIST):
            pattern = STATIC
        else:
            counts = dict([next(iter(counts.items()))])
            try:
                compile_topic_filter(normalize_topic_filter(next(iter(counts))))
            except ConfigError as e:
                node.fail(str(e))
        return cls(counts, pattern, fields.timestamp(), fields.int("version", 1))

    @classmethod
    def _decode_csv(cls, node: _Node, text: str) -> Self:
        topics = [part.strip() for part in text.split(",")]
        if not text.strip() or not all(_TOPIC_NAME.fullmatch(t) for t in topics):
            node.fail("neither a Kafka TopicCount JSON object nor a MetaQ comma-separated topic list")
        return cls({t: 1 for t in topics}, STATIC, -1, 0)


def encode_owner(thread_id: str) -> bytes:
    """``/consumers/<g>/owners/<t>/<p>``: the owning thread id as plain text."""
    if not thread_id:
        raise ValueError("an owner thread id must not be empty")
    return thread_id.encode("utf-8")


def decode_owner(path: str, raw: bytes | None) -> str:
    text = _Node(path, raw).text()
    if not text:
        raise MalformedNodeError(path, raw, "empty owner")
    return text


def encode_offset(offset: int) -> bytes:
    """The next offset to consume as plain decimal digits: what Burrow's ``ParseInt`` accepts."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"an offset must be an integer >= 0, got {offset!r}")
    return str(offset).encode("ascii")


NO_OFFSET_VALUE: Final = -1
"""What an offset node holds before a first commit (a fence writes it); Kafka 0.8 reads it as "no offset"."""


def decode_offset(path: str, raw: bytes | None) -> int:
    """Accept Kafka's ``4213``, MetaQ's ``msgId-offset`` (``1349857398021-10240``, ``-1-0``) and surrounding
    whitespace. Splits on the *last* dash (MetaQ's own ``split("-")`` misreads ``-1-1234``). The only
    negative value is ``-1`` (no offset): anything below is no offset a consumer could have committed, so it
    is reported as malformed rather than silently read as "none"."""
    node = _Node(path, raw)
    text = node.text().strip()
    if "-" not in text[1:]:
        offset = _parse_int_text(node, text, "the offset")
        if offset < NO_OFFSET_VALUE:
            node.fail(f"negative offset {offset} (only {NO_OFFSET_VALUE}, \"no offset yet\", may be negative)")
        return offset
    msg_id, _, offset_text = text.rpartition("-")
    _parse_int_text(node, msg_id, "the msgId of msgId-offset")
    return _parse_int_text(node, offset_text, "the offset of msgId-offset", signed=False)


def encode_controller_epoch(epoch: int) -> bytes:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"a controller epoch must be an integer >= 0, got {epoch!r}")
    return str(epoch).encode("ascii")


def decode_controller_epoch(path: str, raw: bytes | None) -> int:
    node = _Node(path, raw)
    return _parse_int_text(node, node.text().strip(), "the controller epoch", signed=False)


# -- cluster ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterId:
    """``/cluster/id``: ``{"version":"1","id":"<22-char URL-safe base64 UUID>"}`` (version is a string)."""

    id: str
    version: str = "1"

    def encode(self) -> bytes:
        return _dumps({"version": self.version, "id": self.id})

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        cluster_id = fields.str("id")
        if not cluster_id:
            node.fail("empty cluster id")
        version = fields.value("version", "1")
        if isinstance(version, bool) or not isinstance(version, str | int):
            node.fail(f"'version' must be a string, got {version!r:.40}")
        return cls(id=cluster_id, version=str(version))


@dataclass(frozen=True)
class ControllerInfo:
    """``/controller`` (ephemeral): the elected controller. v2 (Kafka 3.x) adds ``kraftControllerEpoch``."""

    broker_id: int
    timestamp_ms: int = field(default_factory=now_ms)
    version: int = 1
    kraft_controller_epoch: int | None = None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "version": self.version,
            "brokerid": self.broker_id,
            "timestamp": str(self.timestamp_ms),
        }
        if self.version >= 2:
            obj["kraftControllerEpoch"] = -1 if self.kraft_controller_epoch is None else self.kraft_controller_epoch
        return _dumps(obj)

    @classmethod
    def decode(cls, path: str, raw: bytes | None) -> Self:
        node = _Node(path, raw)
        fields = _Fields(node, node.json_object())
        return cls(
            broker_id=fields.int("brokerid"),
            timestamp_ms=fields.timestamp(),
            version=fields.int("version", 1),
            kraft_controller_epoch=fields.int("kraftControllerEpoch", None),
        )
