"""Every ZooKeeper path of the Kafka 0.8 layout; no other code in the project spells a path.

All paths are relative to the chroot of ``zookeeper.connect``. Functions validate the names they put into a
path (so that ``"a/b"`` cannot address another node) and raise :class:`ConfigError` for a bad one::

    offset_path("etl", "clicks", 0)      # "/consumers/etl/offsets/clicks/0"
    split_connect("zk1:2181,zk2:2181/kafka")   # ("zk1:2181,zk2:2181", "/kafka")
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from metaq.errors import ConfigError

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONSUMERS = "/consumers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_TOPICS = "/config/topics"
CONFIG_CLIENTS = "/config/clients"
CONFIG_USERS = "/config/users"
CONFIG_BROKERS = "/config/brokers"
CONFIG_IPS = "/config/ips"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
OFFLINE_REPLICAS = "/metaq/offline_replicas"  # metaq's own: see zk_layout/log_dirs.py
# ACLs of Kafka's ZooKeeper-mode AclAuthorizer (KIP-11, KIP-290): see docs/zookeeper-layout.md
ACL_LITERAL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    ADMIN_DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    CONFIG_TOPICS,
    CONFIG_CLIENTS,
    CONFIG_USERS,
    CONFIG_BROKERS,
    CONFIG_IPS,
)
"""What a Kafka broker creates at start-up (``ZkData.PersistentZkPaths``). ``/feature`` (2.7+) is left out on
purpose: Kafka expects it to hold a FeatureZNode, and an empty one would break a real broker's start-up."""

MAX_TOPIC_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")


# -- name validation -------------------------------------------------------------------------------


def validate_topic(topic: str) -> str:
    """Kafka's topic rules: ``[a-zA-Z0-9._-]``, 1..249 characters, not ``.`` or ``..``. Returns the topic."""
    if not isinstance(topic, str) or not topic:
        raise ConfigError(f"topic name {topic!r}: must be a non-empty string")
    if topic in (".", ".."):
        raise ConfigError(f"topic name {topic!r}: '.' and '..' are not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise ConfigError(f"topic name {topic[:40]!r}...: longer than {MAX_TOPIC_LENGTH} characters")
    if not _LEGAL_NAME.fullmatch(topic):
        raise ConfigError(f"topic name {topic!r}: only ASCII letters, digits, '.', '_' and '-' are allowed")
    return topic


def validate_group(group: str) -> str:
    """Kafka's ``group.id`` rule (``ConsumerConfig.validateChars``): ``[a-zA-Z0-9._-]``; non-empty here
    because an empty group would address ``/consumers//ids``. Returns the group."""
    if not isinstance(group, str) or not _LEGAL_NAME.fullmatch(group) or group in (".", ".."):
        raise ConfigError(f"config 'group.id': {group!r} must be non-empty ASCII letters, digits, '.', '_' or '-'")
    return group


def _validate_node_name(kind: str, name: str) -> str:
    """Consumer and thread ids are not validated by Kafka (they contain host names); we only refuse what
    would not be a single node name."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise ConfigError(f"{kind} {name!r}: must be a non-empty node name without '/'")
    return name


INT32_MAX = 2**31 - 1


def _validate_id(kind: str, value: int) -> int:
    """Broker ids and partitions are int32 on the Kafka wire: a larger one could never be served."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
        raise ConfigError(f"{kind} {value!r}: must be an integer in 0..{INT32_MAX}")
    return value


# -- brokers and topics ----------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{_validate_id('broker id', broker_id)}"


def offline_replicas_path(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{_validate_id('broker id', broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{validate_topic(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{_validate_id('partition', partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def delete_topic_marker_path(topic: str) -> str:
    return f"{ADMIN_DELETE_TOPICS}/{validate_topic(topic)}"


CONFIG_CHANGE_PREFIX = "config_change_"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{validate_topic(topic)}"


# -- ACLs ------------------------------------------------------------------------------------------


def acl_resource_path(root: str, type_name: str, name: str) -> str:
    """``<root>/<Type>/<name>``: ``root`` is :data:`ACL_LITERAL` or :data:`ACL_PREFIXED`, ``type_name`` Kafka's
    PascalCase resource type (``Topic``). The name may be anything a single node name can hold."""
    return f"{root}/{_validate_node_name('resource type', type_name)}/{_validate_node_name(type_name + ' name', name)}"


# -- users (SCRAM credentials) ----------------------------------------------------------------------


def sanitize_user(user: str) -> str:
    """A user name as Kafka's ``Sanitizer`` writes it into a node name (URL-encoded, ``*`` as ``%2A``)."""
    if not isinstance(user, str) or not user or user == "<default>":
        raise ConfigError(f"user name {user!r}: must be a non-empty name (not <default>)")
    return quote(user, safe="-._~")


def desanitize_user(name: str) -> str:
    return unquote(name)


def user_config_path(user: str) -> str:
    """``/config/users/<sanitized user>``: SCRAM credentials (and quotas) of a user."""
    return f"{CONFIG_USERS}/{sanitize_user(user)}"


# -- client quotas and dynamic broker configs ------------------------------------------------------

DEFAULT_ENTITY = "<default>"  # Kafka's ZooKeeperInternals.DEFAULT_STRING, written as is


def sanitize_entity(kind: str, name: str) -> str:
    """A user or client id as a node name (Kafka's ``Sanitizer``), ``<default>`` kept as it is."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{kind} {name!r}: must be a non-empty name or {DEFAULT_ENTITY}")
    return name if name == DEFAULT_ENTITY else quote(name, safe="-._~")


def client_quota_entity_path(user: str | None, client_id: str | None) -> str:
    """``/config/users/<u>``, ``/config/users/<u>/clients/<c>`` or ``/config/clients/<c>`` (Kafka's
    quota entities, names sanitized, ``<default>`` for a default)."""
    if user is not None and client_id is not None:
        return f"{CONFIG_USERS}/{sanitize_entity('user', user)}/clients/{sanitize_entity('client id', client_id)}"
    if user is not None:
        return f"{CONFIG_USERS}/{sanitize_entity('user', user)}"
    if client_id is not None:
        return f"{CONFIG_CLIENTS}/{sanitize_entity('client id', client_id)}"
    raise ConfigError("a quota entity names a user, a client id, or both")


def client_quota_entity_change(user: str | None, client_id: str | None) -> str:
    """The ``entity_path`` of its ``/config/changes`` notification (the path below ``/config``)."""
    return client_quota_entity_path(user, client_id)[len(CONFIG) + 1:]


def user_clients_path(user: str) -> str:
    """``/config/users/<u>/clients``: the (user, client id) entities of a user."""
    return f"{CONFIG_USERS}/{sanitize_entity('user', user)}/clients"


def broker_config_path(broker: str) -> str:
    """``/config/brokers/<id>`` or ``/config/brokers/<default>``: a broker's dynamic configs."""
    if broker != DEFAULT_ENTITY and not broker.isdigit():
        raise ConfigError(f"broker {broker!r}: must be a broker id or {DEFAULT_ENTITY}")
    return f"{CONFIG_BROKERS}/{broker}"


# -- consumers -------------------------------------------------------------------------------------


def consumer_group_path(group: str) -> str:
    return f"{CONSUMERS}/{validate_group(group)}"


def consumer_ids_path(group: str) -> str:
    return f"{consumer_group_path(group)}/ids"


def consumer_id_path(group: str, consumer_id: str) -> str:
    return f"{consumer_ids_path(group)}/{_validate_node_name('consumer id', consumer_id)}"


def owners_path(group: str) -> str:
    return f"{consumer_group_path(group)}/owners"


def topic_owners_path(group: str, topic: str) -> str:
    return f"{owners_path(group)}/{validate_topic(topic)}"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"{topic_owners_path(group, topic)}/{_validate_id('partition', partition)}"


def migration_path(group: str) -> str:
    """The live migration marker of a group (zk_layout.migration)."""
    return f"{consumer_group_path(group)}/migration"


def migration_member_path(group: str, consumer_id: str) -> str:
    """A member's coordination mode during (and after) a live migration (ephemeral)."""
    return f"{migration_path(group)}/{_validate_node_name('consumer id', consumer_id)}"


def offsets_path(group: str) -> str:
    return f"{consumer_group_path(group)}/offsets"


def topic_offsets_path(group: str, topic: str) -> str:
    return f"{offsets_path(group)}/{validate_topic(topic)}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"{topic_offsets_path(group, topic)}/{_validate_id('partition', partition)}"


# -- connect strings -------------------------------------------------------------------------------


def split_connect(connect: str) -> tuple[str, str]:
    """Split ``zookeeper.connect`` into the host list and the chroot (``""`` when there is none).

    ``"zk1:2181,zk2:2181/kafka/prod"`` -> ``("zk1:2181,zk2:2181", "/kafka/prod")``. As in ZooKeeper's
    ``ConnectStringParser``, a lone trailing ``/`` means no chroot, and a chroot must be a valid path (no
    empty, ``.`` or ``..`` segment, no trailing slash).
    """
    if not isinstance(connect, str):
        raise ConfigError(f"config 'zookeeper.connect': {connect!r} is not a string")
    hosts, slash, rest = connect.strip().partition("/")
    entries = [entry.strip() for entry in hosts.split(",")]
    if not hosts.strip() or any(not entry for entry in entries):
        raise ConfigError(f"config 'zookeeper.connect': {connect!r} must be host:port[,host:port...][/chroot]")
    hosts = ",".join(entries)
    if not slash or not rest:
        return hosts, ""
    segments = rest.split("/")
    if any(seg in ("", ".", "..") or "\x00" in seg for seg in segments):
        raise ConfigError(f"config 'zookeeper.connect': invalid chroot '/{rest}' in {connect!r}")
    return hosts, "/" + rest
