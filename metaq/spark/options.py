"""Options of the ``metaq`` Spark source and sink, checked when Spark plans the query.

    opts = ReadOptions.parse({"zookeeper.connect": "127.0.0.1:2181/metaq", "subscribe": "clicks",
                              "group.id": "etl"}, streaming=True)
    opts.starting.mode          # "committed" (the default when group.id is set)
    ReadOptions.parse({"bootstrap.servers": "broker1:9092", "subscribe": "clicks", "group.id": "etl",
                       "group.coordination": "kafka"}, streaming=True)      # no ZooKeeper at all

Reading:

=============================== ===========================================================================
``zookeeper.connect``           ``host:port[,host:port][/chroot]``: topics and leaders from ZooKeeper
``bootstrap.servers``           or ``host:port[,host:port]``: topics and leaders from the brokers' Metadata,
                                no ZooKeeper (Spark's Kafka source: ``kafka.bootstrap.servers``); exactly one
                                of the two. A group's offsets then need ``group.coordination=kafka``, and the
                                ``zookeeper.*`` options are refused
``subscribe``                   comma-separated topics; or ``subscribePattern``: a regex matching whole names
``group.id``                    the group whose ZooKeeper offsets a read starts from and a stream commits
``group.coordination``          where the group's offsets are: ``zookeeper`` (default) or ``kafka``
                                (``__consumer_offsets``, by OffsetFetch / OffsetCommit as a standalone
                                consumer: refused while a broker-coordinated group of that id has members)
``startingOffsets``             ``committed`` (default with a group), ``earliest`` (batch default), ``latest``
                                (stream default) or JSON ``{"t": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest)
``auto.offset.reset``           where ``committed`` starts without an offset: ``earliest`` or ``latest``
``endingOffsets``               batch only: ``latest`` (default) or JSON (-1 latest)
``maxOffsetsPerTrigger``        stream only: offsets per micro-batch, shared by backlog
``minPartitions``               split ranges until there are at least this many tasks
``maxPartitions``               pack ranges into at most this many tasks (:func:`metaq.spark.register`
                                defaults it to the session's cores)
``failOnDataLoss``              ``true`` (default): fail when offsets are gone; ``false``: skip with a warning
``valueFormat``                 ``binary`` (default), ``string``, ``json``, ``msgpack``
``valueSchema``                 json/msgpack: DDL (``"page STRING, ms INT"``) or Spark JSON schema of ``value``
``keyFormat``                   ``binary`` (default) or ``string`` (UTF-8): the type of column ``key``
``includeHeaders``              ``true``: add column ``headers``, ``array<struct<key: string, value: binary>>``
                                (as Spark's Kafka source); ``false`` (default)
``isolation.level``             ``read_uncommitted`` (default) or ``read_committed``: only committed
                                transactions' records, reading up to the last stable offset (Spark's Kafka
                                source: ``kafka.isolation.level``; docs/transactions.md §4)
``fetch.max.bytes``, ``request.timeout.ms``, ``client.id``, ``metadata.max.age.ms``,
``zookeeper.session.timeout.ms``, ``zookeeper.connection.timeout.ms``: tuning
``broker.version.fallback``     the API versions for brokers without ApiVersions (Kafka 0.8/0.9), as the
                                consumer's (docs/legacy-wire.md): ``0.8.2``, ``0.9.0``, ... (default ``0.10.0``)
``zookeeper.auth``, ``zookeeper.ssl.*``, ``zookeeper.set.acl``, ...: the ZooKeeper client's security, as for
every metaq process (:mod:`metaq.zksecurity`); prefer ``zookeeper.auth=file:/path`` (a file every executor
can read) to a password in the query
``security.protocol``, ``ssl.*``, how the brokers are reached, as for every metaq client
``sasl.*``                      (docs/client-security.md); passwords are masked wherever options are shown
=============================== ===========================================================================

Writing: ``zookeeper.connect``, ``topic`` (or a ``topic`` column), ``valueFormat`` (``auto``, ``binary``,
``string``, ``json``, ``msgpack``) and any producer property (``acks``, ``linger.ms``, ``security.protocol``,
``sasl.password``...); columns in :mod:`metaq.spark.writer`.

Spark hands the options over lower-cased; errors use the documented spelling (``option 'startingOffsets':
...``) so that the user can find what to change. Unknown options are refused, with the closest known name,
because a misspelt ``maxOffsetsPerTriger`` would otherwise be silently ignored.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from metaq.client.security import SECRET_KEYS, SECURITY_KEYS, SecurityConfig
from metaq.client.versions import DEFAULT_FALLBACK, fallback_versions
from metaq.config import Secret
from metaq.errors import ConfigError
from metaq.spark.offset_ranges import EARLIEST, LATEST, Offsets
from metaq.zksecurity import ZOOKEEPER_CLIENT_KEYS, ZooKeeperSecurity, security_from_properties
from zk_layout import normalize_topic_filter, validate_group, validate_topic

VALUE_FORMATS = ("binary", "string", "json", "msgpack")
KEY_FORMATS = ("binary", "string")
WRITE_VALUE_FORMATS = ("auto", *VALUE_FORMATS)
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
GROUP_COORDINATIONS = ("zookeeper", "kafka")  # the consumer's group.coordination values
RESET_POLICIES = {"earliest": "earliest", "smallest": "earliest", "latest": "latest", "largest": "latest"}
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

_READ_OPTIONS = (
    "zookeeper.connect", "bootstrap.servers", "subscribe", "subscribePattern", "group.id", "startingOffsets",
    "endingOffsets",
    "auto.offset.reset", "maxOffsetsPerTrigger", "minPartitions", "maxPartitions", "failOnDataLoss",
    "valueFormat", "valueSchema", "fetch.max.bytes", "request.timeout.ms", "client.id", "metadata.max.age.ms",
    "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms", "keyFormat", "includeHeaders",
    "broker.version.fallback", "isolation.level", "group.coordination", *sorted(ZOOKEEPER_CLIENT_KEYS),
    *sorted(SECURITY_KEYS),
)
_WRITE_OPTIONS = ("zookeeper.connect", "topic", "valueFormat", "checkpointLocation", "path")
"""The sink's own options; every producer property (``acks``, ``linger.ms``, ...) is accepted as well."""


class _Options:
    """Lower-cased option values with the documented name of each, for messages."""

    def __init__(self, raw: Mapping[str, object], known: tuple[str, ...], extra_known: tuple[str, ...] = ()) -> None:
        self.names = {name.lower(): name for name in (*known, *extra_known)}
        self.values = {str(k).lower(): "" if v is None else str(v) for k, v in raw.items()}
        for key in self.values:
            if key not in self.names:
                close = difflib.get_close_matches(key, list(self.names), n=1)
                hint = f"; did you mean {self.names[close[0]]!r}?" if close else ""
                raise ConfigError(f"unknown option {key!r} for the metaq data source{hint}")

    def get(self, name: str) -> str | None:
        value = self.values.get(name.lower())
        return None if value is None else value.strip()

    def required(self, name: str) -> str:
        value = self.get(name)
        if not value:
            raise ConfigError(f"option {name!r}: a value is required")
        return value

    def integer(self, name: str, default: int | None, minimum: int = 1) -> int | None:
        text = self.get(name)
        if text is None or text == "":
            return default
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"option {name!r}: {text!r} is not an integer") from None
        if value < minimum:
            raise ConfigError(f"option {name!r}: {value} must be >= {minimum}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        text = (self.get(name) or "").lower()
        if not text:
            return default
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(f"option {name!r}: {text!r} must be true or false")

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        text = (self.get(name) or default).lower()
        if text not in allowed:
            raise ConfigError(f"option {name!r}: {text!r} must be one of {', '.join(allowed)}")
        return text


@dataclass(frozen=True)
class Subscription:
    """Fixed topics (``subscribe``) or a regex matched against whole topic names (``subscribePattern``)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    @property
    def option(self) -> str:
        return "subscribePattern" if self.pattern is not None else "subscribe"

    def select(self, existing: list[str]) -> list[str]:
        """The subscribed topics among ``existing`` (a pattern leaves out Kafka's internal topics)."""
        if self.pattern is None:
            return [t for t in self.topics if t in existing]
        regex = re.compile(self.pattern)
        return sorted(t for t in existing if t not in INTERNAL_TOPICS and regex.fullmatch(t))


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: a mode, and for ``json`` the offsets by partition (-2 earliest,
    -1 latest). Partitions a JSON spec does not name fall back to ``earliest`` (start) or ``latest`` (end)."""

    mode: str
    offsets: Offsets = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    """The validated options of a read; picklable, since the reader travels to the executors."""

    zookeeper_connect: str | None  # exactly one of the two (:func:`_cluster`)
    subscription: Subscription
    group_id: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    reset: str
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_partitions: int | None
    fail_on_data_loss: bool
    value_format: str
    value_schema: str | None
    fetch_max_bytes: int
    request_timeout_ms: int
    client_id: str
    metadata_max_age_ms: int
    zk_session_timeout_ms: int
    zk_connection_timeout_ms: int
    key_format: str = "binary"
    include_headers: bool = False
    isolation_level: str = "read_uncommitted"
    zk_security: ZooKeeperSecurity = ZooKeeperSecurity()  # its repr() hides the secrets
    security: SecurityConfig = field(default_factory=SecurityConfig)
    broker_version_fallback: str = DEFAULT_FALLBACK
    group_coordination: str = "zookeeper"
    bootstrap_servers: str | None = None

    @property
    def isolation(self) -> int:
        """The isolation_level of Fetch and ListOffsets: 1 for read_committed."""
        return 1 if self.isolation_level == "read_committed" else 0

    @classmethod
    def parse(cls, raw: Mapping[str, object], *, streaming: bool | None,
              default_max_partitions: int | None = None) -> ReadOptions:
        """Validate ``raw``; ``streaming`` None checks what batch and streaming reads have in common.
        ``default_max_partitions`` applies when neither ``maxPartitions`` nor a larger ``minPartitions`` is set."""
        opts = _Options(raw, _READ_OPTIONS)
        group = opts.get("group.id") or None
        if group is not None:
            validate_group(group)
        subscription = _subscription(opts)
        coordination = _group_coordination(opts, group)
        zookeeper_connect, bootstrap_servers = _cluster(opts, group, coordination)
        starting = _starting(opts, group, streaming)
        ending = _ending(opts, streaming)
        _check_json_topics(subscription, starting, "startingOffsets")
        _check_json_topics(subscription, ending, "endingOffsets")
        value_format = opts.choice("valueFormat", "binary", VALUE_FORMATS)
        min_partitions, max_partitions = opts.integer("minPartitions", None), opts.integer("maxPartitions", None)
        if max_partitions is None and default_max_partitions and (min_partitions or 0) <= default_max_partitions:
            max_partitions = default_max_partitions
        elif min_partitions and max_partitions and min_partitions > max_partitions:
            raise ConfigError(f"option 'maxPartitions': {max_partitions} is below option 'minPartitions' "
                              f"({min_partitions})")
        return cls(
            zookeeper_connect=zookeeper_connect,
            subscription=subscription,
            group_id=group,
            starting=starting,
            ending=ending,
            reset=_reset(opts, streaming),
            max_offsets_per_trigger=_streaming_only(opts, "maxOffsetsPerTrigger", streaming),
            min_partitions=min_partitions,
            max_partitions=max_partitions,
            fail_on_data_loss=opts.boolean("failOnDataLoss", True),
            value_format=value_format,
            value_schema=_value_schema(opts, value_format),
            fetch_max_bytes=opts.integer("fetch.max.bytes", 4 * 1024 * 1024, minimum=1024) or 0,
            request_timeout_ms=opts.integer("request.timeout.ms", 30000) or 0,
            client_id=opts.get("client.id") or "metaq-spark",
            metadata_max_age_ms=opts.integer("metadata.max.age.ms", 1000, minimum=0) or 0,
            zk_session_timeout_ms=opts.integer("zookeeper.session.timeout.ms", 10000) or 0,
            zk_connection_timeout_ms=opts.integer("zookeeper.connection.timeout.ms", 10000) or 0,
            key_format=opts.choice("keyFormat", "binary", KEY_FORMATS),
            include_headers=opts.boolean("includeHeaders", False),
            isolation_level=opts.choice("isolation.level", "read_uncommitted", ISOLATION_LEVELS),
            zk_security=_zk_security(opts),
            security=_security(opts),
            broker_version_fallback=_fallback(opts),
            group_coordination=coordination,
            bootstrap_servers=bootstrap_servers,
        )


def _group_coordination(opts: _Options, group: str | None) -> str:
    """``group.coordination``: only a read with a group has offsets to keep somewhere."""
    mode = opts.choice("group.coordination", "zookeeper", GROUP_COORDINATIONS)
    if opts.get("group.coordination") and group is None:
        raise ConfigError("option 'group.coordination': it says where the offsets of option 'group.id' are; "
                          "set a group.id")
    return mode


def _cluster(opts: _Options, group: str | None, coordination: str) -> tuple[str | None, str | None]:
    """(``zookeeper.connect``, ``bootstrap.servers``): exactly one names the cluster. Without ZooKeeper the
    group's offsets can only be in ``__consumer_offsets``, and ZooKeeper's own options would be ignored."""
    zookeeper, bootstrap = opts.get("zookeeper.connect") or None, opts.get("bootstrap.servers") or None
    if zookeeper and bootstrap:
        raise ConfigError("option 'bootstrap.servers': give it or option 'zookeeper.connect', not both (either "
                          "names where the topics and leaders are read)")
    if bootstrap is None:
        if zookeeper is None:
            raise ConfigError("option 'zookeeper.connect' or 'bootstrap.servers': a value is required")
        return zookeeper, None
    from metaq.client.metadata import parse_addresses  # the consumer's check; kafka-python only when used

    parse_addresses(bootstrap, "option 'bootstrap.servers':")
    if group is not None and coordination == "zookeeper":
        default = "" if opts.get("group.coordination") else " (the default)"
        raise ConfigError(f"option 'group.coordination': 'zookeeper'{default} keeps the offsets of option "
                          f"'group.id' in ZooKeeper, which option 'bootstrap.servers' does not reach; set "
                          f"group.coordination=kafka (offsets in __consumer_offsets) or option 'zookeeper.connect'")
    for name in ("zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms", *sorted(ZOOKEEPER_CLIENT_KEYS)):
        if opts.get(name) is not None:
            raise ConfigError(f"option {name!r}: only with option 'zookeeper.connect' (with option "
                              f"'bootstrap.servers' the source reaches no ZooKeeper)")
    return None, bootstrap


def _fallback(opts: _Options) -> str:
    """``broker.version.fallback``, checked against the releases metaq knows (the error names the option)."""
    release = opts.get("broker.version.fallback") or DEFAULT_FALLBACK
    try:
        fallback_versions(release)
    except ConfigError as e:
        raise ConfigError(f"option 'broker.version.fallback': {e}") from None
    return release


def _zk_security(opts: _Options) -> ZooKeeperSecurity:
    """The zookeeper.auth/ssl/set.acl options, resolved on the driver (an error names the option)."""
    picked = {opts.names[k]: v for k, v in opts.values.items() if opts.names[k] in ZOOKEEPER_CLIENT_KEYS}
    try:
        return security_from_properties(picked)
    except ConfigError as e:
        raise ConfigError(f"metaq source: {e}") from e


@dataclass(frozen=True)
class WriteOptions:
    """The validated options of a write: the target and the producer's own properties."""

    zookeeper_connect: str
    topic: str | None
    value_format: str
    producer: dict[str, str | Secret] = field(repr=False)  # may hold zookeeper.auth; passwords as Secrets

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> WriteOptions:
        from metaq.producer.config import ProducerConfig  # the producer's property names are its own

        producer_keys = tuple(k for k in ProducerConfig.keys() if k != "zookeeper.connect")
        opts = _Options(raw, _WRITE_OPTIONS, producer_keys)
        topic = opts.get("topic") or None
        if topic is not None:
            _check_topic("topic", topic)
        producer: dict[str, str | Secret] = {
            opts.names[k]: Secret(v) if opts.names[k] in SECRET_KEYS else v
            for k, v in opts.values.items() if opts.names[k] in producer_keys}
        connect = opts.required("zookeeper.connect")
        try:
            ProducerConfig.from_properties({"zookeeper.connect": connect, **producer})
        except ConfigError as e:
            raise ConfigError(f"metaq sink: {e}") from e
        return cls(connect, topic, opts.choice("valueFormat", "auto", WRITE_VALUE_FORMATS), producer)


# -- one function per option -----------------------------------------------------------------------


def _check_topic(option: str, topic: str) -> None:
    try:
        validate_topic(topic)
    except ConfigError as e:
        raise ConfigError(f"option {option!r}: {e}") from None


def _security(opts: _Options) -> SecurityConfig:
    given = {name: opts.values[name.lower()] for name in SECURITY_KEYS if name.lower() in opts.values}
    try:
        return SecurityConfig.from_properties(given)
    except ConfigError as e:
        raise ConfigError(f"metaq source: {e}") from None  # the cause could show a value


def _subscription(opts: _Options) -> Subscription:
    topics, pattern = opts.get("subscribe"), opts.get("subscribePattern")
    if bool(topics) == bool(pattern):
        raise ConfigError("option 'subscribe' or 'subscribePattern': exactly one of the two is required")
    if topics:
        names = tuple(dict.fromkeys(t.strip() for t in topics.split(",") if t.strip()))
        if not names:
            raise ConfigError(f"option 'subscribe': {topics!r} names no topic")
        for name in names:
            _check_topic("subscribe", name)
        return Subscription(topics=names)
    assert pattern is not None
    regex = normalize_topic_filter(pattern)
    try:
        re.compile(regex)
    except re.error as e:
        raise ConfigError(f"option 'subscribePattern': {pattern!r} is not a valid regex: {e}") from None
    if not regex:
        raise ConfigError(f"option 'subscribePattern': {pattern!r} matches no topic")
    return Subscription(pattern=regex)


def _starting(opts: _Options, group: str | None, streaming: bool | None) -> OffsetSpec:
    text = opts.get("startingOffsets")
    if not text:
        if group is not None:
            return OffsetSpec("committed")
        return OffsetSpec("latest" if streaming else "earliest")
    mode = text.lower()
    if mode == "committed":
        if group is None:
            raise ConfigError("option 'startingOffsets': 'committed' needs option 'group.id'")
        return OffsetSpec("committed")
    if mode in ("earliest", "latest"):
        return OffsetSpec(mode)
    return OffsetSpec("json", parse_offsets_json("startingOffsets", text, allowed=(EARLIEST, LATEST)))


def _ending(opts: _Options, streaming: bool | None) -> OffsetSpec:
    text = opts.get("endingOffsets")
    if not text:
        return OffsetSpec("latest")
    if streaming:
        raise ConfigError("option 'endingOffsets': only batch reads take it; a stream has no end")
    if text.lower() == "latest":
        return OffsetSpec("latest")
    if text.lower() == "earliest":
        raise ConfigError("option 'endingOffsets': 'earliest' would read nothing; use 'latest' or JSON")
    return OffsetSpec("json", parse_offsets_json("endingOffsets", text, allowed=(LATEST,)))


def _check_json_topics(subscription: Subscription, spec: OffsetSpec, option: str) -> None:
    """JSON offsets may only name subscribed topics: anything else is a typo that would be ignored."""
    topics = sorted({topic for topic, _ in spec.offsets})
    stray = [t for t in topics if t not in subscription.select(topics)]
    if stray:
        raise ConfigError(f"option {option!r}: topic {', '.join(map(repr, stray))} is not in option "
                          f"{subscription.option!r}")


def _reset(opts: _Options, streaming: bool | None) -> str:
    text = (opts.get("auto.offset.reset") or "").lower()
    if not text:
        return "latest" if streaming else "earliest"
    if text not in RESET_POLICIES:
        raise ConfigError(f"option 'auto.offset.reset': {text!r} must be earliest or latest")
    return RESET_POLICIES[text]


def _streaming_only(opts: _Options, name: str, streaming: bool | None) -> int | None:
    value = opts.integer(name, None)
    if value is not None and streaming is False:
        raise ConfigError(f"option {name!r}: only streaming reads take it")
    return value


def _value_schema(opts: _Options, value_format: str) -> str | None:
    text = opts.get("valueSchema") or None
    if text is None:
        return None
    if value_format not in ("json", "msgpack"):
        raise ConfigError(f"option 'valueSchema': only valueFormat json or msgpack take a schema, "
                          f"not {value_format!r}")
    if text.startswith("{"):
        from pyspark.sql.types import StructType

        try:
            StructType.fromJson(json.loads(text))
        except Exception as e:  # a JSON schema that does not parse or is not a struct
            raise ConfigError(f"option 'valueSchema': not a Spark JSON schema: {e}") from None
    elif text.count("<") != text.count(">") or text.count("(") != text.count(")"):
        raise ConfigError(f"option 'valueSchema': {text!r} has unbalanced brackets")
    return text


def parse_offsets_json(option: str, text: str, *, allowed: tuple[int, ...]) -> Offsets:
    """``{"topic": {"0": 23, "1": -2}}`` as ``{("topic", 0): 23, ...}``; ``allowed`` lists the negative
    markers the option accepts (-2 earliest, -1 latest)."""
    try:
        obj = json.loads(text)
    except ValueError:
        raise ConfigError(f"option {option!r}: {text[:80]!r} is neither a mode nor JSON offsets") from None
    if not isinstance(obj, dict) or not obj:
        raise ConfigError(f'option {option!r}: expected {{"topic": {{"partition": offset}}}}, got {text[:80]!r}')
    result: Offsets = {}
    for topic, partitions in obj.items():
        _check_topic(option, topic)
        if not isinstance(partitions, dict):
            raise ConfigError(f"option {option!r}: topic {topic!r} must map partitions to offsets")
        for key, offset in partitions.items():
            if not (isinstance(key, str) and key.isascii() and key.isdigit()):
                raise ConfigError(f"option {option!r}: {topic!r} partition {key!r} is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or (offset < 0 and offset not in allowed):
                markers = " or ".join(f"{m} ({'earliest' if m == EARLIEST else 'latest'})" for m in allowed)
                raise ConfigError(f"option {option!r}: {topic}/{key}: {offset!r} must be an offset >= 0 or {markers}")
            result[(topic, int(key))] = offset
    return result
