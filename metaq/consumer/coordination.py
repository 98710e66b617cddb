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

The states and the one function that changes them are metaq.consumer.group_member_state's; the exchanges
of a rebalance (JoinGroup, SyncGroup, OffsetFetch) are metaq.consumer.group_join's, the heartbeat thread
metaq.consumer.group_heartbeat's, the commits metaq.consumer.group_commits', the incremental rebalancing
(cooperative-sticky) metaq.consumer.cooperative_member's: mixins this class inherits.

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
from typing import Any

from kafka.protocol.consumer import LeaveGroupRequest

from metaq.client.offsets_channel import OffsetsChannel
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.cooperative import COOPERATIVE
from metaq.consumer.cooperative_member import CooperativeSide
from metaq.consumer.group_commits import CommitListener
from metaq.consumer.group_heartbeat import HeartbeatSide, PollTracker
from metaq.consumer.group_member_state import (
    CLAIMING,
    CLOSED,
    FAILED,
    JOINING,
    LOST,
    NO_GENERATION,
    NO_MEMBER_ID,
    STABLE,
    SYNCING,
    UNJOINED,
    Generation,
    GroupMemberError,
    _grouped,
    _Restart,
)
from metaq.consumer.ids import make_thread_ids
from metaq.consumer.membership import ConsumerState, RebalanceListener, Subscription, safe_hook
from metaq.consumer.offset_store import TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.consumer.streams import DeliveryGate
from metaq.errors import ConsumerRebalanceFailedError, MetaqError
from metaq.metrics.consumer import ConsumerMetrics
from metaq.retry import rebalance_attempts, rebalance_rounds
from zk_layout import ZkLayout

log = logging.getLogger(__name__)
JOIN_REQUEST_MARGIN_MS = 5000  # a JoinGroup may wait the rebalance timeout; Java adds 5 s to its request timeout
MAX_FAILED_BACKOFF_S = 30.0
TICK_S = 1.0  # the executor wakes at least this often to notice shutdown and retry timers


class GroupMember(HeartbeatSide, CooperativeSide):
    """One member of a broker-coordinated group (module docstring), the connector's counterpart of
    ZKRebalancerListener: owns its state and generation (changed by :meth:`_set_state` only), the partitions it
    owns (:attr:`registry`, with their chunk queues and offsets, and the offsets last committed), its three
    connections to the coordinator (JoinGroup/SyncGroup, heartbeats, offsets), and the ``_coordinator`` thread
    that runs every rebalance and the ``-heartbeat`` thread. The fetchers and the delivery gate are the
    connector's; it starts, stops and leases delivery through them."""

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
