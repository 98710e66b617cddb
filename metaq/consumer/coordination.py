"""GroupMember: ``group.coordination=kafka``, the member side of Kafka's group protocol.

Where :class:`metaq.consumer.rebalance.ZKRebalancerListener` decides ownership from ZooKeeper, this class lets
the broker's group coordinator decide it, as Kafka's ``AbstractCoordinator`` / ``ConsumerCoordinator`` do
(docs/broker-coordinated-consumer.md cites them): FindCoordinator, JoinGroup (KIP-394's member-id-required
round trip from v4), the leader computes the assignment (``range`` or ``roundrobin``,
metaq.consumer.group_protocol), SyncGroup,
then OffsetFetch for the partitions received. A named thread (``<consumerId>-heartbeat``) sends Heartbeats
every ``heartbeat.interval.ms``; OffsetCommit carries the generation and member id; LeaveGroup on close (a
static member, ``group.instance.id``, does not leave: a restart within ``session.timeout.ms`` keeps its
partitions without a rebalance, KIP-345).

States of the member (only ``_set_state`` changes them)::

    UNJOINED --first rebalance--> JOINING --JoinGroup answered--> SYNCING --SyncGroup answered--> STABLE
    STABLE --heartbeat: REBALANCE_IN_PROGRESS--> (pause fetchers, commit, revoke) JOINING
    SYNCING --REBALANCE_IN_PROGRESS / UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION--> JOINING
    any --fenced (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID on a heartbeat or a commit),
          no heartbeat answered for session.timeout.ms, or max.poll.interval.ms exceeded--> LOST
    LOST --(nothing committed) rejoin--> JOINING
    JOINING|SYNCING --rebalance.max.retries failed attempts--> FAILED (reported; retried with backoff)
    any --shutdown--> CLOSED (terminal)

The invariant: a member that lost (or must assume it lost) a partition never delivers from it nor commits it
again. A rebalance the member takes part in revokes every partition *before* the JoinGroup is sent (fetchers
stopped, queues cleared, the consumed offsets committed while the generation is still valid: the eager
protocol). A member that learns it was fenced revokes everything at once, without committing. Commits
refused with ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS or FENCED_INSTANCE_ID revoke the
partitions and are not retried. Between heartbeats, delivery is leased as in ZooKeeper mode: records are
handed out only until ``metaq.session.lease.fraction`` of the session timeout after the last answered
heartbeat was sent (streams.DeliveryGate).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from metaq.client.offsets_channel import OffsetsChannel, commit_codes, fetched_offsets, look_again
from metaq.consumer import cooperative
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.cooperative import COOPERATIVE, COOPERATIVE_STICKY, AssignmentChange
from metaq.consumer.group_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    encode_assignment,
    encode_subscription,
    metadata_changes,
)
from metaq.consumer.ids import make_thread_ids
from metaq.consumer.offset_store import CommitResult, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.consumer.rebalance import ConsumerState, RebalanceListener, Subscription, safe_hook
from metaq.consumer.streams import DeliveryGate
from metaq.errors import (
    BrokerConnectionError,
    ConsumerRebalanceFailedError,
    CoordinatorError,
    ErrorCode,
    MetaqError,
    ProtocolError,
    UnsupportedVersionError,
    for_code,
)
from metaq.metrics.consumer import ConsumerMetrics
from metaq.retry import rebalance_attempts, rebalance_rounds
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

UNJOINED = "UNJOINED"
JOINING = "JOINING"
SYNCING = "SYNCING"
STABLE = "STABLE"
CLAIMING = "CLAIMING"  # a bridge member of a live migration claiming ZooKeeper owner nodes (metaq.consumer.migration)
LOST = "LOST"
FAILED = "FAILED"
CLOSED = "CLOSED"

FENCING_CODES = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID})
"""Answers that say this member's generation (or its membership) is over: what it owned is someone else's."""
REFUSED_COMMIT_CODES = FENCING_CODES | {ErrorCode.REBALANCE_IN_PROGRESS}
"""OffsetCommit answers after which the partitions are not ours to commit any more (never retried)."""
JOIN_REQUEST_MARGIN_MS = 5000  # a JoinGroup may wait the rebalance timeout; Java adds 5 s to its request timeout
MAX_FAILED_BACKOFF_S = 30.0
TICK_S = 1.0  # the executor wakes at least this often to notice shutdown and retry timers
NO_MEMBER_ID = ""


@dataclass(frozen=True)
class Generation:
    """The group generation this member joined (Kafka's ``AbstractCoordinator.Generation``)."""

    generation_id: int
    member_id: str
    protocol: str | None


NO_GENERATION = Generation(-1, NO_MEMBER_ID, None)


class _Restart(Exception):
    """The protocol asks for another JoinGroup at once (not a failed attempt): a member id was assigned, a
    rebalance began during the SyncGroup, or the coordinator forgot this member."""


class GroupMemberError(MetaqError):
    """The coordinator refused this member for good (e.g. FENCED_INSTANCE_ID on JoinGroup: another process
    runs with the same ``group.instance.id``)."""


class PollTracker(Protocol):
    """When the application last came back for records, and whether records wait for it (max.poll.interval.ms)."""

    def stalled_since(self) -> float | None: ...


CommitListener = Callable[[float, CommitResult], None]
"""Called after each OffsetCommit with when it started and what was committed or refused (``lost``)."""


def _raise_for(code: int, context: str) -> None:
    if not code:
        return
    if look_again(code):
        raise CoordinatorError(code, context)
    cls = for_code(code)
    raise cls(f"{cls.message} ({code}) {context}")


class GroupMember:
    """One member of a broker-coordinated group; the connector's counterpart of ZKRebalancerListener."""

    HEARTBEAT_STATES = frozenset({STABLE})
    """States in which the heartbeat thread sends Heartbeats (a subclass may wait longer between SyncGroup
    and STABLE, and must stay in the group meanwhile)."""

    def __init__(
        self,
        config: ConsumerConfig,
        layout: ZkLayout,
        consumer_id: str,
        subscription: Subscription,
        fetcher: Any,
        gate: DeliveryGate,
        *,
        listener: RebalanceListener | None = None,
        on_failure: Callable[[ConsumerRebalanceFailedError], None] | None = None,
        metrics: ConsumerMetrics | None = None,
        polls: PollTracker | None = None,
        commit_listener: CommitListener | None = None,
    ) -> None:
        self._config = config
        self._layout = layout
        self._group = config.group_id
        self._consumer_id = consumer_id
        self._subscription = subscription
        self._fetcher = fetcher
        self._gate = gate
        self._listener = listener
        self._on_failure = on_failure
        self._metrics = metrics
        self._polls = polls
        self._commit_listener = commit_listener
        self._instance_id = config.group_instance_id
        self._assignor = config.partition_assignment_strategy  # the one protocol offered in JoinGroup
        self._cooperative = self._assignor in COOPERATIVE  # KIP-429: revoke only what moves
        self._assigned_generation = -1  # the generation of the last assignment (cooperative-sticky user data)
        self._lost_pending = False  # partitions lost, the listener's ``lost`` hook not called yet
        self._matched: dict[str, int] | None = None  # wildcard: topic -> streams, as last matched
        self._pattern_check_at = 0.0
        self._session_s = config.session_timeout_ms / 1000.0
        self._lease_s = self._session_s * config.session_lease_fraction
        # three connections: JoinGroup blocks for up to the rebalance timeout, and neither heartbeats nor
        # the auto-commit thread may wait behind it
        self._join_channel = self._channel(max(config.socket_timeout_ms,
                                               config.max_poll_interval_ms + JOIN_REQUEST_MARGIN_MS))
        self._heartbeat_channel = self._channel(config.session_timeout_ms)
        self._offsets_channel = self._channel(config.offsets_channel_socket_timeout_ms)
        self._lock = threading.RLock()  # one rebalance (or shutdown) at a time
        self._commit_lock = threading.Lock()  # one commit at a time, on the offsets channel
        self._wakeup = threading.Condition()
        self._rejoin_needed = False
        self._closing = threading.Event()
        self._member_id = NO_MEMBER_ID
        self.generation_info = NO_GENERATION
        self.registry: dict[TopicPartition, PartitionTopicInfo] = {}
        self._committed: dict[TopicPartition, int] = {}  # last offset committed per owned partition
        self.state = UNJOINED
        self.last_error: str | None = None
        self._proof = -1.0  # monotonic send time of the last answered heartbeat / SyncGroup
        self._left_for_poll = False  # left the group for max.poll.interval.ms; rejoin once the application polls
        self._failed_rounds = 0
        self._retry_at: float | None = None
        # the leader's partition counts behind the current assignment (Java's assignmentSnapshot), checked
        # against the metadata every metadata.max.age.ms
        self._assigned_counts: dict[str, int] | None = None
        self._metadata_check_at = 0.0
        self._attempt_policy = rebalance_attempts(rebalance_backoff_ms=config.backoff_ms,
                                                  rebalance_max_retries=config.rebalance_max_retries)
        self._round_policy = rebalance_rounds(rebalance_backoff_ms=config.backoff_ms, max_s=MAX_FAILED_BACKOFF_S)
        self._executor = threading.Thread(target=self._run, name=f"{consumer_id}_coordinator", daemon=True)
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name=f"{consumer_id}-heartbeat",
                                           daemon=True)

    def _channel(self, socket_timeout_ms: int) -> OffsetsChannel:
        """A connection to the group's coordinator, found (again) on demand."""
        config = self._config
        return OffsetsChannel(self._layout, self._group, client_id=config.effective_client_id,
                              socket_timeout_ms=socket_timeout_ms, security=config.security(),
                              broker_version_fallback=config.broker_version_fallback)

    # -- state -------------------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("consumer %s: %s -> %s (group %s, generation %d)", self._consumer_id, self.state, state,
                     self._group, self.generation_info.generation_id)
        self.state = state

    @property
    def generation(self) -> int:
        return max(self.generation_info.generation_id, 0)

    @property
    def member_id(self) -> str:
        return self._member_id

    def snapshot(self) -> ConsumerState:
        return ConsumerState.of(self.state, self.generation, self.registry, self.last_error)

    # -- what the connector calls ------------------------------------------------------------------

    def wait_for_quiet_group(self) -> None:
        """Nothing to wait for: the coordinator gathers the joining members itself (the rebalance completes
        once every known member rejoined, or the rebalance timeout passed)."""

    def start(self) -> None:
        self._executor.start()
        self._heartbeat.start()

    def session_suspended(self) -> None:
        """ZooKeeper only tells this member where partition leaders are: its session says nothing on ownership."""

    def session_resumed(self) -> None:
        """See :meth:`session_suspended`."""

    def session_lost(self) -> None:
        """See :meth:`session_suspended`."""

    def request_rejoin(self, reason: str) -> None:
        with self._wakeup:
            if not self._rejoin_needed:
                log.info("consumer %s: rejoining group %s: %s", self._consumer_id, self._group, reason)
            self._rejoin_needed = True
            self._wakeup.notify()

    # -- the executor ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            with self._wakeup:
                if not self._rejoin_needed or self._left_for_poll:  # left for max.poll: wait for the poll
                    self._wakeup.wait(TICK_S)
                needed = self._rejoin_needed and not self._left_for_poll
            if self._closing.is_set():
                return
            try:
                if needed or self._retry_due():
                    self.synced_rebalance()
            except ConsumerRebalanceFailedError:
                pass  # reported through on_failure; retried after a backoff
            except Exception as e:  # the executor must survive anything
                log.exception("consumer %s: group coordination error", self._consumer_id)
                self.last_error = repr(e)
                self._retry_at = time.monotonic() + self._round_policy.delay(1)

    def _retry_due(self) -> bool:
        if self._retry_at is not None and time.monotonic() >= self._retry_at:
            self._retry_at = None
            return True
        return False

    # -- the rebalance -----------------------------------------------------------------------------

    def synced_rebalance(self) -> None:
        """Revoke what is owned (committing it unless lost), then join and sync until this member is STABLE;
        raises ConsumerRebalanceFailedError after rebalance.max.retries failed attempts."""
        with self._lock:
            if self._closing.is_set():
                return
            with self._wakeup:
                self._rejoin_needed = False
            started = time.monotonic()
            self._rematch()
            if self._cooperative and self.state != LOST and not self._lost_pending:
                self._prepare_cooperative_join()
            else:
                self._revoke_all(commit=self._config.auto_commit_enable and self.state != LOST)
            error: BaseException | None = None
            failures = 0
            while not self._closing.is_set():
                try:
                    self._join_and_sync()
                except _Restart as restart:
                    log.debug("consumer %s: joining again: %s", self._consumer_id, restart)
                    continue
                except GroupMemberError as e:
                    error = e
                    break
                except MetaqError as e:
                    error = e
                    failures += 1
                    self._join_channel.drop()
                    log.info("consumer %s: joining group %s failed (attempt %d): %s", self._consumer_id,
                             self._group, failures, e)
                    if failures >= self._config.rebalance_max_retries or not e.retriable:
                        break
                    self._closing.wait(self._attempt_policy.delay(failures))
                    continue
                self._succeeded(started)
                return
            if self._closing.is_set():
                return
            self._count_rebalance(started, ok=False)
            self._failed(error)

    def _succeeded(self, started: float) -> None:
        self._failed_rounds = 0
        self.last_error = None
        self._retry_at = None
        self._count_rebalance(started, ok=True)

    def _count_rebalance(self, started: float, *, ok: bool) -> None:
        if self._metrics is not None:
            self._metrics.rebalanced(time.monotonic() - started, ok)

    def _failed(self, cause: BaseException | None) -> None:
        self._failed_rounds += 1
        error = ConsumerRebalanceFailedError(
            f"{self._consumer_id} can't join group {self._group} after {self._config.rebalance_max_retries} "
            f"attempts: {cause}")
        self.last_error = str(error)
        self._set_state(FAILED)
        if isinstance(cause, GroupMemberError):  # as Java's consumer: a fenced static member stays out
            log.error("%s; not retrying", error)
        else:
            delay = self._round_policy.delay(self._failed_rounds)
            self._retry_at = time.monotonic() + delay
            log.error("%s; retrying in %.1fs", error, delay)
        if self._on_failure is not None:
            self._on_failure(error)
        if self._listener is not None:
            self._safe_hook(self._listener.rebalance_failed, error)
        raise error

    def _join_and_sync(self) -> None:
        self._set_state(JOINING)
        self._assigned_counts = None
        join_sent = time.monotonic()
        joined = self._join()
        if self._cooperative:
            self._prove(join_sent)  # members keep delivering what they own while the group rebalances
        generation = Generation(joined.generation_id, joined.member_id, joined.protocol_name)
        self.generation_info = generation
        self._set_state(SYNCING)
        assignments: dict[str, bytes] = {}
        if joined.leader == joined.member_id:
            assignments = self._assign(joined)
        sent = time.monotonic()
        partitions = self._sync(generation, assignments)
        self._prove(sent)
        self._assigned_generation = generation.generation_id
        if self._cooperative:
            self._take_incremental(generation, partitions)
            return
        offsets = self._fetch_offsets(partitions)
        with self._wakeup:  # heartbeats run from the SyncGroup answer on: their verdict and the taking are atomic
            if self._rejoin_needed or generation != self.generation_info:
                # a heartbeat saw the next rebalance (or lost the generation) meanwhile: take nothing, join again
                self._rejoin_needed = False
                raise _Restart("a rebalance began before the partitions were taken")
            self._publish(partitions, offsets)
            self._set_state(STABLE)
        if self._listener is not None:
            view: dict[str, dict[int, str]] = {}
            for (topic, partition), info in self.registry.items():
                view.setdefault(topic, {})[partition] = info.thread_id
            self._safe_hook(self._listener.assigned, self._consumer_id, view)
        self._fetcher.start_connections(self.registry.values())
        log.info("consumer %s (member %s) owns %s (generation %d)", self._consumer_id, generation.member_id,
                 sorted(self.registry), generation.generation_id)

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

    def _publish(self, partitions: list[TopicPartition], offsets: Mapping[TopicPartition, int]) -> None:
        """Each topic's partitions over this member's streams of it, round robin; no offset: -1 (the fetcher
        resolves it by auto.offset.reset)."""
        counts = self._stream_counts()
        registry: dict[TopicPartition, PartitionTopicInfo] = {}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        for topic, ids in by_topic.items():
            threads = make_thread_ids(self._consumer_id, counts[topic])
            for n, partition in enumerate(ids):
                tid = threads[n % len(threads)]
                start = offsets.get((topic, partition), -1)
                registry[(topic, partition)] = PartitionTopicInfo(
                    topic, partition, self._subscription.queue_for(topic, tid), start, start,
                    self.generation_info.generation_id, tid)
        self._committed = {key: offset for key, offset in offsets.items() if key in registry}
        self.registry = registry

    def _revoke_all(self, *, commit: bool) -> None:
        """Before joining (eager protocol): stop fetching, drop queued chunks, commit while the generation is
        still ours (unless lost), tell the listener, own nothing."""
        self._fetcher.stop_connections()
        owned = dict(self.registry)
        for info in owned.values():
            info.revoke()
        self._subscription.clear_queues()
        if commit and owned:
            try:
                self.commit(owned.values(), include_revoked=True)
            except MetaqError as e:
                log.warning("consumer %s: commit before rejoining failed: %s", self._consumer_id, e)
        if self._listener is not None and owned and commit:
            self._safe_hook(self._listener.before_release, _grouped(owned))
        self._call_lost(owned)
        self.registry = {}
        self._committed = {}

    def _call_lost(self, owned: Iterable[TopicPartition]) -> None:
        """The listener's ``lost`` hook (Java's ``onPartitionsLost``), once for partitions this member had to
        assume were someone else's already: nothing was committed for them and nothing more is delivered."""
        with self._wakeup:
            pending, self._lost_pending = self._lost_pending, False
        lost = getattr(self._listener, "lost", None)
        keys = list(owned)
        if pending and keys and lost is not None:
            self._safe_hook(lost, _grouped(keys))

    # -- incremental rebalancing (cooperative-sticky) ------------------------------------------------

    def _prepare_cooperative_join(self) -> None:
        """KIP-429's onJoinPrepare: keep fetching and delivering what is owned (only a subscription change
        revokes before joining, and metaq's subscriptions are fixed); commit it while the generation is ours."""
        if self._config.auto_commit_enable and self.registry:
            try:
                self.commit()
            except MetaqError as e:
                log.warning("consumer %s: commit before rejoining failed: %s", self._consumer_id, e)
        subscribed = set(self._topics())
        gone = {key: info for key, info in self.registry.items() if key[0] not in subscribed}
        if gone:  # a wildcard filter that no longer matches a topic: revoke its partitions before joining
            for info in gone.values():
                info.revoke()
            if self._config.auto_commit_enable:
                try:
                    self.commit(gone.values(), include_revoked=True)
                except MetaqError as e:
                    log.warning("consumer %s: commit of unsubscribed partitions failed: %s", self._consumer_id, e)
            if self._listener is not None:
                self._safe_hook(self._listener.before_release, _grouped(gone))
            self.registry = {key: info for key, info in self.registry.items() if key not in gone}

    def _take_incremental(self, generation: Generation, partitions: list[TopicPartition]) -> None:
        """``ConsumerCoordinator.onJoinComplete`` with the cooperative protocol: keep what is assigned again,
        revoke (commit, then ``before_release``) only what is not and rejoin so that it can move, start the
        added partitions (``assigned`` names only them)."""
        change = AssignmentChange.of((k for k, i in self.registry.items() if not i.revoked), partitions)
        offsets = self._fetch_offsets(sorted(change.added))  # first: if it fails, nothing has changed yet
        for info in self.registry.values():
            info.generation = generation.generation_id  # kept and revoked partitions commit in this generation
        revoked = [self.registry[key] for key in sorted(change.revoked)]
        for info in revoked:
            info.revoke()
        if revoked and self._config.auto_commit_enable:
            try:
                self.commit(revoked, include_revoked=True)
            except MetaqError as e:
                log.warning("consumer %s: commit of revoked partitions failed: %s", self._consumer_id, e)
        kept = {key: info for key, info in self.registry.items() if key in change.kept}
        added = self._new_infos(sorted(change.added), offsets, kept)
        self._committed = {key: o for key, o in self._committed.items() if key in kept}
        self._committed.update({key: o for key, o in offsets.items() if key in added})
        self.registry = {**kept, **added}
        self._set_state(STABLE)
        if self._listener is not None and revoked:
            self._safe_hook(self._listener.before_release, _grouped(info.key for info in revoked))
        if self._listener is not None and added:
            view: dict[str, dict[int, str]] = {}
            for (topic, partition), info in added.items():
                view.setdefault(topic, {})[partition] = info.thread_id
            self._safe_hook(self._listener.assigned, self._consumer_id, view)
        if revoked:  # the second round gives them to their new owners
            self.request_rejoin(f"revoked {sorted(change.revoked)}; rejoining so that they can move")
        self._fetcher.start_connections(added.values())
        log.info("consumer %s (member %s) owns %s (generation %d): kept %d, added %s, revoked %s",
                 self._consumer_id, generation.member_id, sorted(self.registry), generation.generation_id,
                 len(kept), sorted(change.added), sorted(change.revoked))

    def _new_infos(self, partitions: list[TopicPartition], offsets: Mapping[TopicPartition, int],
                   kept: Mapping[TopicPartition, PartitionTopicInfo]) -> dict[TopicPartition, PartitionTopicInfo]:
        """Added partitions, each to the topic's stream with the fewest of its partitions so far."""
        counts = self._stream_counts()
        load: dict[str, int] = {}
        for info in kept.values():
            load[info.thread_id] = load.get(info.thread_id, 0) + 1
        infos: dict[TopicPartition, PartitionTopicInfo] = {}
        for topic, partition in partitions:
            threads = make_thread_ids(self._consumer_id, counts[topic])
            tid = min(threads, key=lambda t: (load.get(t, 0), threads.index(t)))
            load[tid] = load.get(tid, 0) + 1
            start = offsets.get((topic, partition), -1)
            infos[(topic, partition)] = PartitionTopicInfo(
                topic, partition, self._subscription.queue_for(topic, tid), start, start,
                self.generation_info.generation_id, tid)
        return infos

    # -- losing the partitions -----------------------------------------------------------------------

    def _lose(self, generation: Generation, reason: str, *, rejoin: bool = True) -> None:
        """This member must assume its partitions are someone else's: stop delivering at once, commit nothing,
        rejoin (unless another process took over its group.instance.id: then it stays out, FAILED, as Java's
        consumer does). Ignored if it concerns an older generation than the current one (a late answer)."""
        with self._wakeup:
            if generation != self.generation_info or self.state == CLOSED:
                return
            for info in list(self.registry.values()):
                info.revoke()
            self._lost_pending = bool(self.registry)
            self._gate.lapse()
            self.generation_info = NO_GENERATION
            if not rejoin:
                self.last_error = f"fenced: {reason} (another process runs with group.instance.id=" \
                                  f"{self._instance_id!r}); not rejoining"
                self._set_state(FAILED)
            elif self.state in (STABLE, SYNCING, CLAIMING):
                self._set_state(LOST)
        log.warning("consumer %s: lost its partitions in group %s: %s", self._consumer_id, self._group, reason)
        if rejoin:
            self.request_rejoin(reason)

    def _prove(self, sent: float) -> None:
        """The coordinator still counted this member when a request sent at ``sent`` reached it."""
        self._proof = max(self._proof, sent)
        if self._lease_s > 0:
            self._gate.extend(sent + self._lease_s)

    # -- heartbeats ----------------------------------------------------------------------------------

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

    # -- commits -------------------------------------------------------------------------------------

    def commit(self, infos: Iterable[PartitionTopicInfo] | None = None, *, include_revoked: bool = False) -> None:
        """OffsetCommit of the consumed offsets (changed since the last commit) with this generation; partitions
        the coordinator refuses as no longer ours are revoked and not retried."""
        with self._commit_lock:
            generation = self.generation_info
            if generation is NO_GENERATION:
                return
            chosen = list(self.registry.values()) if infos is None else list(infos)
            offsets = {info.key: info.get_consumed_offset() for info in chosen
                       if (include_revoked or not info.revoked) and info.generation == generation.generation_id}
            offsets = {key: o for key, o in offsets.items() if o >= 0 and self._committed.get(key) != o}
            if not offsets:
                return
            started = time.monotonic()
            try:
                refused = self._commit(generation, offsets)
            except MetaqError:
                if self._metrics is not None:
                    self._metrics.committed(time.monotonic() - started, ok=False)
                raise
            if self._metrics is not None:
                self._metrics.committed(time.monotonic() - started, ok=True, fenced=len(refused))
            if self._commit_listener is not None:
                done = {key: o for key, o in offsets.items() if key not in refused}
                self._commit_listener(started, CommitResult(done, set(refused)))
        if refused:
            code = min(refused.values())
            log.warning("consumer %s: the coordinator refused the commit of %s (%s): not ours any more",
                        self._consumer_id, sorted(refused), ErrorCode(code).name)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("a commit found the group rebalancing")
            else:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self._member_id = NO_MEMBER_ID
                self._lose(generation, f"commit answered {ErrorCode(code).name}",
                           rejoin=code != ErrorCode.FENCED_INSTANCE_ID)

    def _commit(self, generation: Generation, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Retried on coordinator and connection errors (offsets.commit.max.retries, offsets.channel.backoff.ms);
        returns the partitions refused with a code of REFUSED_COMMIT_CODES."""
        topics = sorted({t for t, _ in offsets})
        fields = {
            "group_id": self._group, "generation_id_or_member_epoch": generation.generation_id,
            "member_id": generation.member_id, "group_instance_id": self._instance_id, "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_metadata": "", "commit_timestamp": -1,
                 "committed_leader_epoch": -1}
                for (t, p), o in sorted(offsets.items()) if t == topic]} for topic in topics]}
        attempts = self._config.offsets_commit_max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = self._offsets_channel.send(OffsetCommitRequest, fields)
                codes = commit_codes(response, self._group, offsets)
            except (BrokerConnectionError, ProtocolError) as e:
                self._offsets_channel.drop()
                error: MetaqError = e
            else:
                refused = {key: code for key, code in codes.items() if code in REFUSED_COMMIT_CODES}
                retry = {key: code for key, code in codes.items() if look_again(code)}
                others = {key: code for key, code in codes.items()
                          if code and key not in refused and key not in retry}
                self._committed.update({key: offsets[key] for key, code in codes.items() if not code})
                if others:
                    key, code = min(others.items())
                    _raise_for(code, f"committing {key[0]}-{key[1]} of group {self._group}")
                if not retry:
                    return refused
                self._offsets_channel.drop()
                error = CoordinatorError(min(retry.values()), f"committing offsets of group {self._group}")
            if attempt == attempts:
                raise error
            log.info("consumer %s: commit attempt %d failed (%s); retrying", self._consumer_id, attempt, error)
            self._closing.wait(self._config.offsets_channel_backoff_ms / 1000.0)
        raise AssertionError("unreachable")

    # -- leaving -------------------------------------------------------------------------------------

    def _leave(self, generation: Generation) -> None:
        """LeaveGroup, so that the group rebalances now rather than after the session timeout. A static member
        does not leave (KIP-345: its restart within the session timeout keeps its partitions)."""
        if self._instance_id is not None or not generation.member_id:
            return
        try:
            response = self._join_channel.send(LeaveGroupRequest, {
                "group_id": self._group, "member_id": generation.member_id,
                "members": [{"member_id": generation.member_id, "group_instance_id": None}]})
            if response.error_code:
                log.info("consumer %s: LeaveGroup answered error %d", self._consumer_id, response.error_code)
        except MetaqError as e:
            log.info("consumer %s: LeaveGroup failed (the session timeout removes us): %s", self._consumer_id, e)

    def shutdown(self, *, commit: bool) -> None:
        """Stop fetchers, final commit (if asked and still a member), leave the group, close the channels."""
        self._closing.set()
        with self._wakeup:
            self._wakeup.notify_all()
        with self._lock:
            generation = self.generation_info
            try:
                self._revoke_all(commit=commit and self.state == STABLE)
            except MetaqError as e:
                log.warning("consumer %s: revoking at shutdown failed: %s", self._consumer_id, e)
            self._leave(generation)
            self._set_state(CLOSED)
        for thread in (self._executor, self._heartbeat):
            if thread.is_alive() and threading.current_thread() is not thread:
                thread.join(10.0)
        for channel in (self._join_channel, self._heartbeat_channel, self._offsets_channel):
            channel.close()

    def _safe_hook(self, hook: Callable[..., Any], *args: Any) -> None:
        safe_hook(hook, *args)


def _grouped(keys: Iterable[TopicPartition]) -> dict[str, set[int]]:
    grouped: dict[str, set[int]] = {}
    for topic, partition in keys:
        grouped.setdefault(topic, set()).add(partition)
    return grouped
