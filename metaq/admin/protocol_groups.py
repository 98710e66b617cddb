"""What a group's coordinator knows about a *protocol* group (confluent-kafka, kcat -G, kafka-python: members
that join through JoinGroup/SyncGroup and exist only in the broker), asked with DescribeGroups.

    ProtocolGroupReader(layout).describe("stdg")
    # ProtocolGroup(state="Stable", members=(ProtocolMember("rdkafka-1f..", "rdkafka", "/127.0.0.1",
    #               (("clicks", 0), ("clicks", 1))),), note=None)

A broker that does not offer DescribeGroups (API key 15) in ApiVersions gets ``members=None`` and the note
``unknown (no DescribeGroups)``: views show that instead of members, and show members as soon as the broker
offers the API, without a change here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kafka.protocol.admin import DescribeGroupsRequest

from metaq.admin.broker_groups import decode_assignment
from metaq.admin.log_offsets import TopicPartition
from metaq.client.group_offsets import OFFSETS_TOPIC
from metaq.client.offsets_channel import OffsetsChannel
from metaq.client.request_codec import build_request
from metaq.client.security import SecurityConfig
from metaq.errors import BrokerConnectionError, CoordinatorError, MetaqError, ProtocolError, for_code
from metaq.protocol.messages import ApiResponse
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

DESCRIBE_GROUPS = 15
MAX_DESCRIBE_GROUPS_VERSION = 4  # v5+ are flexible versions, which metaq's client does not decode
NO_DESCRIBE_GROUPS = "unknown (no DescribeGroups)"


@dataclass(frozen=True)
class ProtocolMember:
    """A member as DescribeGroups tells it; ``assignment`` is decoded for the ``consumer`` protocol type."""

    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ProtocolGroup:
    """The coordinator's view of a group; ``members`` None when it cannot be known (``note`` says why)."""

    state: str | None
    members: tuple[ProtocolMember, ...] | None
    note: str | None = None

    @classmethod
    def unknown(cls, note: str) -> ProtocolGroup:
        return cls(None, None, note)


def group_from_response(response: ApiResponse, group: str) -> ProtocolGroup:
    """The one group of a DescribeGroups response; ProtocolError when the coordinator answered an error."""
    described = [g for g in response.groups if g.group_id == group]
    if not described:
        raise ProtocolError(f"DescribeGroups answered no entry for group {group!r}")
    entry = described[0]
    if entry.error_code:
        raise for_code(entry.error_code)(f"DescribeGroups for group {group!r}: error {entry.error_code}")
    consumer = entry.protocol_type in ("consumer", "")
    members = tuple(sorted(
        (ProtocolMember(m.member_id, m.client_id, m.client_host,
                        decode_assignment(m.member_assignment) if consumer else ()) for m in entry.members),
        key=lambda m: m.member_id))
    return ProtocolGroup(entry.group_state or None, members)


def describe_version(broker_versions: dict[int, tuple[int, int]]) -> int | None:
    """The DescribeGroups version to send, or None when the broker offers none metaq decodes."""
    offered = broker_versions.get(DESCRIBE_GROUPS)
    if offered is None or offered[0] > MAX_DESCRIBE_GROUPS_VERSION:
        return None
    return min(offered[1], MAX_DESCRIBE_GROUPS_VERSION)


class ProtocolGroupReader:
    """Asks a group's coordinator (found as the offsets channel finds it) for the group's members."""

    def __init__(self, layout: ZkLayout, *, timeout_ms: int = 5000, client_id: str = "metaq-admin",
                 security: SecurityConfig | None = None) -> None:
        self._layout = layout
        self._timeout_ms = timeout_ms
        self._client_id = client_id
        self._security = security

    def describe(self, group: str) -> ProtocolGroup:
        """Never raises for an unreachable or older coordinator: the result's note says what is unknown.
        Without ``__consumer_offsets`` no group has used a coordinator, and asking would create the topic."""
        if self._layout.topic_assignment(OFFSETS_TOPIC) is None:
            return ProtocolGroup.unknown(f"unknown (no {OFFSETS_TOPIC} topic: no group has used a coordinator)")
        channel = OffsetsChannel(self._layout, group, client_id=self._client_id, socket_timeout_ms=self._timeout_ms,
                                 security=self._security)
        try:
            conn = channel.connection()
            version = describe_version(conn.broker_versions)
            if version is None:
                return ProtocolGroup.unknown(NO_DESCRIBE_GROUPS)
            request = build_request(DescribeGroupsRequest, version, {"groups": [group]})
            return group_from_response(conn.send(DescribeGroupsRequest, request), group)
        except (CoordinatorError, BrokerConnectionError) as e:
            return ProtocolGroup.unknown(f"unknown (coordinator unavailable: {e})")
        except MetaqError as e:
            return ProtocolGroup.unknown(f"unknown ({e})")
        finally:
            channel.close()
