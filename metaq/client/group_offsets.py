"""A group's offsets in ``__consumer_offsets``, read and written from outside the group protocol.

    kafka = KafkaGroupOffsets(layout)
    kafka.fetch("etl")                                  # {("clicks", 0): 42}: every offset the group has there
    kafka.commit("etl", {("clicks", 0): 0})             # {("clicks", 0): 0}: error code per partition

Consumers with ``offsets.storage=kafka`` (:mod:`metaq.consumer.kafka_offsets`) resume from
``max(zookeeper, kafka)`` and standard clients (a ``group.id`` without ZooKeeper) keep offsets only
there, so ``groups describe`` reads them and resets/imports write them too, and the Spark source keeps a
group's offsets there with ``group.coordination=kafka``. The channel itself is
:class:`metaq.client.offsets_channel.OffsetsChannel` (the coordinator lookup at a random live broker of
``layout``: ZooKeeper's registrations, or a Metadata answer with :class:`metaq.client.metadata.MetadataLayout`);
this adds short, bounded retries and the two requests a tool needs: OffsetFetch with ``topics=None`` (all of
the group's offsets) and OffsetCommit v2 from outside the group protocol (generation -1, no member).

Nothing here creates ``__consumer_offsets``: when the topic does not exist (the coordinator lookup would
create it), there is nothing to read and :meth:`KafkaGroupOffsets.available` is False.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest

from metaq.client.cluster import TopicPartition
from metaq.client.offsets_channel import (
    BrokerDirectory,
    OffsetsChannel,
    commit_codes,
    commit_request,
    fetched_offsets,
    look_again,
)
from metaq.client.security import SecurityConfig
from metaq.client.versions import ApiKey
from metaq.errors import (
    BrokerConnectionError,
    CoordinatorError,
    ErrorCode,
    KafkaOffsetsUnavailable,
    MetaqError,
    ProtocolError,
    for_code,
)
from metaq.retry import offsets_fetch
from zk_layout import TopicAssignment

__all__ = ["LIVE_GROUP_ERRORS", "OFFSETS_TOPIC", "GroupOffsetsStore", "KafkaGroupOffsets", "OffsetsLayout",
           "error_name"]

OFFSETS_TOPIC = "__consumer_offsets"
LIVE_GROUP_ERRORS = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                               ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID})
"""What the coordinator answers a commit from outside the protocol while the group has protocol members."""

T = TypeVar("T")


class OffsetsLayout(BrokerDirectory, Protocol):
    """What :class:`KafkaGroupOffsets` reads of the cluster: :class:`zk_layout.ZkLayout` or
    :class:`metaq.client.metadata.MetadataLayout`."""

    def topic_assignment(self, topic: str) -> TopicAssignment | None: ...


class GroupOffsetsStore(Protocol):
    """What the ops tools need; :class:`KafkaGroupOffsets` or a test fake."""

    def available(self) -> bool: ...

    def fetch(self, group: str) -> dict[TopicPartition, int]: ...

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]: ...


def error_name(code: int) -> str:
    return f"{for_code(code).message} ({code})"


class KafkaGroupOffsets:
    """Blocking reads and writes of groups' Kafka-stored offsets; each call opens and closes its channel."""

    def __init__(self, layout: OffsetsLayout, *, timeout_ms: int = 5000, backoff_ms: int = 200,
                 client_id: str = "metaq-admin", security: SecurityConfig | None = None) -> None:
        self._security = security
        self._layout = layout
        self._timeout_ms = timeout_ms
        self._backoff_ms = backoff_ms
        self._client_id = client_id

    def available(self) -> bool:
        """Whether ``__consumer_offsets`` exists (without it no group has Kafka-stored offsets)."""
        return self._layout.topic_assignment(OFFSETS_TOPIC) is not None

    def fetch(self, group: str) -> dict[TopicPartition, int]:
        """Every committed offset of ``group`` (none when ``__consumer_offsets`` does not exist)."""
        if not self.available():
            return {}
        return self._run(group, lambda channel: self._fetch(channel, group))

    def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """One OffsetCommit v2 (generation -1, member ""); the error code of each partition (0: committed)."""
        if not offsets:
            return {}
        return self._run(group, lambda channel: self._commit(channel, group, offsets))

    def _run(self, group: str, attempt: Callable[[OffsetsChannel], T]) -> T:
        """Retry coordinator and connection errors until the deadline; KafkaOffsetsUnavailable after it."""
        channel = OffsetsChannel(self._layout, group, client_id=self._client_id, socket_timeout_ms=self._timeout_ms,
                                 security=self._security)

        def once() -> T:
            try:
                return attempt(channel)
            except (CoordinatorError, BrokerConnectionError, ProtocolError):
                channel.drop()  # the next attempt looks the coordinator up again
                raise

        policy = offsets_fetch(offsets_channel_backoff_ms=self._backoff_ms, deadline_ms=self._timeout_ms)
        try:
            return policy.call(once)
        except (CoordinatorError, BrokerConnectionError, ProtocolError) as e:
            raise KafkaOffsetsUnavailable(f"the coordinator of group {group!r} is unavailable: {e}") from e
        finally:
            channel.close()

    @staticmethod
    def _fetch(channel: OffsetsChannel, group: str) -> dict[TopicPartition, int]:
        if channel.api_version(ApiKey.OFFSET_FETCH) < 2:
            raise MetaqError(f"the coordinator of group {group!r} does not speak OffsetFetch v2 (all offsets)")
        response = channel.send(OffsetFetchRequest, {"group_id": group, "topics": None})
        return fetched_offsets(response, f"fetching the Kafka offsets of group {group!r}")

    @staticmethod
    def _commit(channel: OffsetsChannel, group: str,
                offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        response = channel.send(OffsetCommitRequest, commit_request(group, offsets))
        codes = commit_codes(response, group, offsets)
        for code in set(codes.values()):
            if look_again(code):  # the coordinator moved or is loading: look it up again
                raise CoordinatorError(code, f"committing the offsets of group {group!r}")
        return codes
