"""A broker-coordinated member's side of a rebalance's exchanges: the subscription it joins with (a wildcard
filter matched against the topics again before each join and every metadata.max.age.ms), JoinGroup (KIP-394's
member-id-required round trip), the leader's assignment, SyncGroup, and OffsetFetch for the partitions received.
Part of :class:`~metaq.consumer.coordination.GroupMember`.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from kafka.protocol.consumer import JoinGroupRequest, OffsetFetchRequest, SyncGroupRequest

from metaq.client.offsets_channel import OffsetsChannel, fetched_offsets
from metaq.consumer import cooperative
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.cooperative import COOPERATIVE_STICKY
from metaq.consumer.group_member_state import (
    NO_MEMBER_ID,
    STABLE,
    Generation,
    GroupMemberError,
    MemberStates,
    _raise_for,
    _Restart,
)
from metaq.consumer.group_protocol import PROTOCOL_TYPE, decode_assignment, encode_assignment, encode_subscription
from metaq.consumer.membership import Subscription
from metaq.consumer.offset_store import TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.errors import BrokerConnectionError, ErrorCode, MetaqError, ProtocolError, UnsupportedVersionError
from zk_layout import ZkLayout

log = logging.getLogger(__name__)


class JoinExchange(MemberStates):
    """JoinGroup, the leader's assignment, SyncGroup and OffsetFetch, for
    :class:`~metaq.consumer.coordination.GroupMember`."""

    _config: ConsumerConfig
    _layout: ZkLayout
    _subscription: Subscription
    _assignor: str
    _assigned_generation: int
    _assigned_counts: dict[str, int] | None
    _metadata_check_at: float
    _matched: dict[str, int] | None
    _pattern_check_at: float
    _instance_id: str | None
    _member_id: str
    _commit_lock: threading.Lock
    _join_channel: OffsetsChannel
    _offsets_channel: OffsetsChannel
    registry: dict[TopicPartition, PartitionTopicInfo]

    @abstractmethod
    def request_rejoin(self, reason: str) -> None: ...

    def _topics(self) -> list[str]:
        return sorted(self._stream_counts())

    def _stream_counts(self) -> dict[str, int]:
        """topic -> streams: the subscription, or for a wildcard one the topics its filter matched when last
        evaluated (Java's pattern subscription, ``ConsumerCoordinator.updatePatternSubscription``)."""
        if not self._subscription.is_wildcard:
            return dict(self._subscription.topic_count().subscription)
        if self._matched is None:
            self._matched = self._match_topics()
        return dict(self._matched)

    def _match_topics(self) -> dict[str, int]:
        return self._subscription.topic_count().streams_per_topic(
            self._layout.topics(), exclude_internal=self._config.exclude_internal_topics)

    def _rematch(self) -> None:
        """Before each join, a wildcard member matches its filter against the topics again (Java matches the
        pattern before joining); a failure to list them keeps the last match."""
        if self._subscription.is_wildcard:
            try:
                self._matched = self._match_topics()
            except MetaqError as e:
                log.info("consumer %s: listing topics failed, keeping the last match: %s", self._consumer_id, e)

    def _check_pattern(self) -> None:
        """A wildcard member, every metadata.max.age.ms: if the topics its filter matches changed (created,
        deleted), it rejoins with the new subscription, as Java's consumer does on a metadata update."""
        if not self._subscription.is_wildcard or self.state != STABLE or time.monotonic() < self._pattern_check_at:
            return
        self._pattern_check_at = time.monotonic() + self._config.metadata_max_age_ms / 1000.0
        try:
            matched = self._match_topics()
        except MetaqError as e:
            log.info("consumer %s: listing topics failed: %s", self._consumer_id, e)
            return
        if matched != self._matched:
            before = set(self._matched or ())
            self._matched = matched
            self.request_rejoin(f"the topic filter now matches {sorted(matched)} (added "
                                f"{sorted(set(matched) - before)}, gone {sorted(before - set(matched))})")

    def _join(self) -> Any:
        """One JoinGroup; _Restart when the coordinator wants another one at once."""
        fields = {
            "group_id": self._group, "session_timeout_ms": self._config.session_timeout_ms,
            "rebalance_timeout_ms": self._config.max_poll_interval_ms, "member_id": self._member_id,
            "group_instance_id": self._instance_id, "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": self._assignor, "metadata": self._subscription_bytes()}]}
        try:
            response = self._join_channel.send(JoinGroupRequest, fields)
        except UnsupportedVersionError as e:  # a Kafka 0.8 broker (docs/legacy-wire.md): no group protocol
            raise GroupMemberError(f"group {self._group}: group.coordination=kafka needs Kafka's group protocol "
                                   f"(JoinGroup, brokers from Kafka 0.9 on): {e}; with Kafka 0.8 brokers give "
                                   f"zookeeper.connect (ZooKeeper coordination, as Kafka 0.8's consumer)") from e
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: join again with the id given
            log.debug("consumer %s: member id %s assigned; joining again", self._consumer_id, response.member_id)
            self._member_id = response.member_id
            raise _Restart("member id assigned (KIP-394)")
        self._check_answer(response.error_code, "JoinGroup")
        if response.protocol_name not in (None, self._assignor):
            raise ProtocolError(f"group {self._group} chose assignor {response.protocol_name!r}; metaq offered "
                                f"{self._assignor!r}")
        self._member_id = response.member_id
        return response

    def _subscription_bytes(self) -> bytes:
        """``ConsumerProtocolSubscription``: v0 (topics) for the eager assignors, as before; v3 with the owned
        partitions and their generation for cooperative-sticky (metaq.consumer.cooperative)."""
        if self._assignor != COOPERATIVE_STICKY:
            return encode_subscription(self._topics())
        owned = [key for key, info in self.registry.items() if not info.revoked]
        return cooperative.encode_subscription(
            self._topics(), owned=owned, generation=self.generation_info.generation_id,
            user_data=cooperative.sticky_user_data(self._assigned_generation))

    def _check_answer(self, code: int, request: str) -> None:
        """A JoinGroup or SyncGroup answer's error: the coordinator forgot us (join again as a new member),
        another process has our group.instance.id (fatal), or an error to raise."""
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._member_id = NO_MEMBER_ID
            raise _Restart("the coordinator forgot this member")
        if code == ErrorCode.FENCED_INSTANCE_ID:
            raise GroupMemberError(f"group {self._group}: another member runs with group.instance.id="
                                   f"{self._instance_id!r} (FENCED_INSTANCE_ID from {request})")
        _raise_for(code, f"from {request} of group {self._group}")

    def _assign(self, joined: Any) -> dict[str, bytes]:
        """The leader's part: every member's assignment over the partitions ZooKeeper lists now (or the brokers'
        Metadata, with bootstrap.servers)."""
        members = {m.member_id: cooperative.decode_subscription(m.metadata) for m in joined.members}
        instance_ids = {m.member_id: getattr(m, "group_instance_id", None) for m in joined.members}
        topics = sorted({t for member in members.values() for t in member.topics})
        found = self._layout.topic_partition_ids(topics)
        counts = {topic: len(ids) for topic, ids in found.items() if ids}
        assignment = cooperative.assign(self._assignor, members, counts, instance_ids)
        self._assigned_counts = {topic: len(ids or ()) for topic, ids in found.items()}
        self._metadata_check_at = time.monotonic() + self._config.metadata_max_age_ms / 1000.0
        log.info("consumer %s leads group %s generation %d: %s", self._consumer_id, self._group,
                 joined.generation_id, {m: len(ps) for m, ps in assignment.items()})
        return {member: encode_assignment(parts) for member, parts in assignment.items()}

    def _sync(self, generation: Generation, assignments: Mapping[str, bytes]) -> list[TopicPartition]:
        response = self._join_channel.send(SyncGroupRequest, {
            "group_id": self._group, "generation_id": generation.generation_id, "member_id": generation.member_id,
            "group_instance_id": self._instance_id, "protocol_type": PROTOCOL_TYPE, "protocol_name": self._assignor,
            "assignments": [{"member_id": m, "assignment": a} for m, a in sorted(assignments.items())]})
        if response.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            raise _Restart("the group moved on during SyncGroup")  # join the next generation
        self._check_answer(response.error_code, "SyncGroup")
        subscribed = set(self._topics())
        return [key for key in decode_assignment(response.assignment) if key[0] in subscribed]

    def _fetch_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        with self._commit_lock:
            try:
                response = self._offsets_channel.send(OffsetFetchRequest, {
                    "group_id": self._group,
                    "topics": [{"name": t, "partition_indexes": sorted(ps)} for t, ps in sorted(by_topic.items())]})
            except (BrokerConnectionError, ProtocolError):
                self._offsets_channel.drop()
                raise
            return fetched_offsets(response, f"fetching offsets of group {self._group}")
