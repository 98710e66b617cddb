"""A member's side of the live migration between ZooKeeper and broker coordination.

docs/broker-coordinated-consumer.md, "Live migration of a ZooKeeper group", is the design. In short: while the
marker ``/consumers/<g>/migration`` (zk_layout.migration) says a migration runs, ZooKeeper's owner nodes stay
the mutual exclusion for both kinds of member, and both kinds compute one assignment (Kafka 0.8's assignor over
every ZooKeeper registration, metaq.consumer.assignors). A member is in one of three modes:

- ``zookeeper``: :class:`metaq.consumer.rebalance.ZKRebalancerListener`, unchanged;
- ``bridge``: :class:`MigratingMember` with ZooKeeper claims: broker-coordinated (JoinGroup, SyncGroup,
  Heartbeat, generation-checked commits), yet registered in ``/consumers/<g>/ids``, claiming the owner node
  of each partition the coordinator gave it (all or none) before fetching it, reading ``max(zookeeper,
  kafka)`` when it takes a partition and committing to both; a bridge leader assigns with the ZooKeeper
  assignment, so a bridge member gets exactly what a ZooKeeper member in its place would claim;
- ``kafka``: :class:`MigratingMember` without claims, i.e. a plain :class:`GroupMember`.

:func:`target_mode` says which mode the marker asks of a member; :class:`MigrationDriver` (one named thread
per consumer, ``<consumerId>-migration``) watches the marker and has the connector switch: between
``zookeeper`` and ``bridge`` by replacing the rebalancer (the old one releases and commits first), between
``bridge`` and ``kafka`` in place, at the member's next rebalance (after its revoke, before its JoinGroup).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from kafka.protocol.consumer import ConsumerProtocolSubscription
from kazoo.protocol.states import WatchedEvent

from metaq.consumer.assignors import AssignmentContext
from metaq.consumer.coordination import GroupMember
from metaq.consumer.group_member_state import CLAIMING, STABLE, Generation, _Restart
from metaq.consumer.group_protocol import decode_subscription, encode_assignment
from metaq.consumer.ids import consumer_id_of, make_thread_ids
from metaq.consumer.offset_store import OffsetStore, TopicPartition
from metaq.errors import MalformedNodeError, MetaqError
from metaq.protocol.messages import ApiResponse
from zk_layout import ZkLayout
from zk_layout.migration import (
    BRIDGE_MODE,
    BRIDGING,
    DONE,
    KAFKA_MODE,
    TO_KAFKA,
    ZOOKEEPER_MODE,
    MemberMode,
    MigrationMarker,
)

log = logging.getLogger(__name__)

DRIVER_TICK_S = 5.0  # the driver re-reads the marker at least this often (besides its watch, and on reconnecting)
READY_POLL_S = 0.1  # how often the driver checks whether the member became STABLE in its new mode
CLAIM_WAIT_S = 0.5  # a bridge member waiting for an owner node re-checks at least this often


def target_mode(marker: MigrationMarker | None, consumer_id: str, configured: str) -> str:
    """The mode the marker asks of this member (``configured``: its ``group.coordination``).

    Towards kafka: MIGRATING makes every member a bridge (with ``member_by_member``, only those named so far;
    a member configured for kafka is a bridge in any case, it must respect the ZooKeeper members' owner
    nodes); DONE makes every member a plain kafka member. Towards zookeeper: BRIDGING makes every member a
    bridge (a ZooKeeper member must never meet a broker member that holds no owner nodes); MIGRATING makes
    the members (or those named so far) ZooKeeper members; DONE every member. No marker: ``configured``."""
    if marker is None:
        return configured
    if marker.state == DONE:
        return KAFKA_MODE if marker.to == TO_KAFKA else ZOOKEEPER_MODE
    named = not marker.member_by_member or consumer_id in marker.members
    if marker.to == TO_KAFKA:
        return BRIDGE_MODE if named or configured == KAFKA_MODE else ZOOKEEPER_MODE
    if marker.state == BRIDGING:
        return BRIDGE_MODE
    return ZOOKEEPER_MODE if named else BRIDGE_MODE


def next_step(current: str, target: str) -> str:
    """The next mode on the way from ``current`` to ``target``: zookeeper and kafka are never adjacent, a
    member passes through bridge (so that it holds owner nodes whenever ZooKeeper members may exist)."""
    if {current, target} == {ZOOKEEPER_MODE, KAFKA_MODE}:
        return BRIDGE_MODE
    return target


# -- the subscription's user data: who a JoinGroup member is in ZooKeeper ---------------------------------


def encode_bridge_subscription(topics: Iterable[str], consumer_id: str) -> bytes:
    """Kafka's ``ConsumerProtocolSubscription`` v0 whose user data names the member's ZooKeeper consumer id, so
    that a bridge leader can give it the partitions the ZooKeeper assignment names for that id. Other
    clients' assignors ignore user data."""
    user_data = json.dumps({"metaq.consumer.id": consumer_id}).encode("utf-8")
    return bytes(ConsumerProtocolSubscription(version=0, topics=sorted(set(topics)), user_data=user_data).encode())


def bridge_consumer_id(data: bytes) -> str | None:
    """The consumer id a bridge member's subscription names; None for any other member."""
    try:
        user_data = ConsumerProtocolSubscription.decode(bytes(data)).user_data
        if not user_data:
            return None
        value = json.loads(bytes(user_data).decode("utf-8")).get("metaq.consumer.id")
    except Exception:  # foreign user data (another client's assignor): not a bridge member
        return None
    return value if isinstance(value, str) else None


def bridge_assignment(members: Mapping[str, tuple[str | None, tuple[str, ...]]], context: AssignmentContext,
                      strategy: str, roundrobin_hash: str) -> dict[str, list[TopicPartition]]:
    """member id -> partitions: the ZooKeeper assignment (``context``, over every registration) restricted, for
    each JoinGroup member, to the partitions of the threads of its consumer id and its subscribed topics.
    ``members``: member id -> (consumer id or None, topics). Partitions of registrations that are not in the
    JoinGroup (ZooKeeper members, members switching) are given to nobody here: their owners claim them."""
    whole = context.assign(strategy, roundrobin_hash)
    by_consumer: dict[str, list[TopicPartition]] = {}
    for key, thread_id in whole.items():
        by_consumer.setdefault(consumer_id_of(thread_id), []).append(key)
    result: dict[str, list[TopicPartition]] = {}
    for member_id, (consumer_id, topics) in members.items():
        parts = by_consumer.get(consumer_id, []) if consumer_id is not None else []
        result[member_id] = sorted(key for key in parts if key[0] in topics)
    return result


def _set_event(event: threading.Event, _watched: WatchedEvent) -> None:
    event.set()


def _below(offset: int | None, taken: int) -> bool:
    return offset is None or offset < taken


class MigratingMember(GroupMember):
    """A broker-coordinated member that can hold ZooKeeper claims (``bridge``) or not (``kafka``); see the
    module docstring. The mode changes only between a revoke and the next JoinGroup (:meth:`set_mode`)."""

    HEARTBEAT_STATES = frozenset({STABLE, CLAIMING})  # a bridge waiting for an owner node stays in the group

    def __init__(self, *args: Any, store: OffsetStore, mode: str, epoch: int = 0,
                 on_mode: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._store = store
        self.mode = mode
        self._epoch = epoch
        self._pending_mode: str | None = None
        self._on_mode = on_mode
        self._claimed: dict[TopicPartition, str] = {}  # owner nodes claimed by the attempt under way
        self._must_register = False  # the ZooKeeper session was lost: register again before the next claims
        self._after_bridge = False  # just left bridge mode: the next take also reads ZooKeeper's offsets

    @property
    def bridge(self) -> bool:
        return self.mode == BRIDGE_MODE

    def set_mode(self, mode: str, epoch: int) -> None:
        """Become ``mode`` (bridge or kafka) at the next rebalance, which this asks for now."""
        with self._wakeup:
            self._pending_mode = mode
            self._epoch = epoch
        self.request_rejoin(f"migration: becoming a {mode} member")

    # -- what ZooKeeper's session means to a bridge ------------------------------------------------------

    def session_lost(self) -> None:
        """A bridge's owner nodes died with the session: stop delivering at once, commit nothing, rejoin (and
        register again first)."""
        if not self.bridge:
            return
        self._must_register = True
        self._lose(self.generation_info, "ZooKeeper session lost (the owner nodes went with it)")

    # -- join: the subscription names our consumer id; a bridge leader assigns as ZooKeeper does -------

    def _subscription_bytes(self) -> bytes:
        if not self.bridge:
            return super()._subscription_bytes()
        return encode_bridge_subscription(self._topics(), self._consumer_id)

    def _assign(self, joined: ApiResponse) -> dict[str, bytes]:
        if not self.bridge:
            return super()._assign(joined)
        members = {m.member_id: (bridge_consumer_id(m.metadata), decode_subscription(m.metadata))
                   for m in joined.members}
        # the members ZKRebalancerListener._registrations counts: live (ephemeral) ones whose node decodes
        nodes = self._layout.read_consumer_nodes(
            self._group, self._layout.consumer_ids(self._group, watch=self._registrations_changed))
        registrations = {cid: node.registration for cid, node in nodes.items()
                         if not isinstance(node, MalformedNodeError) and node.ephemeral}
        all_topics = self._layout.topics()
        counts: dict[str, list[int]] = {}
        wanted = sorted({t for reg in registrations.values()
                         for t in reg.streams_per_topic(all_topics,
                                                        exclude_internal=self._config.exclude_internal_topics)})
        for topic, ids in self._layout.topic_partition_ids(wanted).items():
            counts[topic] = list(ids or ())
        context = AssignmentContext.from_topic_counts(registrations, counts, topics=all_topics,
                                                      exclude_internal_topics=self._config.exclude_internal_topics)
        assignment = bridge_assignment(members, context, self._config.partition_assignment_strategy,
                                       self._config.partition_assignment_roundrobin_hash)
        self._assigned_counts = {topic: len(ids) for topic, ids in counts.items()}
        self._metadata_check_at = time.monotonic() + self._config.metadata_max_age_ms / 1000.0
        log.info("consumer %s leads group %s generation %d as a bridge (ZooKeeper's assignment over %d "
                 "registrations): %s", self._consumer_id, self._group, joined.generation_id, len(registrations),
                 {m: len(ps) for m, ps in assignment.items()})
        return {member: encode_assignment(parts) for member, parts in assignment.items()}

    def _registrations_changed(self, _event: WatchedEvent) -> None:
        """The bridge leader's watch on ``/ids``: a member came or went, the ZooKeeper assignment changed (a
        rejoin asked for during a join makes that join start over: the watch is one-shot, nothing is missed)."""
        if self.bridge and not self._closing.is_set():
            self.request_rejoin("the ZooKeeper registrations changed")

    # -- take: claim the owner nodes, read max(zookeeper, kafka), bring both stores up to it -----------

    def _threads_for(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, str]:
        """The thread id each partition will be published under (as GroupMember._publish deals them)."""
        counts = self._subscription.topic_count().subscription
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        result: dict[TopicPartition, str] = {}
        for topic, ids in by_topic.items():
            threads = make_thread_ids(self._consumer_id, counts[topic])
            for n, partition in enumerate(ids):
                result[(topic, partition)] = threads[n % len(threads)]
        return result

    def _fetch_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        if not self.bridge:
            return self._fetch_after_migration(partitions)
        claims = self._threads_for(partitions)
        self._claim(claims)
        zookeeper = self._store.take_ownership(claims)
        kafka = super()._fetch_offsets(partitions)
        taken: dict[TopicPartition, int] = {}
        for key in claims:
            known = [o for o in (zookeeper.get(key), kafka.get(key)) if o is not None and o >= 0]
            if known:
                taken[key] = max(known)
        behind_zk = {key: o for key, o in taken.items() if _below(zookeeper.get(key), o)}
        behind_kafka = {key: o for key, o in taken.items() if _below(kafka.get(key), o)}
        if behind_zk:
            lost = self._store.commit(behind_zk).lost
            if lost:
                raise _Restart(f"the offset nodes of {sorted(lost)} changed while taking them")
        if behind_kafka:
            refused = super()._commit(self.generation_info, behind_kafka)
            if refused:
                raise _Restart("the coordinator refused the offsets carried over from ZooKeeper")
        if behind_zk or behind_kafka:
            log.info("consumer %s: carried offsets max(zookeeper, kafka) to both stores: %s", self._consumer_id,
                     {f"{t}-{p}": o for (t, p), o in sorted({**behind_zk, **behind_kafka}.items())})
        return taken

    def _fetch_after_migration(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """At its first rebalance after leaving bridge mode, a plain member starts no partition below its
        ZooKeeper offset: the bridges carried every offset into the coordinator before DONE, but this safety net
        costs one pipelined read, and starting from auto.offset.reset would read the whole partition again.
        Only then: later, an operator's reset in the coordinator must win over the offset nodes kept."""
        kafka = super()._fetch_offsets(partitions)
        if not self._after_bridge:
            return kafka
        self._after_bridge = False
        try:
            zookeeper = self._layout.read_offsets(self._group, partitions)
        except MetaqError as e:
            log.info("consumer %s: reading the ZooKeeper offsets failed: %s", self._consumer_id, e)
            return kafka
        taken = dict(kafka)
        for key, offset in sorted(zookeeper.items()):
            if offset > taken.get(key, -1):
                log.info("consumer %s: %s-%d starts at its ZooKeeper offset %d (the coordinator has %s)",
                         self._consumer_id, key[0], key[1], offset, kafka.get(key))
                taken[key] = offset
        return taken

    def _claim(self, claims: Mapping[TopicPartition, str]) -> None:
        """All the owner nodes or none, waiting (watched) while ZooKeeper members still hold some; heartbeats
        go on meanwhile (CLAIMING). A rebalance or a fence meanwhile ends the attempt (_Restart)."""
        generation = self.generation_info
        self._set_state(CLAIMING)
        announced = False
        while True:
            if self._closing.is_set():
                raise _Restart("closing")
            with self._wakeup:
                rejoin = self._rejoin_needed
                if rejoin:
                    self._rejoin_needed = False
            if rejoin or generation != self.generation_info:
                raise _Restart("the group rebalanced while claiming owner nodes")
            in_the_way = self._layout.claim_partitions(self._group, claims)
            if not in_the_way:
                self._claimed = dict(claims)
                return
            if not announced:
                announced = True
                (topic, partition), owner = min(in_the_way.items())
                log.info("consumer %s: %s-%d is still owned by %s (%d of %d in the way); waiting", self._consumer_id,
                         topic, partition, owner, len(in_the_way), len(claims))
            changed = threading.Event()
            self._layout.owners_of(self._group, in_the_way, watch=partial(_set_event, changed))
            changed.wait(CLAIM_WAIT_S)

    def _join_and_sync(self) -> None:
        try:
            super()._join_and_sync()
        except BaseException:
            self._release_claims()  # claimed but never published (a rebalance began, or an error)
            raise
        self._claimed = {}

    def _release_claims(self) -> None:
        claims, self._claimed = self._claimed, {}
        if claims:
            self._store.release(claims)
            try:
                self._layout.release_partitions(self._group, claims)
            except MetaqError as e:
                log.warning("consumer %s: could not release %s: %s", self._consumer_id, sorted(claims), e)

    # -- commit: ZooKeeper first (version-checked: the fence), then OffsetCommit ------------------------

    def _commit(self, generation: Generation, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not self.bridge:
            return super()._commit(generation, offsets)
        lost = self._store.commit(offsets).lost
        if lost:
            log.warning("consumer %s: the offset nodes of %s changed behind this bridge member; not committing "
                        "them, rejoining", self._consumer_id, sorted(lost))
            for key in lost:
                info = self.registry.get(key)
                if info is not None:
                    info.revoke()
            self.request_rejoin("an offset node changed behind this member")
        return super()._commit(generation, {key: o for key, o in offsets.items() if key not in lost})

    # -- revoke: release the owner nodes; the mode changes here -------------------------------------------

    def _revoke_all(self, *, commit: bool) -> None:
        owned = {key: info.thread_id for key, info in self.registry.items()}
        super()._revoke_all(commit=commit)
        if self.bridge and owned:
            self._store.release(owned)
            try:
                self._layout.release_partitions(self._group, owned)
            except MetaqError as e:  # they die with the session anyway
                log.warning("consumer %s: could not release %s: %s", self._consumer_id, sorted(owned), e)
        self._apply_pending_mode()

    def _apply_pending_mode(self) -> None:
        if self._closing.is_set():  # shutting down (or being replaced): no registration changes now
            return
        with self._wakeup:
            pending, self._pending_mode = self._pending_mode, None
        if self._must_register or (pending == BRIDGE_MODE and not self.bridge):
            self._layout.register_consumer(self._group, self._consumer_id, self._subscription.topic_count())
            self._must_register = False
        if pending is None or pending == self.mode:
            return
        if pending == KAFKA_MODE:
            self._layout.unregister_consumer(self._group, self._consumer_id)
            self._after_bridge = self.bridge
        log.info("consumer %s: %s member -> %s member (group %s)", self._consumer_id, self.mode, pending, self._group)
        self.mode = pending
        if self._on_mode is not None:
            self._on_mode(pending)


class MigrationDriver:
    """Watches the group's migration marker and has the connector switch modes (module docstring).

    ``switch(mode, marker)`` is the connector's: it performs one step (zookeeper <-> bridge by replacing the
    rebalancer, bridge <-> kafka in place) and returns once the new mode is in force."""

    def __init__(self, layout: ZkLayout, group: str, consumer_id: str, configured: str,
                 current: Callable[[], str], switch: Callable[[str, MigrationMarker | None], None],
                 ready: Callable[[], bool] = lambda: True) -> None:
        self._layout = layout
        self._group = group
        self._consumer_id = consumer_id
        self._configured = configured
        self._current = current
        self._switch = switch
        self._ready = ready
        self._unpublished = False  # a mode to report once the member is STABLE in it
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._written: tuple[str, int] | None = None
        self._thread = threading.Thread(target=self._run, name=f"{consumer_id}-migration", daemon=True)

    def initial_mode(self) -> tuple[str, MigrationMarker | None]:
        """The mode to start in, the marker read (the watch armed)."""
        marker = self._read()
        return target_mode(marker, self._consumer_id, self._configured), marker

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(10.0)

    def wake(self) -> None:
        """Read the marker again now (the connection came back: kazoo dropped the watch with it)."""
        self._wake.set()

    def session_lost(self) -> None:
        """The mode node died with the session: write it again."""
        self._written = None
        self._wake.set()

    def _read(self) -> MigrationMarker | None:
        found = self._layout.migration_marker(self._group, watch=lambda _event: self._wake.set())
        return None if found is None else found[0]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(READY_POLL_S if self._unpublished else DRIVER_TICK_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.step()
            except Exception:  # the driver must survive anything; the next tick tries again
                log.exception("consumer %s: migration step failed", self._consumer_id)

    def step(self) -> None:
        """Read the marker, move one mode towards what it asks, and publish this member's mode."""
        marker = self._read()
        current = self._current()
        target = target_mode(marker, self._consumer_id, self._configured)
        if target != current:
            step = next_step(current, target)
            log.info("consumer %s: migration of group %s: %s -> %s (target %s)", self._consumer_id, self._group,
                     current, step, target)
            self._switch(step, marker)
            self._wake.set()  # look again at once: another step may be due
            current = self._current()
        self.publish(current, marker)

    def publish(self, mode: str, marker: MigrationMarker | None) -> None:
        """Write this member's mode node under the marker (once per mode and epoch), but only once the member
        is STABLE in that mode: the command takes "bridge" to mean the member's share is claimed and its offsets
        carried into the coordinator (DONE lets plain members take partitions with what the coordinator has)."""
        if marker is None or self._written == (mode, marker.epoch):
            self._unpublished = False
            return
        if not self._ready():
            self._unpublished = True
            return
        self._layout.set_member_mode(self._group, self._consumer_id, MemberMode(mode, marker.epoch))
        self._written = (mode, marker.epoch)
        self._unpublished = False

