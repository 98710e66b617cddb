"""ACL types and the byte codecs of Kafka's ZooKeeper-mode AclAuthorizer (KIP-11, KIP-290 prefixed patterns).

Pure code over bytes, like the other ``zk_layout.*_formats`` codecs. The enums carry Kafka's wire codes (DescribeAcls,
CreateAcls, DeleteAcls) and Kafka's ZooKeeper spelling (``Topic``, ``Read``, ``Allow``)::

    AclEntry("User:alice", "*", AclOperation.READ, AclPermission.ALLOW)
    encode_acls({entry})        # b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",...}]}'
    decode_acls("/kafka-acl/Topic/orders", raw)

Change notifications (``/kafka-acl-changes/acl_changes_<seq>``): ``TOPIC:orders`` for a literal pattern, and
``{"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}`` under
``/kafka-acl-extended-changes``, as Kafka 2.4+ writes them (resource type names are read case-insensitively,
so Kafka 2.0's ``Topic:orders`` reads too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, Self

from metaq.errors import ConfigError, MalformedNodeError

ACL_NODE_VERSION: Final = 1
CHANGE_EVENT_VERSION: Final = 1
WILDCARD: Final = "*"
"""The wildcard resource name (every topic, group...), and the wildcard host."""
WILDCARD_PRINCIPAL: Final = "User:*"
CLUSTER_NAME: Final = "kafka-cluster"
"""The one Cluster resource's name."""


class _KafkaEnum(IntEnum):
    """An enum with Kafka's code as value; ``kafka_name`` is Kafka's PascalCase spelling (ZooKeeper nodes,
    kafka-acls output), and :meth:`parse` accepts it in any case, with or without underscores."""

    @property
    def kafka_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def parse(cls, text: str, what: str) -> Self:
        key = text.replace("_", "").replace("-", "").upper() if isinstance(text, str) else ""
        for member in cls:
            if member.name.replace("_", "") == key and member.value > 1:  # UNKNOWN and ANY are filters only
                return member
        choices = ", ".join(m.kafka_name for m in cls if m.value > 1)
        raise ConfigError(f"{what} {text!r}: must be one of {choices}")


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


@dataclass(frozen=True, order=True)
class ResourcePattern:
    """A resource an ACL is attached to: ``(TOPIC, "orders", LITERAL)``, ``(GROUP, "etl-", PREFIXED)``,
    ``(TOPIC, "*", LITERAL)`` (every topic)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.resource_type.value < 2:
            raise ConfigError(f"resource type {self.resource_type.kafka_name}: not a concrete resource type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ConfigError(f"pattern type {self.pattern_type.kafka_name}: must be Literal or Prefixed")
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigError(f"{self.resource_type.kafka_name} resource name {self.name!r}: must be non-empty, "
                              "without '/'")
        if self.pattern_type is PatternType.PREFIXED and self.name == WILDCARD:
            raise ConfigError("a prefixed pattern cannot be '*' (use the literal wildcard)")

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, order=True)
class AclEntry:
    """One ACL of a resource: who (principal, host) may or may not (permission) do what (operation)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def __post_init__(self) -> None:
        kind, sep, name = self.principal.partition(":") if isinstance(self.principal, str) else ("", "", "")
        if not sep or not kind or not name:
            raise ConfigError(f"principal {self.principal!r}: must be <type>:<name>, e.g. User:alice")
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"host {self.host!r}: must be an address or '*'")
        if self.operation.value < 2 or self.permission.value < 2:
            raise ConfigError(f"ACL {self.describe()}: operation and permission must be concrete")

    def describe(self) -> str:
        """kafka-acls' wording: ``User:alice has Allow permission for operations: Read from hosts: *``."""
        return (f"{self.principal} has {self.permission.kafka_name} permission for operations: "
                f"{self.operation.kafka_name} from hosts: {self.host}")

    def to_json(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": self.permission.kafka_name,
                "operation": self.operation.kafka_name, "host": self.host}


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json_object(path: str, raw: bytes | None) -> dict[str, Any]:  # json.loads: any JSON value
    if raw is None:
        raise MalformedNodeError(path, raw, "the node has no data")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise MalformedNodeError(path, raw, f"not UTF-8 JSON ({e})") from e
    if not isinstance(obj, dict):
        raise MalformedNodeError(path, raw, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def encode_acls(acls: frozenset[AclEntry] | set[AclEntry]) -> bytes:
    """Kafka's ``ResourceZNode.encode``, entries in a stable order."""
    return _dumps({"version": ACL_NODE_VERSION, "acls": [entry.to_json() for entry in sorted(acls)]})


def decode_acls(path: str, raw: bytes | None) -> frozenset[AclEntry]:
    """The ACLs of one resource node; anything but Kafka's version-1 format raises :class:`MalformedNodeError`."""
    obj = _json_object(path, raw)
    if obj.get("version") != ACL_NODE_VERSION:
        raise MalformedNodeError(path, raw, f"unsupported version {obj.get('version')!r} (expected 1)")
    entries = obj.get("acls")
    if not isinstance(entries, list):
        raise MalformedNodeError(path, raw, "missing list 'acls'")
    acls = set()
    for index, item in enumerate(entries):
        fields = ("principal", "permissionType", "operation", "host")
        if not isinstance(item, dict) or any(not isinstance(item.get(key), str) for key in fields):
            raise MalformedNodeError(path, raw, f"acls[{index}]: needs string keys {', '.join(fields)}")
        try:
            acls.add(AclEntry(item["principal"], item["host"], AclOperation.parse(item["operation"], "operation"),
                              AclPermission.parse(item["permissionType"], "permissionType")))
        except ConfigError as e:
            raise MalformedNodeError(path, raw, f"acls[{index}]: {e}") from e
    return frozenset(acls)


def encode_literal_change(pattern: ResourcePattern) -> bytes:
    """Kafka's ``LiteralAclChangeStore.encode``: ``<RESOURCE_TYPE>:<name>``."""
    if pattern.pattern_type is not PatternType.LITERAL:
        raise ConfigError(f"{pattern}: only a literal pattern goes to the literal change store")
    return f"{pattern.resource_type.name}:{pattern.name}".encode()


def decode_literal_change(path: str, raw: bytes | None) -> ResourcePattern:
    try:
        text = (raw or b"").decode("utf-8")
        type_name, sep, name = text.partition(":")
        if not sep:
            raise ConfigError("expected <ResourceType>:<name>")
        return ResourcePattern(ResourceType.parse(type_name, "resource type"), name, PatternType.LITERAL)
    except (UnicodeDecodeError, ConfigError) as e:
        raise MalformedNodeError(path, raw, str(e)) from e


def encode_extended_change(pattern: ResourcePattern) -> bytes:
    """Kafka's ``ExtendedAclChangeStore.encode`` (an ``ExtendedAclChangeEvent``), keys in Kafka's order."""
    if pattern.pattern_type is PatternType.LITERAL:
        raise ConfigError(f"{pattern}: a literal pattern goes to the literal change store")
    return _dumps({"version": CHANGE_EVENT_VERSION, "resourceType": pattern.resource_type.name,
                   "name": pattern.name, "patternType": pattern.pattern_type.name})


def decode_extended_change(path: str, raw: bytes | None) -> ResourcePattern:
    obj = _json_object(path, raw)
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CHANGE_EVENT_VERSION:
        raise MalformedNodeError(path, raw, f"unsupported version {version!r} (expected 1)")
    try:
        return ResourcePattern(ResourceType.parse(obj.get("resourceType", ""), "resourceType"), obj.get("name", ""),
                               PatternType.parse(obj.get("patternType", ""), "patternType"))
    except ConfigError as e:
        raise MalformedNodeError(path, raw, str(e)) from e
