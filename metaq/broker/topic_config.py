"""Per-topic config overrides (``/config/topics/<t>``): which keys metaq accepts, how they are validated,
described and applied to a topic's logs.

Each supported topic config overrides one :class:`LogConfig` field, whose default is the broker's
``log.*`` property (Kafka's topic-level / broker-level pairs). ``min.insync.replicas`` is read by acks=all
produces to replicated partitions (metaq/broker/replication/acks.py). ``cleanup.policy`` is ``compact``,
``delete`` or both; the compaction keys tune the log cleaner (docs/compaction.md). ``message.timestamp.type``
is ``CreateTime`` (the producer's timestamps) or ``LogAppendTime`` (the broker's time of append, set on each
batch as Kafka's LogValidator does: docs/legacy-wire.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from metaq.broker.log.config import CLEANUP_POLICIES, TIMESTAMP_TYPES, LogConfig
from metaq.config import Config, parse_int
from metaq.errors import ConfigError


@dataclass(frozen=True)
class TopicConfigKey:
    name: str  # the topic-level property
    field: str | None  # the LogConfig field it overrides (None: stored only)
    kind: str  # Kafka ConfigType name: LONG, INT, DOUBLE, LIST, STRING
    minimum: int | None = None
    choices: tuple[str, ...] = ()  # STRING: the values accepted (as Kafka spells them; matched ignoring case)


_KEYS = (
    TopicConfigKey("retention.ms", "retention_ms", "LONG", -1),
    TopicConfigKey("retention.bytes", "retention_bytes", "LONG", -1),
    TopicConfigKey("segment.bytes", "segment_bytes", "INT", 14),
    TopicConfigKey("segment.ms", "segment_ms", "LONG", 1),
    TopicConfigKey("segment.index.bytes", "index_max_bytes", "INT", 12),
    TopicConfigKey("index.interval.bytes", "index_interval_bytes", "INT", 0),
    TopicConfigKey("max.message.bytes", "max_message_bytes", "INT", 1),
    TopicConfigKey("file.delete.delay.ms", "segment_delete_delay_ms", "LONG", 0),
    TopicConfigKey("flush.messages", "flush_interval_messages", "LONG", 1),
    TopicConfigKey("cleanup.policy", "cleanup_policy", "LIST"),
    TopicConfigKey("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "DOUBLE"),
    TopicConfigKey("min.compaction.lag.ms", "min_compaction_lag_ms", "LONG", 0),
    TopicConfigKey("max.compaction.lag.ms", "max_compaction_lag_ms", "LONG", 1),
    TopicConfigKey("delete.retention.ms", "delete_retention_ms", "LONG", 0),
    TopicConfigKey("min.insync.replicas", None, "INT", 1),
    # replication throttles (metaq/broker/quota/replication.py): "*" or partition:broker,...
    TopicConfigKey("leader.replication.throttled.replicas", None, "REPLICAS"),
    TopicConfigKey("follower.replication.throttled.replicas", None, "REPLICAS"),
    TopicConfigKey("message.timestamp.type", "timestamp_type", "STRING", choices=TIMESTAMP_TYPES),
)
TOPIC_CONFIG_KEYS: dict[str, TopicConfigKey] = {key.name: key for key in _KEYS}
LIST_KEYS = frozenset(key.name for key in _KEYS if key.kind == "LIST")

_STORED_DEFAULTS = {"min.insync.replicas": "1", "leader.replication.throttled.replicas": "",
                    "follower.replication.throttled.replicas": ""}
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def validate_topic_config(config: Mapping[str, str | None]) -> dict[str, str]:
    """The overrides to store (values normalised to Kafka's strings); ConfigError naming the key at fault."""
    result: dict[str, str] = {}
    for name, value in config.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise ConfigError(f"Unknown topic config name: {name} (metaq supports {', '.join(TOPIC_CONFIG_KEYS)})")
        if value is None:
            raise ConfigError(f"Invalid value null for configuration {name}: a value is required")
        result[name] = _normalise(key, value.strip())
    return result


def _normalise(key: TopicConfigKey, value: str) -> str:
    if key.kind == "REPLICAS":
        return _throttled_replicas(key.name, value)
    if key.kind == "STRING":
        found = next((c for c in key.choices if c.lower() == value.lower()), None)
        if found is None:
            raise ConfigError(f"Invalid value {value} for configuration {key.name}: String must be one of: "
                              f"{', '.join(key.choices)}")
        return found
    if key.kind == "LIST":
        policies = [p.strip().lower() for p in value.split(",") if p.strip()]
        if not policies or any(p not in CLEANUP_POLICIES for p in policies) or len(set(policies)) != len(policies):
            raise ConfigError(f"Invalid value {value} for configuration {key.name}: must be a non-empty list of"
                              f" {' and '.join(CLEANUP_POLICIES)}")
        return ",".join(policies)
    if key.kind == "DOUBLE":
        try:
            ratio = float(value)
        except ValueError:
            raise ConfigError(f"Invalid value {value} for configuration {key.name}: Not a number of type DOUBLE"
                              ) from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"Invalid value {value} for configuration {key.name}: must be between 0 and 1")
        return repr(ratio)
    try:
        number = parse_int(value)
    except ValueError:
        raise ConfigError(
            f"Invalid value {value} for configuration {key.name}: Not a number of type {key.kind}"
        ) from None
    limit = _INT32_MAX if key.kind == "INT" else _INT64_MAX
    if number > limit or (key.minimum is not None and number < key.minimum):
        raise ConfigError(f"Invalid value {value} for configuration {key.name}: must be between {key.minimum}"
                          f" and {limit}")
    return str(number)


def _throttled_replicas(name: str, value: str) -> str:
    """Kafka's ThrottledReplicaListValidator: ``*``, empty, or ``partition:broker`` entries."""
    entries = [e.strip() for e in value.split(",")] if value.strip() else []
    if value.strip() == "*" or all(_is_replica_entry(e) for e in entries):
        return value.strip() if value.strip() == "*" else ",".join(entries)
    raise ConfigError(f"Invalid value {value} for configuration {name}: must be the literal '*' or a list of"
                      " replicas in the format [PartitionId]:[BrokerId],[PartitionId]:[BrokerId],...")


def _is_replica_entry(entry: str) -> bool:
    partition, sep, broker = entry.partition(":")
    return bool(sep) and partition.strip().isdigit() and broker.strip().isdigit()


def log_config_for(base: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """``base`` (the broker's defaults) with a topic's overrides applied; unknown or invalid keys raise."""
    changes: dict[str, object] = {}
    for name, value in validate_topic_config(overrides).items():
        key = TOPIC_CONFIG_KEYS[name]
        if key.field is not None:
            changes[key.field] = _typed(key, value)
    return dataclasses.replace(base, **changes) if changes else base  # type: ignore[arg-type]


def _typed(key: TopicConfigKey, value: str) -> object:
    if key.kind == "LIST":
        return tuple(value.split(","))
    if key.kind == "DOUBLE":
        return float(value)
    if key.kind == "STRING":
        return value
    return int(value)


def default_value(base: LogConfig, name: str) -> str:
    """The value a topic without an override gets (from the broker's ``log.*`` properties)."""
    field = TOPIC_CONFIG_KEYS[name].field
    if field is None:
        return _STORED_DEFAULTS[name]
    value = getattr(base, field)
    return ",".join(value) if isinstance(value, tuple) else str(value)


def broker_property(name: str) -> str | None:
    """The broker property that sets the default of topic config ``name`` (a synonym in DescribeConfigs)."""
    field = TOPIC_CONFIG_KEYS[name].field
    if field is None:
        return name
    return next(str(f.metadata["key"]) for f in dataclasses.fields(LogConfig) if f.name == field)


def config_properties(config: Config) -> dict[str, str | None]:
    """Every Kafka property of a typed config object with its value as a string (None: unset)."""
    result: dict[str, str | None] = {}
    for f in dataclasses.fields(config):
        key = f.metadata.get("key")
        if key is None:
            continue
        value = getattr(config, f.name)
        if isinstance(value, bool):
            result[key] = str(value).lower()
        elif isinstance(value, tuple):
            result[key] = ",".join(map(str, value))
        else:
            result[key] = None if value is None else str(value)
    return result
