"""The offsets channel: a blocking connection to one group's coordinator, and the OffsetCommit / OffsetFetch
requests sent over it from outside the group protocol.

    channel = OffsetsChannel(layout, "etl", client_id="etl", socket_timeout_ms=5000)
    response = channel.send(OffsetCommitRequest, commit_request("etl", {("clicks", 0): 42}))
    commit_codes(response, "etl", {("clicks", 0): 42})     # {("clicks", 0): 0}: error code per partition

The channel is Kafka 0.8's ``channelToOffsetManager``: a coordinator lookup (FindCoordinator) sent to a randomly
chosen live broker of ``layout`` (ZooKeeper's ``/brokers/ids``, or the brokers of a Metadata answer:
:class:`metaq.client.metadata.MetadataLayout`), then a connection to the coordinator it names. On
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or a connection error the channel is
dropped and the next attempt looks the coordinator up again (:func:`look_again`). Its users: the consumer's
``offsets.storage=kafka`` store and group member (metaq.consumer), the group offsets client
(metaq.client.group_offsets) and the ops tools' group views.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from metaq.client.cluster import TopicPartition, broker_endpoint
from metaq.client.connection import BrokerConnection
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK
from metaq.errors import (
    BrokerConnectionError,
    CoordinatorError,
    ErrorCode,
    ProtocolError,
    UnsupportedVersionError,
    for_code,
)
from metaq.protocol.messages import ApiRequest, ApiResponse, RequestFields
from zk_layout import BrokerInfo

log = logging.getLogger(__name__)

__all__ = ["COMMIT_VERSION", "BrokerDirectory", "OffsetsChannel", "check_code", "commit_codes", "commit_request",
           "commit_version", "fetched_offsets", "look_again"]


class BrokerDirectory(Protocol):
    """Where the channel finds a broker to ask for the coordinator: :class:`zk_layout.ZkLayout` or
    :class:`metaq.client.metadata.MetadataLayout`."""

    def brokers(self) -> dict[int, BrokerInfo]: ...


COMMIT_VERSION = 2  # generation -1 / member "" / retention -1: a commit from outside the group protocol


def look_again(code: int) -> bool:
    """Whether ``code`` says the coordinator moved, is loading or is unavailable (look it up again)."""
    return bool(code) and for_code(code).group_coordinator


def check_code(code: int, context: str) -> None:
    if look_again(code):
        raise CoordinatorError(code, context)
    if code:
        cls = for_code(code)
        raise cls(f"{cls.message} ({code}) {context}")


def commit_request(group: str, offsets: Mapping[TopicPartition, int], version: int = COMMIT_VERSION) -> ApiRequest:
    """An OffsetCommit from outside the group protocol (generation -1, no member, no retention, no
    timestamp): v2, or v1 / v0 for a Kafka 0.8.2 / 0.8.1 coordinator (v0: stored in ZooKeeper by the
    broker). kafka-python leaves out the fields a version lacks."""
    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    request: ApiRequest = OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            partition(partition_index=p, committed_offset=o, committed_metadata="", commit_timestamp=-1)
            for (t, p), o in sorted(offsets.items()) if t == topic])
            for topic in sorted({t for t, _ in offsets})])
    return request


def commit_version(broker_range: tuple[int, int]) -> int:
    """The OffsetCommit version to send a coordinator offering ``broker_range``: v2 (see
    :data:`COMMIT_VERSION`), or the highest it has below (Kafka 0.8.x); UnsupportedVersionError without."""
    low, high = broker_range
    version = min(COMMIT_VERSION, high)
    if version < low or version < 0:
        raise UnsupportedVersionError(f"the coordinator offers OffsetCommit v{low}..{high}, metaq sends "
                                      f"v0..{COMMIT_VERSION} from outside the group protocol")
    return version


def commit_codes(response: ApiResponse, group: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Error code per partition of an OffsetCommit answer; every partition sent must be answered."""
    codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
    missing = set(offsets) - set(codes)
    if missing:
        raise ProtocolError(f"OffsetCommit response for group {group} lacks {sorted(missing)}")
    return codes


def fetched_offsets(response: ApiResponse, context: str) -> dict[TopicPartition, int]:
    """Committed offsets of an OffsetFetch answer (group-level and partition errors raised; partitions
    without an offset left out)."""
    check_code(getattr(response, "error_code", 0) or 0, context)  # v2+: group-level errors
    found: dict[TopicPartition, int] = {}
    for topic in response.topics:
        for part in topic.partitions:
            check_code(part.error_code, f"{context} ({topic.name}-{part.partition_index})")
            if part.committed_offset >= 0:
                found[(topic.name, part.partition_index)] = part.committed_offset
    return found


class OffsetsChannel:
    """A blocking connection to one group's coordinator, (re)established on demand.

    Not thread-safe: the store serialises its use. :meth:`close` may be called from any thread and
    interrupts a blocked request.
    """

    def __init__(self, layout: BrokerDirectory, group: str, *, client_id: str, socket_timeout_ms: int,
                 security: SecurityConfig | None = None, broker_version_fallback: str = DEFAULT_FALLBACK) -> None:
        self._layout = layout
        self._group = group
        self._settings = ConnectionSettings(client_id=client_id, request_timeout_ms=socket_timeout_ms,
                                            connect_timeout_ms=socket_timeout_ms,
                                            broker_version_fallback=broker_version_fallback,
                                            security=security or SecurityConfig())
        self._conn: BrokerConnection | None = None
        self.coordinator: tuple[int, str, int] | None = None  # (node id, host, port) once found
        self.lookups = 0

    def connection(self) -> BrokerConnection:
        """The coordinator's connection: one coordinator lookup at a random live broker when there is none."""
        conn = self._conn
        if conn is not None and conn.is_connected:
            return conn
        self._conn = self._lookup()
        return self._conn

    def _connect(self, host: str, port: int) -> BrokerConnection:
        return self._settings.open(host, port)

    def _any_broker(self) -> BrokerConnection:
        """channelToAnyBroker: the live brokers in random order, the first that accepts a connection."""
        protocol = self._settings.security_protocol
        brokers = [a for a in (broker_endpoint(b, protocol) for b in self._layout.brokers().values()) if a]
        random.shuffle(brokers)
        errors = []
        for host, port in brokers:
            try:
                return self._connect(host, port)
            except BrokerConnectionError as e:
                errors.append(str(e))
        raise BrokerConnectionError(f"no live broker accepts a connection for the coordinator lookup of group "
                                    f"{self._group} ({len(brokers)} registered): {'; '.join(errors) or 'none'}")

    def _lookup(self) -> BrokerConnection:
        self.lookups += 1
        first = self._any_broker()
        query: BrokerConnection | None = first  # closed at the end unless it is the coordinator
        try:
            response = first.send(FindCoordinatorRequest, {"key": self._group, "key_type": 0})
            check_code(response.error_code, f"from the coordinator lookup of group {self._group} at {first.address}")
            if response.node_id < 0 or not response.host or response.port <= 0:
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       f"for group {self._group}: no coordinator named")
            self.coordinator = (response.node_id, response.host, response.port)
            if (response.host, response.port) == (first.host, first.port):
                conn, query = first, None  # the random broker is the coordinator: keep its connection
            else:
                conn = self._connect(response.host, response.port)
        finally:
            if query is not None:
                query.close()
        log.info("group %s: offsets channel to coordinator %d at %s", self._group, response.node_id, conn.address)
        return conn

    def send(self, request_class: type[ApiMessage], request: RequestFields | ApiMessage) -> ApiResponse:
        """One request over the channel; any failure drops the channel (the next call looks up again)."""
        conn = self.connection()
        try:
            return conn.send(request_class, request)
        except (BrokerConnectionError, ProtocolError):
            self.drop()
            raise

    def api_version(self, api_key: int) -> int:
        return self.connection().api_version(api_key)

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    close = drop
