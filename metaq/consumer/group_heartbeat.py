"""A broker-coordinated member's heartbeat thread (``<consumerId>-heartbeat``): a Heartbeat every
``heartbeat.interval.ms`` from the SyncGroup answer on, each answer extending the delivery lease
(streams.DeliveryGate), and the periodic checks that make it leave or rejoin: no heartbeat answered for
session.timeout.ms, max.poll.interval.ms exceeded, partitions added to a subscribed topic, a wildcard filter
matching other topics. Part of :class:`~metaq.consumer.coordination.GroupMember`.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from typing import Protocol

from kafka.protocol.consumer import HeartbeatRequest

from metaq.client.offsets_channel import OffsetsChannel, look_again
from metaq.consumer.group_join import JoinExchange
from metaq.consumer.group_member_state import FENCING_CODES, NO_GENERATION, NO_MEMBER_ID, STABLE, SYNCING, Generation
from metaq.consumer.group_protocol import metadata_changes
from metaq.consumer.streams import DeliveryGate
from metaq.errors import ErrorCode, MetaqError

log = logging.getLogger(__name__)


class PollTracker(Protocol):
    """When the application last came back for records, and whether records wait for it (max.poll.interval.ms)."""

    def stalled_since(self) -> float | None: ...


class HeartbeatSide(JoinExchange):
    """The heartbeat thread's work, for :class:`~metaq.consumer.coordination.GroupMember`."""

    HEARTBEAT_STATES: frozenset[str]
    _gate: DeliveryGate
    _polls: PollTracker | None
    _heartbeat_channel: OffsetsChannel
    _closing: threading.Event
    _wakeup: threading.Condition
    _proof: float
    _session_s: float
    _lease_s: float
    _left_for_poll: bool

    @abstractmethod
    def _lose(self, generation: Generation, reason: str, *, rejoin: bool = True) -> None: ...

    @abstractmethod
    def _leave(self, generation: Generation) -> None: ...

    def _prove(self, sent: float) -> None:
        """The coordinator still counted this member when a request sent at ``sent`` reached it."""
        self._proof = max(self._proof, sent)
        if self._lease_s > 0:
            self._gate.extend(sent + self._lease_s)

    def _heartbeat_loop(self) -> None:
        interval = self._config.heartbeat_interval_ms / 1000.0
        while not self._closing.wait(interval):
            try:
                self._heartbeat_once()
                self._check_session()
                self._check_poll()
                self._check_metadata()
                self._check_pattern()
            except Exception:  # the heartbeat thread must survive anything
                log.exception("consumer %s: heartbeat error", self._consumer_id)

    def _heartbeat_once(self) -> None:
        """One Heartbeat, from the SyncGroup answer on: as Java's heartbeat thread is enabled when SyncGroup
        succeeds, before the assignment callback, the member stays in the group while it fetches the
        partitions' offsets and starts its fetchers (a slow start under load outlasted short sessions)."""
        generation = self.generation_info
        if generation is NO_GENERATION or not self._synced(generation):
            return
        sent = time.monotonic()
        try:
            response = self._heartbeat_channel.send(HeartbeatRequest, {
                "group_id": self._group, "generation_id": generation.generation_id,
                "member_id": generation.member_id, "group_instance_id": self._instance_id})
        except MetaqError as e:
            self._heartbeat_channel.drop()
            log.info("consumer %s: heartbeat failed: %s", self._consumer_id, e)
            return
        code = response.error_code
        if code == 0:
            self._prove(sent)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._prove(sent)
            if generation == self.generation_info:  # not an answer about a generation already left
                self.request_rejoin("the group is rebalancing")
        elif code in FENCING_CODES:
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self._member_id = NO_MEMBER_ID
            self._lose(generation, f"heartbeat answered {ErrorCode(code).name}",
                       rejoin=code != ErrorCode.FENCED_INSTANCE_ID)
        elif look_again(code):
            self._heartbeat_channel.drop()
        else:
            log.warning("consumer %s: heartbeat answered error %d", self._consumer_id, code)

    def _synced(self, generation: Generation) -> bool:
        """SyncGroup answered for ``generation``: from then on the coordinator expects heartbeats."""
        if self.state in self.HEARTBEAT_STATES:
            return True
        return self.state == SYNCING and self._assigned_generation == generation.generation_id

    def _check_session(self) -> None:
        """No heartbeat answered for session.timeout.ms: the coordinator has removed us by now (the analogue of
        a lost ZooKeeper session)."""
        generation = self.generation_info
        if self.state == STABLE and self._proof > 0 and time.monotonic() - self._proof > self._session_s:
            self._lose(generation, f"no heartbeat answered for session.timeout.ms={self._config.session_timeout_ms}")

    def _check_metadata(self) -> None:
        """The leader, every metadata.max.age.ms: a subscribed topic that gained partitions (or appeared, or
        went) since the assignment makes it rejoin, so that the new partitions get an owner, as Java's
        ``ConsumerCoordinator.rejoinNeededOrPending`` does with its assignment snapshot."""
        counts = self._assigned_counts
        if counts is None or self.state != STABLE or time.monotonic() < self._metadata_check_at:
            return
        self._metadata_check_at = time.monotonic() + self._config.metadata_max_age_ms / 1000.0
        try:
            now = self._layout.topic_partition_ids(sorted(counts))
        except MetaqError as e:
            log.info("consumer %s: reading topic metadata failed: %s", self._consumer_id, e)
            return
        changes = metadata_changes(counts, now)
        if changes:
            self.request_rejoin("; ".join(changes))

    def _check_poll(self) -> None:
        """max.poll.interval.ms: records wait while the application has not come back for them that long. Like
        Java's consumer, leave the group (the partitions move now, not after the session timeout) and join
        again once the application takes records again."""
        if self._polls is None:
            return
        stalled = self._polls.stalled_since()
        limit = self._config.max_poll_interval_ms / 1000.0
        if self._left_for_poll:
            if stalled is None or time.monotonic() - stalled < limit:
                with self._wakeup:
                    self._left_for_poll = False
                self.request_rejoin("the application polls again after exceeding max.poll.interval.ms")
            return
        if self.state == STABLE and stalled is not None and time.monotonic() - stalled > limit:
            generation = self.generation_info
            with self._wakeup:
                self._left_for_poll = True
            self._lose(generation, f"the application did not take records for max.poll.interval.ms="
                                   f"{self._config.max_poll_interval_ms}; leaving the group")
            self._leave(generation)
