"""ZKRebalancerListener: decides which partitions this member owns, following Kafka 0.8's algorithm.

One thread (``<consumerId>_watcher_executor``) runs every rebalance. ZooKeeper watches and the session
listener only set a flag (kazoo callbacks must not block), so a burst of events is one rebalance.

States of the member (only ``_set_state`` changes them)::

    STARTING --first rebalance--> STABLE | FAILED
    STABLE --watch fired--> REBALANCING --ok--> STABLE
                                        --retries used up--> FAILED (reported; retried with backoff)
                                        --login refused--> FAILED (reported at once; no retry timer)
    any --ZooKeeper SUSPENDED--> SUSPENDED --CONNECTED (same session)--> previous state
    any --session LOST--> LOST (ownership void, owns nothing) --re-registered--> REBALANCING --ok--> STABLE
    any --shutdown--> CLOSED (terminal)

One attempt: stop fetchers and clear queues; commit while still the owner (if auto-commit); call the
``before_release`` hook; delete our owner nodes; compute the assignment (range or roundrobin) from every
member's registration; claim all owner nodes or none; fence the offsets and read them; start fetchers;
call the ``assigned`` hook.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from kazoo.protocol.states import EventType, WatchedEvent

from metaq.consumer.assignors import assign, assign_for
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.ids import make_thread_ids
from metaq.consumer.offset_store import OffsetStore, TopicPartition
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.errors import (
    AuthenticationError,
    ConsumerRebalanceFailedError,
    ConsumerRebalanceRefusedError,
    MalformedNodeError,
    MetaqError,
    ZooKeeperUnavailableError,
)
from metaq.metrics.consumer import ConsumerMetrics
from metaq.retry import consumer_registration, rebalance_attempts, rebalance_rounds
from zk_layout import ConsumerNode, TopicCount, ZkLayout, paths

log = logging.getLogger(__name__)

STARTING = "STARTING"
REBALANCING = "REBALANCING"
STABLE = "STABLE"
FAILED = "FAILED"
SUSPENDED = "SUSPENDED"
LOST = "LOST"
CLOSED = "CLOSED"

EXECUTOR_TICK_S = 1.0  # the executor wakes at least this often to check shutdown and self-check timers
MAX_FAILED_BACKOFF_S = 30.0  # cap of the exponential backoff between rounds after a FAILED rebalance


class RebalanceListener(Protocol):
    """Hooks around ownership changes. They run on the rebalance thread: keep them short."""

    def before_release(self, partitions: Mapping[str, set[int]]) -> None: ...

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None: ...

    def rebalance_failed(self, error: ConsumerRebalanceFailedError) -> None: ...


@dataclass
class ConsumerState:
    """A snapshot of the member for ``Consumer.state``."""

    state: str
    generation: int
    owned: dict[TopicPartition, str] = field(default_factory=dict)
    last_error: str | None = None

    @classmethod
    def of(cls, state: str, generation: int, registry: Mapping[TopicPartition, PartitionTopicInfo],
           last_error: str | None) -> ConsumerState:
        """The snapshot of a member owning the unrevoked partitions of ``registry``."""
        owned = {key: info.thread_id for key, info in registry.items() if not info.is_revoked}
        return cls(state, generation, owned, last_error)


def safe_hook(hook: Callable[..., Any], *args: Any) -> None:
    """Call a RebalanceListener hook; what it raises is logged, never stops the rebalance."""
    try:
        hook(*args)
    except Exception:
        log.exception("rebalance listener hook %s raised", getattr(hook, "__name__", hook))


class Subscription(Protocol):
    """What this member asked for (static topics or a whitelist/blacklist) and its registration."""

    is_wildcard: bool

    def topic_count(self) -> TopicCount: ...

    def queue_for(self, topic: str, thread_id: str) -> ChunkQueue: ...

    def clear_queues(self) -> None: ...


class ZKRebalancerListener:
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

    # -- state -------------------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("consumer %s: %s -> %s", self._consumer_id, self.state, state)
        self.state = state

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

    # -- offset nodes written behind our back (an operator's forced reset) ------------------------------

    def _watch_offset_nodes(self, mine: Iterable[TopicPartition]) -> None:
        """Arm a data watch on each owned partition's offset node, so that a forced ``offsets reset`` (or any
        write but ours) is noticed at once, not at our next commit, which may be long in coming on a quiet
        partition (README.md, "Ops tools")."""
        keys = list(mine)
        with self._wakeup:
            self._offset_keys = {paths.offset_path(self._group, *key): key for key in keys}
        self._check_offset_nodes(keys)

    def _check_offset_nodes(self, keys: Iterable[TopicPartition]) -> None:
        """Re-arm the offset watches of ``keys`` and act on the nodes someone else wrote: the partition is
        taken again (a rebalance of this member: release, claim, fence, read), so that it restarts from the
        offset now in the node. Our own commits fire the watch too and are told apart by the node version.

        A check the connection drop cut short is no sign of a change: it is made again (with every watch)
        once reconnected, in the same session. Left to the executor's error path it would schedule a retry,
        i.e. a whole rebalance right after every ZooKeeper restart, since our own commits (every
        auto.commit.interval.ms) keep such a check in flight much of the time."""
        with self._lock:
            owned = [key for key in keys if key in self.registry and not self.registry[key].is_revoked]
            if not owned:
                return
            try:
                changed = self._store.changed_behind(owned, watch=self._on_offset_watch)
            except ZooKeeperUnavailableError as e:
                log.info("consumer %s: cannot check the owned offset nodes now (%s); checked again once "
                         "reconnected", self._consumer_id, e)
                with self._wakeup:
                    self._rearm = True
                return
            if not changed:
                return
            for key, offset in sorted(changed.items()):
                self.registry[key].revoke()
                self._explain_changed_node(key, offset)
        self.trigger()

    def _explain_changed_node(self, key: TopicPartition, offset: int | None) -> None:
        """Log why an owned partition's offset node changed: while our owner node still stands, no other member
        can have fenced it (a member claims the owner node first), so an operator wrote it."""
        info = self.registry.get(key)
        try:
            owner = self._layout.owner(self._group, *key)
        except MetaqError:
            owner = None
        if info is not None and owner == info.thread_id:
            log.warning("consumer %s: the offset of %s-%d was reset to %s by an operator (its offset node changed "
                        "while this member owns the partition); restarting the partition from there",
                        self._consumer_id, key[0], key[1], "none (auto.offset.reset)" if offset is None else offset)
        else:
            log.warning("consumer %s: %s-%d is fenced by a newer owner; its offset is not committed",
                        self._consumer_id, *key)

    def _assignment(self) -> tuple[Callable[[], dict[TopicPartition, str]], dict[TopicPartition, str]]:
        """My part of the group's assignment as computed from ZooKeeper now (watches re-armed), and how to
        compute the whole of it (only the ``assigned`` hook wants that: at 10,000 partitions it is most of
        a rebalance's CPU, times every member)."""
        with self._wakeup:
            self._rearm = False  # reading the group sets every watch again
        topic_threads, topic_partitions = self._read_group()
        prefix = self._consumer_id + "-"
        my_threads = {tid for threads in topic_threads.values() for tid in threads
                      if tid.startswith(prefix) and tid[len(prefix):].isdigit()}
        strategy, hashed = self._config.partition_assignment_strategy, self._config.partition_assignment_roundrobin_hash
        mine = assign_for(strategy, topic_threads, topic_partitions, my_threads, hashed)
        return partial(assign, strategy, topic_threads, topic_partitions, hashed), mine

    def _read_group(self) -> tuple[dict[str, list[str]], dict[str, list[int]]]:
        """Every member's thread ids per topic I subscribe to, and those topics' partitions."""
        watch = self._on_watch
        all_topics = self._layout.topics(watch=watch if self._needs_topic_watch() else None)
        my_topics = self._subscription.topic_count().streams_per_topic(
            all_topics, exclude_internal=self._config.exclude_internal_topics)
        topic_threads: dict[str, list[str]] = {t: [] for t in my_topics}
        for member, registration in self._registrations().items():
            per_topic = registration.streams_per_topic(
                all_topics, exclude_internal=self._config.exclude_internal_topics)
            for topic, streams in per_topic.items():
                if topic in topic_threads:
                    topic_threads[topic].extend(make_thread_ids(member, streams))
        return topic_threads, self._topic_partitions(list(my_topics))

    def _topic_partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """Each topic's partitions (a missing topic is left out, with a warning). A topic node read before is
        not read again while the data watch set then is armed (no event since): at 1,000 partitions a node
        is some 12 KB, read by every member at every rebalance. Any topic event or connection drop (kazoo
        forgets every watch then) empties the cache; one during a read keeps that read out of it."""
        with self._wakeup:
            cached = {topic: self._partition_ids[topic] for topic in topics if topic in self._partition_ids}
            events = self._topic_events
        unread = [topic for topic in topics if topic not in cached]
        read = self._layout.topic_partition_ids(unread, watch=self._on_topic_watch) if unread else {}
        fresh = {topic: list(ids) for topic, ids in read.items() if ids is not None}
        with self._wakeup:
            if self._topic_events == events:
                self._partition_ids.update(fresh)
        for topic, found in read.items():
            if found is None and topic not in self._warned_missing:
                log.warning("consumer %s: topic %s does not exist yet; waiting for it", self._consumer_id, topic)
                self._warned_missing.add(topic)
        return {topic: ids for topic in topics if (ids := cached.get(topic, fresh.get(topic))) is not None}

    def _needs_topic_watch(self) -> bool:
        """Watch /brokers/topics children for wildcards, and while a static topic does not exist yet."""
        return self._subscription.is_wildcard or bool(self._warned_missing) or self.generation == 0

    def _registrations(self) -> dict[str, TopicCount]:
        """The members the assignment is computed for.

        Left out (with a warning naming the node): a registration that does not decode (including a topic
        filter RE2 rejects), and one held by a *persistent* node. Kafka 0.8 counts the latter too, but a
        persistent node is no live consumer: nothing ever removes it, and whatever streams it asks for (a
        fake member asking for 100,000 takes every partition) would be assigned to nobody who reads. So
        metaq members assign among the ephemeral, i.e. live, members only. A Kafka 0.8 member of the same
        group still counts such a node, so the two disagree until it is deleted: the warning says so."""
        members: dict[str, TopicCount] = {}
        quiet, self._quiet_ids = self._quiet_ids, None
        with self._wakeup:  # the list the coalescing wait just read, if no watch fired since (its watch is armed)
            unchanged = quiet is not None and quiet[1] == self._watch_events
        ids = quiet[0] if quiet is not None and unchanged else self._layout.consumer_ids(self._group,
                                                                                       watch=self._on_watch)
        # A member's registration never changes (one subscription per connector, and consumer ids are unique
        # per process start): read only the members not seen before, pipelined, instead of every member at
        # every rebalance of every member (N x N reads per membership change).
        known = {member: self._member_nodes[member] for member in ids if member in self._member_nodes}
        fresh = self._layout.read_consumer_nodes(self._group, [member for member in ids if member not in known])
        self._member_nodes = {**known, **{m: n for m, n in fresh.items() if not isinstance(n, MalformedNodeError)}}
        for member, node in sorted({**known, **fresh}.items()):
            if isinstance(node, MalformedNodeError):
                log.warning("ignoring member with a malformed registration: %s", node)
                continue
            if not node.ephemeral:
                if member not in self._warned_persistent:
                    self._warned_persistent.add(member)
                    log.warning("consumer %s: ignoring member %s: its node %s is persistent, not ephemeral, so "
                                "it is no live consumer (a fake or left-over registration); delete that node",
                                self._consumer_id, member, self._layout.full_path(
                                    paths.consumer_id_path(self._group, member)))
                continue
            members[member] = node.registration
        if self._consumer_id not in members:
            raise MetaqError(f"consumer {self._consumer_id} is not registered in group {self._group}")
        return members

    def _claim_all(self, mine: Mapping[TopicPartition, str]) -> bool:
        """Create every owner node of ``mine`` or none (one ZooKeeper transaction). On a conflict, the
        partitions still held by others are remembered for :meth:`_backoff` to wait on."""
        in_the_way = self._layout.claim_partitions(self._group, mine)
        if not in_the_way:
            return True
        self._conflicts = {key: owner for key, owner in in_the_way.items() if owner is not None}
        (topic, partition), owner = min(in_the_way.items())
        log.info("consumer %s: %s-%d is still owned by %s (%d of my %d partitions are taken); waiting for them "
                 "to be released", self._consumer_id, topic, partition, owner, len(in_the_way), len(mine))
        return False

    def _backoff(self, seconds: float) -> None:
        """The pause between attempts: rebalance.backoff.ms, as in Kafka 0.8, except after a claim conflict,
        when it ends as soon as every owner node that was in the way has been released (watched, not polled).

        Their owners delete them at the start of their own rebalance, usually milliseconds after ours
        started; sleeping the whole backoff for that is what makes 0.8 rebalances take seconds. The wait
        stays bounded by the backoff, so a member that keeps a partition (its view of the group differs
        from ours) is waited out exactly as before, and the next attempt re-reads the group."""
        conflicts, self._conflicts = self._conflicts, None
        deadline = time.monotonic() + seconds
        if conflicts is None:  # the attempt failed for another reason
            self._shutdown.wait(seconds)
            return
        changed = threading.Event()

        def watch(_event: Any) -> None:
            changed.set()

        while conflicts and not self._shutdown.is_set():
            changed.clear()  # before reading: a release between the read and the wait still wakes us
            try:
                owners = self._layout.owners_of(self._group, conflicts, watch=watch)
            except MetaqError as e:
                log.info("consumer %s: cannot watch the owner nodes in the way: %s", self._consumer_id, e)
                self._shutdown.wait(max(0.0, deadline - time.monotonic()))
                return
            conflicts = {key: owner for key, owner in conflicts.items() if owners.get(key) == owner}
            remaining = deadline - time.monotonic()
            if not conflicts or remaining <= 0:
                return
            changed.wait(min(remaining, EXECUTOR_TICK_S))  # ticks to notice shutdown

    def _release_claims(self, claims: Mapping[TopicPartition, str]) -> None:
        self._layout.release_partitions(self._group, claims)

    def _publish(self, mine: Mapping[TopicPartition, str], offsets: Mapping[TopicPartition, int | None]) -> None:
        self.generation += 1
        registry = {}
        for (topic, partition), tid in mine.items():
            offset = offsets.get((topic, partition))
            start = -1 if offset is None else offset  # -1: resolved by the fetcher via auto.offset.reset
            registry[(topic, partition)] = PartitionTopicInfo(
                topic, partition, self._subscription.queue_for(topic, tid), start, start, self.generation, tid)
        self.registry = registry

    def _read_offset(self, key: TopicPartition) -> int | None:
        try:
            node = self._layout.read_fenced_offset(self._group, *key)
        except MetaqError:
            return None
        return None if node is None else node.offset

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

    # -- commits -----------------------------------------------------------------------------------

    def commit(self, infos: Iterable[PartitionTopicInfo] | None = None, *, include_revoked: bool = False) -> None:
        """Commit consumed offsets of owned partitions; partitions whose fence was lost are revoked."""
        # The auto-commit thread and the rebalance thread both commit. Reading the offsets and writing them
        # must be one step: otherwise offsets read by one thread before the other's newer commit could be
        # written after it, with a still valid version, moving the committed offset backwards.
        with self._commit_lock:
            self._commit(infos, include_revoked)

    def _commit(self, infos: Iterable[PartitionTopicInfo] | None, include_revoked: bool) -> None:
        chosen = list(self.registry.values()) if infos is None else list(infos)
        offsets = {info.key: info.get_consumed_offset() for info in chosen if include_revoked or not info.revoked}
        started = time.monotonic()
        try:
            result = self._store.commit(offsets)
        except MetaqError:
            if self._metrics is not None:
                self._metrics.committed(time.monotonic() - started, ok=False)
            raise
        if self._metrics is not None:
            self._metrics.committed(time.monotonic() - started, ok=True, fenced=len(result.lost))
        if result.lost:
            for key in sorted(result.lost):
                info = self.registry.get(key)
                if info is not None:
                    info.revoke()
                self._explain_changed_node(key, None if info is None else self._read_offset(key))
            log.info("consumer %s: taking %s again; rebalancing", self._consumer_id, sorted(result.lost))
            self.trigger()

    # -- session loss and self-check -----------------------------------------------------------------

    def _handle_session_loss(self) -> None:
        """The old session's ephemerals are gone: void ownership without committing, re-register."""
        with self._lock:
            log.warning("consumer %s: ZooKeeper session lost; ownership void, re-registering", self._consumer_id)
            self._fetcher.stop_connections()
            for info in self.registry.values():
                info.revoke()
            self._subscription.clear_queues()
            self._store.release(list(self.registry))
            self.registry = {}
            try:
                self._layout.register_consumer(self._group, self._consumer_id, self._subscription.topic_count())
            except MetaqError:
                with self._wakeup:  # not connected yet: handle the loss again on the next tick
                    self._session_lost = True
                self.trigger_later(self._registration_policy.delay(1))
                raise
            if self.state == LOST:
                self._set_state(REBALANCING)  # registered again: the rebalance that follows is under way

    def _recheck(self) -> bool:
        """After the connection came back in the same session: re-arm the watches kazoo dropped and tell
        whether a rebalance is needed, i.e. whether the group changed while we could not watch it (a
        member came or went, partitions were added) or our owner nodes are not what we believe."""
        with self._lock:
            if self.state != STABLE:
                return True  # FAILED: the rebalance it needs re-arms everything
            try:
                if not self._layout.broker_ids():
                    return True
                _, mine = self._assignment()
                current = {key: info.thread_id for key, info in self.registry.items()}
                changed = mine != current or any(self._layout.owner(self._group, topic, partition) != tid
                                                 for (topic, partition), tid in mine.items())
            except MetaqError as e:
                log.info("consumer %s: re-arming watches after reconnecting failed (retrying): %s",
                         self._consumer_id, e)
                with self._wakeup:
                    self._rearm = True
                return False
            if changed:
                log.info("consumer %s: the group changed while disconnected from ZooKeeper; rebalancing",
                         self._consumer_id)
            else:
                log.info("consumer %s: reconnected to ZooKeeper; ownership unchanged, watches re-armed",
                         self._consumer_id)
            return changed

    def _self_check_fails(self) -> bool:
        """Periodically compare the owner nodes with what this member believes it owns."""
        interval = self._config.self_check_interval_ms / 1000.0
        if interval <= 0 or self.state not in (STABLE,) or time.monotonic() < self._next_self_check:
            return False
        self._next_self_check = time.monotonic() + interval
        for (topic, partition), info in list(self.registry.items()):
            if self._layout.owner(self._group, topic, partition) != info.thread_id:
                log.warning("self-check: %s-%d is not owned by %s in ZooKeeper; rebalancing",
                            topic, partition, info.thread_id)
                return True
        return False

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
