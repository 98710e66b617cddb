"""Groups as the brokers' group coordinators know them: *protocol* groups (confluent-kafka, ``kcat -G``,
kafka-python members joined with JoinGroup/SyncGroup) and groups that only have offsets in ``__consumer_offsets``.

    listing = BrokerGroups(layout).list()
    listing.groups["stdg"]      # CoordinatorGroup("stdg", coordinator=0, state="Stable", members=(...))
    listing.notes               # ["broker 1 at 10.0.0.2:9092 did not answer ListGroups: ..."]

A broker lists only the groups it coordinates, so ListGroups goes to every live broker (from ZooKeeper) and
DescribeGroups to the broker that listed the group. Neither request creates ``__consumer_offsets`` (a
FindCoordinator would). A broker that cannot be asked leaves a note instead of failing the listing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import ConsumerProtocolAssignment, OffsetDeleteRequest

from metaq.admin.log_offsets import TopicPartition
from metaq.client.cluster import broker_endpoint
from metaq.client.connection import BrokerConnection
from metaq.client.request_codec import build_request
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.errors import AuthenticationError, MetaqError, for_code
from metaq.json_types import JsonObject
from metaq.protocol.apis import ApiKey
from metaq.protocol.messages import ApiResponse, ApiStruct
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

# What metaq's client sends: ListGroups v4 is the first with the group state; DescribeGroups v5+ only add
# flexible encoding.
MAX_LIST_GROUPS_VERSION = 4
MAX_DESCRIBE_GROUPS_VERSION = 4
MAX_DELETE_GROUPS_VERSION = 1  # v2 only adds flexible encoding
CONSUMER_PROTOCOL_TYPES = ("consumer", "")


@dataclass(frozen=True)
class CoordinatorMember:
    """A member as DescribeGroups tells it; ``assignment`` is decoded for the ``consumer`` protocol type."""

    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...] = ()

    def to_json(self) -> JsonObject:
        return {"member_id": self.member_id, "client_id": self.client_id, "host": self.host,
                "assignment": [list(tp) for tp in self.assignment]}


@dataclass(frozen=True)
class CoordinatorGroup:
    """A group a coordinator knows: ``state`` is Kafka's (Stable, Empty, PreparingRebalance, ...)."""

    group: str
    coordinator: int
    state: str
    protocol_type: str
    protocol: str = ""
    members: tuple[CoordinatorMember, ...] = ()

    @property
    def topics(self) -> set[str]:
        return {t for m in self.members for t, _ in m.assignment}

    def to_json(self) -> JsonObject:
        return {"coordinator": self.coordinator, "state": self.state, "protocol_type": self.protocol_type,
                "protocol": self.protocol, "members": [m.to_json() for m in self.members]}


@dataclass
class CoordinatorListing:
    groups: dict[str, CoordinatorGroup] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # brokers that could not be asked, and why


class CoordinatorGroups(Protocol):
    """What the admin functions need: :class:`BrokerGroups` or a test fake."""

    def list(self) -> CoordinatorListing: ...

    def delete(self, group: str, coordinator: int) -> int: ...

    def delete_offsets(self, group: str, coordinator: int,
                       partitions: Iterable[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]: ...


def decode_assignment(data: bytes | None) -> tuple[TopicPartition, ...]:
    """A ``consumer`` protocol MemberAssignment as sorted (topic, partition) pairs; () if empty or undecodable."""
    if not data:
        return ()
    try:
        assignment = ConsumerProtocolAssignment.decode(bytes(data))
        return tuple(sorted((tp.topic, tp.partition) for tp in assignment.partitions()))
    except Exception as e:  # the codec raises struct.error, ValueError...: show the member without one
        log.debug("undecodable member assignment %r: %r", bytes(data)[:32], e)
        return ()


def groups_from_responses(broker_id: int, listed: ApiResponse, described: ApiResponse) -> dict[str, CoordinatorGroup]:
    """The groups of one broker's ListGroups and DescribeGroups answers (a group DescribeGroups reports with an
    error, or as Dead because it went away in between, is left out)."""
    types = {g.group_id: g.protocol_type for g in listed.groups}
    result = {}
    for entry in described.groups:
        if entry.error_code or entry.group_state == "Dead":
            continue
        consumer = entry.protocol_type in CONSUMER_PROTOCOL_TYPES
        members = tuple(sorted((CoordinatorMember(m.member_id, m.client_id, m.client_host,
                                                  decode_assignment(m.member_assignment) if consumer else ())
                                for m in entry.members), key=lambda m: m.member_id))
        result[entry.group_id] = CoordinatorGroup(entry.group_id, broker_id, entry.group_state,
                                                  entry.protocol_type or types.get(entry.group_id, ""),
                                                  entry.protocol_data, members)
    return result


class BrokerGroups:
    """Blocking reads of every coordinator's groups; each call opens and closes its connections."""

    def __init__(self, layout: ZkLayout, *, timeout_ms: int = 5000, client_id: str = "metaq-admin",
                 security: SecurityConfig | None = None) -> None:
        self._layout = layout
        self._settings = ConnectionSettings(client_id=client_id, request_timeout_ms=timeout_ms,
                                            connect_timeout_ms=timeout_ms, security=security or SecurityConfig())

    def list(self) -> CoordinatorListing:
        listing = CoordinatorListing()
        protocol = self._settings.security_protocol
        for broker_id, info in sorted(self._layout.brokers().items()):
            address = broker_endpoint(info, protocol)
            if address is None:
                listing.notes.append(f"broker {broker_id} has no {protocol} listener")
                continue
            where = f"broker {broker_id} at {address[0]}:{address[1]}"
            try:
                listing.groups.update(self._ask(broker_id, *address))
            except AuthenticationError:
                raise  # the same for every broker: say it once, as an error
            except MetaqError as e:  # connection, protocol and version errors: list what the others know
                listing.notes.append(f"{where} did not answer ListGroups/DescribeGroups: {e}")
        return listing

    def _ask(self, broker_id: int, host: str, port: int) -> dict[str, CoordinatorGroup]:
        conn = self._settings.new_connection(host, port)
        try:
            conn.connect()
            listed = conn.send(ListGroupsRequest, build_request(
                ListGroupsRequest, _version(conn, ApiKey.LIST_GROUPS, MAX_LIST_GROUPS_VERSION), {}))
            if listed.error_code:
                raise for_code(listed.error_code)(f"ListGroups at broker {broker_id}: error {listed.error_code}")
            if not listed.groups:
                return {}
            described = conn.send(DescribeGroupsRequest, build_request(
                DescribeGroupsRequest, _version(conn, ApiKey.DESCRIBE_GROUPS, MAX_DESCRIBE_GROUPS_VERSION),
                {"groups": _ids(listed.groups)}))
            return groups_from_responses(broker_id, listed, described)
        finally:
            conn.close()


    def delete(self, group: str, coordinator: int) -> int:
        """DeleteGroups at the group's ``coordinator`` (a broker id, from :meth:`list`); the error code
        (0: deleted; NON_EMPTY_GROUP while it has members; GROUP_ID_NOT_FOUND)."""
        conn = self._connect(group, coordinator)
        try:
            answer = conn.send(DeleteGroupsRequest, build_request(
                DeleteGroupsRequest, _version(conn, ApiKey.DELETE_GROUPS, MAX_DELETE_GROUPS_VERSION),
                {"groups_names": [group]}))
            return int(next(r.error_code for r in answer.results if r.group_id == group))
        finally:
            conn.close()


    def delete_offsets(self, group: str, coordinator: int,
                       partitions: Iterable[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete at the group's ``coordinator`` (``kafka-consumer-groups --delete-offsets``): the group's
        error code and one per partition (GROUP_SUBSCRIBED_TO_TOPIC while a live member reads the topic)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        conn = self._connect(group, coordinator)
        try:
            answer = conn.send(OffsetDeleteRequest, build_request(
                OffsetDeleteRequest, _version(conn, ApiKey.OFFSET_DELETE, 0),
                {"group_id": group, "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                                               for t, ps in sorted(by_topic.items())]}))
            return int(answer.error_code), {(t.name, p.partition_index): int(p.error_code)
                                            for t in answer.topics for p in t.partitions}
        finally:
            conn.close()

    def _connect(self, group: str, coordinator: int) -> BrokerConnection:
        info = self._layout.brokers().get(coordinator)
        address = None if info is None else broker_endpoint(info, self._settings.security_protocol)
        if address is None:
            raise MetaqError(f"the coordinator of group {group!r} (broker {coordinator}) is not reachable now")
        conn = self._settings.new_connection(*address)
        conn.connect()
        return conn


def _ids(groups: Iterable[ApiStruct]) -> list[str]:
    return sorted(g.group_id for g in groups)


def _version(conn: BrokerConnection, api_key: int, highest: int) -> int:
    offered = conn.broker_versions.get(api_key)
    if offered is None or offered[0] > highest:
        raise MetaqError(f"broker {conn.address} does not offer {ApiKey(api_key).name} v0..{highest}")
    return min(offered[1], highest)
