"""Codecs of a topic's nodes: its assignment, each partition's state, its config overrides and the config change
notifications (``/brokers/topics/<t>``, ``.../partitions/<p>/state``, ``/config/topics/<t>``, ``/config/changes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Self
from urllib.parse import unquote

from zk_layout._codec import _REQUIRED, _dumps, _encode_partition_map, _Fields, _Node, _partition_map

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


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
        obj: dict[str, object] = {"version": self.version, "partitions": _encode_partition_map(self.partitions)}
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
        obj: dict[str, object] = {
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
        return cls(config={k: str(v) for k, v in config.items()}, version=fields.int("version", 1))


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
