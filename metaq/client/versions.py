"""The Kafka API versions metaq's client speaks, and the choice of one version per API for a broker.

A connection learns the broker's ranges from ApiVersions and then uses, per API, the highest version both
sides speak (as librdkafka and kafka-python do)::

    pick_version(ApiKey.PRODUCE, {0: (0, 9)})     # 7: metaq speaks Produce 3..7
    pick_version(ApiKey.PRODUCE, {0: (0, 2)})     # UnsupportedVersionError: no overlap

Brokers before Kafka 0.10.0 have no ApiVersions: they close the connection on it. The connection then takes
the ranges of the release ``broker.version.fallback`` names (librdkafka's property and default, 0.10.0), from
:data:`FALLBACK_VERSIONS` (docs/legacy-wire.md has the table and its sources). Fetch v0..3 answers carry
message sets v0/v1, which metaq's decoder reads (metaq/protocol/legacy.py); ListOffsets v0 answers a list
(see metaq/client/cluster.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from metaq.errors import ConfigError, UnsupportedVersionError
from metaq.protocol.apis import ApiKey, api_name

__all__ = ["API_VERSIONS_PROBE", "CLIENT_VERSIONS", "DEFAULT_FALLBACK", "FALLBACK_VERSIONS", "ApiKey", "api_name",
           "fallback_release", "fallback_versions", "pick_version"]


CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 7),  # 3 is the first with record batch v2; the producer converts for 0..2 (message sets)
    ApiKey.FETCH: (0, 11),  # 4 is the first with record batch v2; 0..3 answer message sets v0/v1
    ApiKey.LIST_OFFSETS: (0, 2),  # 0: Kafka 0.8's OffsetRequest (a list of offsets)
    ApiKey.METADATA: (1, 4),  # non-flexible; 0 means "all topics" differently, so start at 1
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (0, 5),  # 0 and 1 have the same layout (0: ZooKeeper offsets on Kafka 0.8.1)
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 3),  # replica fetchers (replica_id from v3)
    ApiKey.SASL_HANDSHAKE: (1, 1),  # v1: the tokens go in SaslAuthenticate, not as raw frames
    ApiKey.SASL_AUTHENTICATE: (0, 1),
    ApiKey.INIT_PRODUCER_ID: (0, 1),  # an idempotent producer's id (no transactional id)
    # the group protocol (metaq.consumer.coordination); JoinGroup v4 is KIP-394's member-id-required flow,
    # v5 / SyncGroup v3 / Heartbeat v3 / LeaveGroup v3 carry group.instance.id (KIP-345)
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),  # a broker's transaction coordinator to other brokers (flexible)
    # metaq brokers log-dirs / move-replica-dir (metaq/admin/log_dirs.py): v4 has the volume's bytes (flexible)
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 0),  # metaq quotas --bootstrap-server (metaq/admin/quotas.py)
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 0),
    # metaq topics reassign --bootstrap-server (metaq/admin/reassign_brokers.py): both flexible from v0
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0),  # its throttles (a topic's and a broker's)
}
"""API key -> (min, max) version metaq's client can encode and decode; all but ApiVersions 3, WriteTxnMarkers 1,
DescribeLogDirs 2+, AlterReplicaLogDirs 2 and Alter/ListPartitionReassignments non-flexible."""

_V0_8_0: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 0), ApiKey.FETCH: (0, 0), ApiKey.LIST_OFFSETS: (0, 0), ApiKey.METADATA: (0, 0)}
_V0_8_1 = {**_V0_8_0, ApiKey.OFFSET_COMMIT: (0, 0), ApiKey.OFFSET_FETCH: (0, 0)}
_V0_8_2 = {**_V0_8_1, ApiKey.OFFSET_COMMIT: (0, 1), ApiKey.OFFSET_FETCH: (0, 1), ApiKey.FIND_COORDINATOR: (0, 0)}
_V0_9_0 = {**_V0_8_2, ApiKey.PRODUCE: (0, 1), ApiKey.FETCH: (0, 1), ApiKey.OFFSET_COMMIT: (0, 2),
           ApiKey.JOIN_GROUP: (0, 0), ApiKey.SYNC_GROUP: (0, 0), ApiKey.HEARTBEAT: (0, 0), ApiKey.LEAVE_GROUP: (0, 0),
           ApiKey.LIST_GROUPS: (0, 0), ApiKey.DESCRIBE_GROUPS: (0, 0)}
_V0_10_0 = {**_V0_9_0, ApiKey.PRODUCE: (0, 2), ApiKey.FETCH: (0, 2), ApiKey.METADATA: (0, 1),
            ApiKey.SASL_HANDSHAKE: (0, 0), ApiKey.API_VERSIONS: (0, 0)}
FALLBACK_VERSIONS: dict[str, dict[int, tuple[int, int]]] = {
    "0.8.0": _V0_8_0, "0.8.1": _V0_8_1, "0.8.2": _V0_8_2, "0.9.0": _V0_9_0, "0.10.0": _V0_10_0}
"""API key -> (min, max) versions of the Kafka releases without ApiVersions (and 0.10.0, librdkafka's default
fallback), by ``broker.version.fallback`` (its first three parts: ``0.9.0.1`` is ``0.9.0``)."""
DEFAULT_FALLBACK = "0.10.0"


def fallback_versions(release: str) -> dict[int, tuple[int, int]]:
    """The API ranges of ``release`` (``broker.version.fallback``); ConfigError for one not in the table."""
    key = ".".join(release.split(".")[:3])
    try:
        return dict(FALLBACK_VERSIONS[key])
    except KeyError:
        raise ConfigError(f"broker.version.fallback={release!r}: one of {', '.join(FALLBACK_VERSIONS)} "
                          f"(brokers from 0.10.0 on answer ApiVersions)") from None


def fallback_release(value: str) -> str | None:
    """A config check of ``broker.version.fallback``: None, or what is wrong with ``value``."""
    if ".".join(value.split(".")[:3]) not in FALLBACK_VERSIONS:
        return f"must be one of {', '.join(FALLBACK_VERSIONS)} (brokers from 0.10.0 on answer ApiVersions)"
    return None


API_VERSIONS_PROBE = 3
"""The ApiVersions version sent first; a broker that does not speak it answers error 35 and we retry with 0."""


def pick_version(api_key: int, broker_versions: Mapping[int, tuple[int, int]]) -> int:
    """The highest version of ``api_key`` that both metaq and the broker speak."""
    ours = CLIENT_VERSIONS.get(api_key)
    if ours is None:
        raise UnsupportedVersionError(f"metaq's client does not speak {api_name(api_key)} (key {api_key})")
    theirs = broker_versions.get(api_key)
    if theirs is None:
        raise UnsupportedVersionError(f"the broker does not offer {api_name(api_key)} (key {api_key})")
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    if low > high:
        raise UnsupportedVersionError(
            f"{api_name(api_key)}: metaq speaks v{ours[0]}..{ours[1]}, the broker v{theirs[0]}..{theirs[1]}"
        )
    return high
