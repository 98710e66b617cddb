"""ZKRebalancerListener: decides which partitions this member owns, following Kafka 0.8's algorithm.

One thread (``<consumerId>_watcher_executor``) runs every rebalance. ZooKeeper watches and the session
listener only set a flag (kazoo callbacks must not block), so a burst of events is one rebalance.

The states and the one function that changes them are metaq.consumer.zk_member_state's; what a rebalance
reads from ZooKeeper is metaq.consumer.zk_group_view's, the owner nodes metaq.consumer.zk_ownership's, the commits
and offset-node watches metaq.consumer.zk_offset_nodes', session loss, reconnection and the self-check
metaq.consumer.zk_session's: mixins the listener inherits. What it shares with the broker-coordinated member
(hooks, subscription, snapshot) is metaq.consumer.membership's.

One attempt: stop fetchers and clear queues; commit while still the owner (if auto-commit); call the
``before_release`` hook; delete our owner nodes; compute the assignment (range or roundrobin) from every
member's registration; claim all owner nodes or none; fence the offsets and read them; start fetchers;
call the ``assigned`` hook.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.protocol.states import EventType, WatchedEvent

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.membership import ConsumerState, RebalanceListener, Subscription, safe_hook
from metaq.consumer.offset_store import OffsetStore, TopicPartition
from metaq.consumer.partition_info import PartitionTopicInfo
from metaq.consumer.zk_member_state import (
    CLOSED,
    EXECUTOR_TICK_S,
    FAILED,
    LOST,
    REBALANCING,
    STABLE,
    STARTING,
    SUSPENDED,
)
from metaq.consumer.zk_offset_nodes import OffsetNodes
from metaq.consumer.zk_ownership import OwnerNodes
from metaq.consumer.zk_session import SessionRecovery
from metaq.errors import AuthenticationError, ConsumerRebalanceFailedError, ConsumerRebalanceRefusedError, MetaqError
from metaq.metrics.consumer import ConsumerMetrics
from metaq.retry import consumer_registration, rebalance_attempts, rebalance_rounds
from zk_layout import ConsumerNode, ZkLayout

log = logging.getLogger(__name__)
MAX_FAILED_BACKOFF_S = 30.0  # cap of the exponential backoff between rounds after a FAILED rebalance


class ZKRebalancerListener(SessionRecovery, OwnerNodes, OffsetNodes):
    """One member's side of the group (module docstring): owns its state (STARTING ... CLOSED, changed by
    :meth:`_set_state` only), the partitions it owns (:attr:`registry`, with their chunk queues and offsets),
    its ZooKeeper watches and what they last read (members, topics' partitions, offset nodes), and the
    ``watcher_executor`` thread that runs every rebalance. The fetchers and the offset store are the
    connector's; it starts, stops and commits through them."""

    def __init__(
        self,
        config: ConsumerConfig,
        layout: ZkLayout,
        consumer_id: str,
        subscription: Subscription,
        fetcher: Any,
        store: OffsetStore,
        *,
        listener: RebalanceListener | None = None,
        on_failure: Callable[[ConsumerRebalanceFailedError], None] | None = None,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._layout = layout
        self._group = config.group_id
        self._consumer_id = consumer_id
        self._subscription = subscription
        self._fetcher = fetcher
        self._store = store
        self._listener = listener
        self._on_failure = on_failure
        self._lock = threading.RLock()  # the rebalance lock: one rebalance (or shutdown) at a time
        self._wakeup = threading.Condition()
        self._triggered = False
        self._forced = False  # triggered by more than a watch event (see _watch_fired): rebalance in any case
        self._session_lost = False
        self._rearm = False  # kazoo dropped our watches with the connection: re-arm them once connected
        self._commit_lock = threading.Lock()  # one commit at a time: offsets read and written together
        self._shutdown = threading.Event()
        self.registry: dict[TopicPartition, PartitionTopicInfo] = {}
        self.generation = 0
        self.state = STARTING
        self._state_before_suspend = STARTING
        self.last_error: str | None = None
        self._failed_rounds = 0
        self._attempt_policy = rebalance_attempts(rebalance_backoff_ms=config.backoff_ms,
                                                  rebalance_max_retries=config.rebalance_max_retries)
        self._round_policy = rebalance_rounds(rebalance_backoff_ms=config.backoff_ms, max_s=MAX_FAILED_BACKOFF_S)
        self._registration_policy = consumer_registration(rebalance_backoff_ms=config.backoff_ms)
        self._retry_at: float | None = None
        self._next_self_check = time.monotonic() + config.self_check_interval_ms / 1000.0
        self._warned_missing: set[str] = set()
        self._warned_persistent: set[str] = set()  # persistent member nodes already warned about
        self._conflicts: dict[TopicPartition, str] | None = None  # owner nodes in the way of the last claims
        self._member_nodes: dict[str, ConsumerNode] = {}  # registrations read, by member id (they never change)
        self._partition_ids: dict[str, list[int]] = {}  # subscribed topics' partitions, while their watch is armed
        self._topic_events = 0  # topic watch events (and connection drops) so far: see _read_group
        self._watch_events = 0  # events of any watch so far: see _registrations
        self._covered_events = -1  # _watch_events when the last successful rebalance read the group
        self._quiet_ids: tuple[list[str], int] | None = None  # the member list the coalescing wait ended on
        self._offset_keys: dict[str, TopicPartition] = {}  # offset node path -> owned partition (watched)
        self._offset_events: set[TopicPartition] = set()  # owned partitions whose offset node changed
        self._thread = threading.Thread(
            target=self._run, name=f"{consumer_id}_watcher_executor", daemon=True
        )

    def snapshot(self) -> ConsumerState:
        return ConsumerState.of(self.state, self.generation, self.registry, self.last_error)

    # -- events (never block: they run on kazoo's threads) -----------------------------------------

    def trigger(self, *_: Any) -> None:
        """Rebalance, whatever the group looks like (partitions revoked, a fence lost, shutting down)."""
        with self._wakeup:
            self._triggered = True
            self._forced = True
            self._wakeup.notify()

    def _watch_fired(self) -> None:
        """Rebalance unless the last successful rebalance read the group after this event (see
        :meth:`synced_rebalance`)."""
        with self._wakeup:
            self._triggered = True
            self._wakeup.notify()

    def _on_watch(self, event: WatchedEvent | None = None) -> None:
        """The callback of every ZooKeeper watch we set.

        When the connection drops (SUSPENDED, and on LOST) kazoo fires *every* watch with a ``NONE``
        event and forgets them all; it does not re-register them on reconnect. That is no change in
        the group, so it must not cost a rebalance (a connection blip or a short ZooKeeper restart
        keeps the session and the ownership); instead the executor re-arms the watches once connected
        and rebalances only if the group changed meanwhile (see :meth:`_recheck`)."""
        with self._wakeup:
            self._watch_events += 1
        if event is not None and event.type == EventType.NONE:
            with self._wakeup:
                self._rearm = True
            return
        self._watch_fired()

    def _on_offset_watch(self, event: WatchedEvent) -> None:
        """The watch on each owned partition's offset node: it fires on our own commits too, so the executor
        compares the node's version with ours (:meth:`_check_offset_nodes`). A connection drop (NONE) is no
        write: the watches are re-armed with the others once connected."""
        if event.type == EventType.NONE:
            return
        with self._wakeup:
            key = self._offset_keys.get(event.path)
            if key is not None:
                self._offset_events.add(key)
                self._wakeup.notify()

    def _on_topic_watch(self, event: WatchedEvent | None = None) -> None:
        """The watch on the subscribed topics' nodes: their cached partitions are void (see _topic_partitions)."""
        with self._wakeup:
            self._topic_events += 1
            self._partition_ids.clear()
        self._on_watch(event)

    def session_suspended(self) -> None:
        if self.state not in (SUSPENDED, CLOSED):
            self._state_before_suspend = self.state
            self._set_state(SUSPENDED)

    def session_resumed(self) -> None:
        if self.state == SUSPENDED:
            self._set_state(self._state_before_suspend)
        with self._wakeup:  # re-arm the watches the disconnection dropped, now rather than at the next tick
            self._wakeup.notify()

    def session_lost(self) -> None:
        with self._wakeup:  # with _publish: no registry of the old session is published after this
            self._topic_events += 1  # the old session's watches are gone
            self._watch_events += 1
            self._partition_ids.clear()
            for info in list(self.registry.values()):  # at once: not one more message from the old ownership
                info.revoke()
            self._session_lost = True
            self._triggered = True
            self._wakeup.notify()
        if self.state != CLOSED:  # owning nothing until the rebalance that follows: say so (not STABLE)
            self._state_before_suspend = LOST
            self._set_state(LOST)

    # -- executor ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._shutdown.set()
        self.trigger()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._shutdown.is_set():
            with self._wakeup:
                if not self._triggered:
                    self._wakeup.wait(EXECUTOR_TICK_S)  # ticks to notice shutdown and timers
                triggered, self._triggered = self._triggered, False
                forced, self._forced = self._forced, False
                lost, self._session_lost = self._session_lost, False
                rearm = self._rearm and not lost and self.state != SUSPENDED  # re-arm once connected
                if rearm:
                    self._rearm = False
                    self._offset_events.update(self._offset_keys.values())
                changed_offsets, self._offset_events = self._offset_events, set()
            if self._shutdown.is_set():
                return
            try:
                if changed_offsets and not lost and self.state != SUSPENDED:
                    self._check_offset_nodes(changed_offsets)
                if triggered and not lost:
                    self.wait_for_quiet_group()
                if lost:
                    self._handle_session_loss()  # raises while ZooKeeper is not back: retried on a backoff
                if triggered and not (forced or lost or rearm):  # watch events only: maybe read already
                    self.synced_rebalance(unless_read=True)
                elif lost or triggered or self._retry_due() or (rearm and self._recheck()) or self._self_check_fails():
                    self.synced_rebalance()
            except ConsumerRebalanceFailedError:
                pass  # reported through on_failure; retried after a backoff
            except MetaqError as e:  # ZooKeeper not back yet (e.g. re-registering right after LOST): expected
                log.info("consumer %s: %s; retrying", self._consumer_id, e)
                self.last_error = str(e)
                self.trigger_later(self._registration_policy.delay(1))
            except Exception as e:  # the executor must survive anything
                log.exception("consumer %s: rebalance executor error", self._consumer_id)
                self.last_error = repr(e)
                self.trigger_later(self._registration_policy.delay(1))

    def wait_for_quiet_group(self) -> None:
        """Let a burst of events end before rebalancing: wait until the group's member list has not changed
        for metaq.rebalance.coalesce.ms, at most rebalance.backoff.ms in all (a steady trickle of changes
        still gets its rebalances). A burst of N joins then costs every member one rebalance instead of up
        to N, each of which would mostly fail to claim what the others have not released yet. Before the
        first rebalance too, so that members starting together compute their first assignment from the
        whole group. The members watch is re-armed at each step (watches are one-shot)."""
        quiet = self._config.rebalance_coalesce_ms / 1000.0
        if quiet <= 0:
            return
        deadline = time.monotonic() + self._config.backoff_ms / 1000.0
        while not self._shutdown.is_set():
            with self._wakeup:
                self._triggered = False
                events = self._watch_events
            try:
                ids = self._layout.consumer_ids(self._group, watch=self._on_watch)  # the next change wakes us
            except MetaqError:
                return  # the rebalance that follows reports it
            self._quiet_ids = (ids, events)
            with self._wakeup:
                end = min(time.monotonic() + quiet, deadline)
                # the whole window even after an event: one re-read per window, not one per join per member
                while not self._shutdown.is_set() and not self._session_lost and time.monotonic() < end:
                    self._wakeup.wait(end - time.monotonic())
                if not self._triggered or self._session_lost or time.monotonic() >= deadline:
                    return

    def trigger_later(self, delay_s: float) -> None:
        self._retry_at = time.monotonic() + delay_s

    def _retry_due(self) -> bool:
        if self._retry_at is not None and time.monotonic() >= self._retry_at:
            self._retry_at = None
            return True
        return False

    # -- the rebalance -----------------------------------------------------------------------------

    def synced_rebalance(self, *, unless_read: bool = False) -> None:
        """Up to rebalance.max.retries attempts; raises ConsumerRebalanceFailedError after the last.

        ``unless_read``: the rebalance is for watch events only, and is skipped if the last successful
        rebalance read the group after all of them (a member joining while another one rebalances fires
        the latter's watch, often before its last attempt reads the member list: a second rebalance would
        compute the same assignment, yet release and claim every partition again). The read re-armed the
        watches, so any later change fires them again."""
        with self._lock:
            if self._shutdown.is_set():
                return
            if unless_read and self.state == STABLE:
                with self._wakeup:
                    read = self._watch_events == self._covered_events
                if read:
                    log.debug("consumer %s: the watch events were read by the last rebalance; not rebalancing",
                              self._consumer_id)
                    return
            if self.state != SUSPENDED:
                self._set_state(REBALANCING)
            started = time.monotonic()
            error: BaseException | None = None
            for attempt in range(self._config.rebalance_max_retries):
                if self._shutdown.is_set():
                    return
                try:
                    # A session lost while this rebalance runs (it may be what triggered it) is handled
                    # before the next attempt: until we re-register, every attempt would fail with "not
                    # registered" and the round would end in a spurious FAILED.
                    with self._wakeup:
                        lost, self._session_lost = self._session_lost, False
                    if lost:
                        self._handle_session_loss()
                    if self._attempt() and not self._lost_meanwhile():
                        self._succeeded()
                        self._count_rebalance(started, ok=True)
                        return
                    error = None
                except MetaqError as e:
                    error = e
                    log.info("consumer %s: rebalance attempt %d failed: %s", self._consumer_id, attempt + 1, e)
                self._release_all(commit=False)
                if isinstance(error, AuthenticationError):  # fatal: every retry would be refused the same way
                    break
                self._backoff(self._attempt_policy.delay(attempt + 1))
            self._count_rebalance(started, ok=False)
            self._failed(error)

    def _count_rebalance(self, started: float, *, ok: bool) -> None:
        if self._metrics is not None:
            self._metrics.rebalanced(time.monotonic() - started, ok)

    def _lost_meanwhile(self) -> bool:
        """The session was lost during the attempt: what it took is void, the next attempt starts over."""
        with self._wakeup:
            return self._session_lost

    def _succeeded(self) -> None:
        self._failed_rounds = 0
        self.last_error = None
        self._retry_at = None
        self._next_self_check = time.monotonic() + self._config.self_check_interval_ms / 1000.0
        self._set_state(STABLE)

    def _failed(self, cause: BaseException | None) -> None:
        self._failed_rounds += 1
        error: ConsumerRebalanceFailedError
        if isinstance(cause, AuthenticationError):
            error = ConsumerRebalanceRefusedError(f"{self._consumer_id} can't rebalance: {cause}")
        else:
            error = ConsumerRebalanceFailedError(
                f"{self._consumer_id} can't rebalance after {self._config.rebalance_max_retries} retries"
                + (f": {cause}" if cause else " (partitions owned by others were not released)"))
        self.last_error = str(error)
        self._set_state(FAILED)
        if error.retriable:
            delay = self._round_policy.delay(self._failed_rounds)
            self.trigger_later(delay)
            log.error("%s; retrying in %.1fs", error, delay)
        else:  # no timer: the next change in the group tries again (once)
            log.error("%s; not retrying (fix the settings)", error)
        if self._on_failure is not None:
            self._on_failure(error)
        if self._listener is not None:
            self._safe_hook(self._listener.rebalance_failed, error)
        raise error

    def _attempt(self) -> bool:
        if not self._layout.broker_ids(watch=None):
            self._layout.broker_ids(watch=self._on_watch)  # kafka-969: wait for a broker
            log.info("consumer %s: no brokers registered; waiting", self._consumer_id)
            return True
        self._release_all(commit=self._config.auto_commit_enable)
        with self._wakeup:
            events = self._watch_events  # every event counted so far is seen by the reads that follow
        whole, mine = self._assignment()
        if not self._claim_all(mine):
            return False
        try:
            offsets = self._store.take_ownership(mine)
        except MetaqError:
            self._release_claims(mine)
            raise
        with self._wakeup:
            lost = self._session_lost
            if not lost:
                self._publish(mine, offsets)
                self._covered_events = events
        if lost:  # the session ended while claiming: start over on the new one (claims made on it are undone)
            log.info("consumer %s: session lost while claiming; not taking %s", self._consumer_id, sorted(mine))
            self._store.release(mine)
            self._release_claims(mine)
            return False
        if self._listener is not None:
            global_view: dict[str, dict[int, str]] = {}
            for (topic, partition), tid in whole().items():
                global_view.setdefault(topic, {})[partition] = tid
            self._safe_hook(self._listener.assigned, self._consumer_id, global_view)
        self._fetcher.start_connections(self.registry.values())
        log.info("consumer %s owns %s (generation %d)", self._consumer_id, sorted(mine), self.generation)
        self._watch_offset_nodes(mine)
        return True

    def _publish(self, mine: Mapping[TopicPartition, str], offsets: Mapping[TopicPartition, int | None]) -> None:
        self.generation += 1
        registry = {}
        for (topic, partition), tid in mine.items():
            offset = offsets.get((topic, partition))
            start = -1 if offset is None else offset  # -1: resolved by the fetcher via auto.offset.reset
            registry[(topic, partition)] = PartitionTopicInfo(
                topic, partition, self._subscription.queue_for(topic, tid), start, start, self.generation, tid)
        self.registry = registry

    def _release_all(self, *, commit: bool) -> None:
        """Stop fetching, drop queued chunks, optionally commit (still the owner), then release."""
        self._fetcher.stop_connections()
        owned = dict(self.registry)
        with self._wakeup:
            self._offset_keys = {}
        for info in owned.values():
            info.revoke()
        self._subscription.clear_queues()
        if commit and owned:
            self.commit(owned.values(), include_revoked=True)
        if self._listener is not None and owned:
            grouped: dict[str, set[int]] = {}
            for topic, partition in owned:
                grouped.setdefault(topic, set()).add(partition)
            self._safe_hook(self._listener.before_release, grouped)
        if owned:
            try:  # pipelined: two ZooKeeper round trips for all of them
                self._layout.release_partitions(self._group, {key: info.thread_id for key, info in owned.items()})
            except MetaqError as e:  # they die with the session anyway
                log.warning("could not release %s: %s", sorted(owned), e)
        self._store.release(owned)
        self.registry = {}


    # -- shutdown ----------------------------------------------------------------------------------

    def shutdown(self, *, commit: bool) -> None:
        """Under the rebalance lock: stop fetchers, final commit (if asked), release ownership."""
        self._shutdown.set()
        with self._lock:
            try:
                self._release_all(commit=commit)
            except MetaqError as e:
                log.warning("consumer %s: releasing at shutdown failed: %s", self._consumer_id, e)
            self._set_state(CLOSED)
        self.stop()

    def _safe_hook(self, hook: Callable[..., Any], *args: Any) -> None:
        safe_hook(hook, *args)
