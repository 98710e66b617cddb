"""The Kafka API versions metaq's client speaks, and the choice of one version per API for a broker.

A connection learns the broker's ranges from ApiVersions and then uses, per API, the highest version both
sides speak (as librdkafka and kafka-python do)::

    pick_version(ApiKey.PRODUCE, {0: (0, 9)})     # 7: metaq speaks Produce 3..7
    pick_version(ApiKey.PRODUCE, {0: (0, 2)})     # UnsupportedVersionError: no overlap
"""

from __future__ import annotations

from collections.abc import Mapping

from metaq.errors import UnsupportedVersionError
from metaq.protocol.apis import ApiKey, api_name

__all__ = ["API_VERSIONS_PROBE", "CLIENT_VERSIONS", "ApiKey", "api_name", "pick_version"]


CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 7),  # 3 is the first with record batch v2
    ApiKey.FETCH: (4, 11),  # 4 is the first with record batch v2
    ApiKey.LIST_OFFSETS: (1, 2),
    ApiKey.METADATA: (1, 4),  # non-flexible; 0 means "all topics" differently, so start at 1
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (3, 3),  # replica fetchers (replica_id from v3)
    ApiKey.SASL_HANDSHAKE: (1, 1),  # v1: the tokens go in SaslAuthenticate, not as raw frames
    ApiKey.SASL_AUTHENTICATE: (0, 1),
    ApiKey.INIT_PRODUCER_ID: (0, 1),  # an idempotent producer's id (no transactional id)
}
"""API key -> (min, max) version metaq's client can encode and decode; all but ApiVersions 3 non-flexible."""

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
