"""The controller: one broker, elected through the ephemeral ``/controller`` node, that moves leadership of
replicated partitions when brokers die or return.

Every broker runs a :class:`Controller`; the one whose create of ``/controller`` succeeds increments
``/controller_epoch`` and acts, the others watch ``/controller`` and run again when it goes. Acting means:
on every change of ``/brokers/ids`` (and periodically, in case a watch was missed), decide each replicated
partition's state with :func:`metaq.broker.replication.election.elect` and write what changed, each write
fenced by the controller epoch (:meth:`zk_layout.ZkLayout.set_partition_state_fenced`), so a controller that
lost its session cannot overwrite a newer one's decisions. A ``/admin/preferred_replica_election`` request
(``metaq topics elect-leaders``) moves leadership back to each named partition's first replica where it is
alive and in the ISR, and is deleted when done. ISR change notifications are consumed (deleted):
brokers learn states by watching the state nodes themselves, so the notification carries no extra work.
A partition whose assignment has no state node yet (a topic or partitions added by a tool that leaves the
election to the controller, as Kafka's ``TopicCommand --zookeeper`` does) gets its first state from
:func:`metaq.broker.replication.election.initial_state`, whatever its replication factor.

Otherwise partitions with one replica are left alone: their only replica leads whenever it is up, as before.

Partition reassignments (docs/reassignment.md, the states in :mod:`.reassignment`): a request in
``/admin/reassign_partitions`` is written to the topic node as RS = TRS + ORS with its adding/removing replicas;
once every target replica is in the ISR, leadership moves into the target if it must, the ISR is cut to it, the
topic node is written with RS = TRS and the request entry removed. AlterPartitionReassignments,
ListPartitionReassignments and ElectLeaders, which Kafka's clients send to the controller, are served by
:meth:`Controller.alter_reassignments`, :meth:`Controller.list_reassignments` and :meth:`Controller.elect_leaders`
(any thread; every write is conditional on the node's version and fenced by the controller epoch).
Thread: ``metaq-broker-controller``; ZooKeeper watches only wake it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState

from metaq.broker.replication.controller_reassignments import ReassignmentDriver
from metaq.broker.replication.controller_results import (
    NO_PARTITION,
    NotControllerError,
    PartitionResult,
    TopicPartition,
)
from metaq.broker.replication.election import NO_LEADER, elect, elect_preferred, imbalanced_brokers, initial_state
from metaq.broker.replication.reassignment import (
    Reassignment,
)
from metaq.errors import ControllerMovedError, ErrorCode, MalformedNodeError, MetaqError, StaleVersionError
from metaq.retry import zookeeper_follower
from zk_layout import PartitionState, ZkLayout
from zk_layout.controller import ControllerEpoch

log = logging.getLogger(__name__)

SAFETY_RUN_S = 10.0  # act even without events, in case a watch was missed


class Controller(ReassignmentDriver):
    """Runs for controller and, while elected, keeps partition leaders on live brokers. Owns its thread
    (``metaq-broker-controller``), the controller epoch it won (the fence every write carries), the reassignments it
    drives (:class:`ReassignmentDriver`) and what it has seen of the topics (partitions with a state node, malformed
    topic nodes, logged once)."""

    def __init__(self, broker_id: int, layout: ZkLayout, client: KazooClient, *, unclean: bool = False,
                 rebalance_interval_s: float | None = None, imbalance_percentage: int = 10) -> None:
        """``rebalance_interval_s``: check leader imbalance that often (``auto.leader.rebalance.enable``);
        None: never."""
        self._broker_id = broker_id
        self._layout = layout
        self._client = client
        self._unclean = unclean
        self._rebalance_interval_s = rebalance_interval_s
        self._imbalance_percentage = imbalance_percentage
        self._next_rebalance = 0.0
        # partitions seen with a state node, by topic id (a topic deleted and created again between two passes
        # is a new topic): not looked up again
        self._stated: set[tuple[str, str | None, int]] = set()
        self._malformed: dict[str, str] = {}  # topic node path -> why it was left out (logged once)
        self._fence: ControllerEpoch | None = None
        self._reassignments: dict[TopicPartition, Reassignment] = {}  # in progress, as this controller drives them
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._retry = zookeeper_follower("controller", backoff_s=0.5)
        self._thread = threading.Thread(target=self._run, name="metaq-broker-controller", daemon=True)

    @property
    def epoch(self) -> int | None:
        """The controller epoch while this broker is the controller, else None."""
        fence = self._fence
        return None if fence is None else fence.epoch

    def start(self) -> None:
        self._client.add_listener(self._on_state)
        self._wake.set()  # run for controller at once
        self._thread.start()

    def stop(self) -> None:
        """Stop acting and give up ``/controller`` (the other brokers elect at once instead of after the
        session timeout)."""
        self._stopped.set()
        self._wake.set()
        if self._thread.ident is not None:  # never started: the broker failed to start before
            self._thread.join(timeout=5)
        self._client.remove_listener(self._on_state)
        if self._fence is not None:
            self._fence = None
            try:
                self._layout.resign_controller()
            except MetaqError as e:
                log.warning("could not resign as controller (the session's end will): %s", e)

    def kick(self, *_: Any) -> None:
        """Watch callback (kazoo thread): never blocks."""
        self._wake.set()

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.LOST and self._fence is not None:
            log.warning("broker %d lost its ZooKeeper session: no longer the controller", self._broker_id)
            self._fence = None
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(timeout=SAFETY_RUN_S)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                self.run_once()
            except ControllerMovedError as e:
                log.warning("broker %d is no longer the controller: %s", self._broker_id, e)
                self._fence = None
                self._wake.set()
            except MetaqError as e:  # zk_layout translates every kazoo error
                log.warning("controller step failed (will retry): %s", e)
                self._stopped.wait(self._retry.delay(1))
                self._wake.set()

    def run_once(self) -> None:
        """One election attempt or, as controller, one pass over the partitions."""
        try:
            holder = self._layout.controller(watch=self.kick)
        except MalformedNodeError as e:
            # garbage no broker could be elected over: removed, and the election runs again (its watch)
            if self._layout.discard_malformed_controller():
                log.error("removed a /controller node that does not decode, to elect a controller: %s", e)
            return
        if self._fence is not None and (holder is None or holder.broker_id != self._broker_id):
            log.warning("broker %d: /controller no longer names us: stepping down", self._broker_id)
            self._fence = None
        if self._fence is None:
            if holder is not None:
                return  # someone else controls; the watch on /controller wakes us when it goes
            fence = self._layout.try_become_controller(self._broker_id)
            if fence is None:
                self._layout.controller(watch=self.kick)  # lost the race: watch the winner
                return
            self._fence = fence
            self._reassignments = {}  # resumed from the topic nodes by the first pass
            log.info("broker %d is the controller (controller epoch %d)", self._broker_id, fence.epoch)
        self._act(self._fence)

    def _act(self, fence: ControllerEpoch) -> None:
        live = set(self._layout.broker_ids(watch=self.kick))
        self._layout.topics(watch=self.kick)  # a new topic: its partitions are checked at once
        for name in self._layout.isr_changes(watch=self.kick):
            self._layout.delete_isr_change(name)
        offline = self._offline_replicas(live)
        requested = self._layout.preferred_election_request(watch=self.kick)
        preferred = set(requested or ())
        rebalance = self._rebalance_due()
        seen: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
        topics = self._layout.topics()
        present = set(topics)
        # a topic being deleted loses its partition nodes one by one: they must not come back (as in Kafka,
        # whose controller leaves topics queued for deletion alone)
        deleting = set(self._layout.topics_marked_for_deletion())
        self._stated = {key for key in self._stated if key[0] in present and key[0] not in deleting}
        malformed: dict[str, str] = {}
        request = self._layout.reassignment_request(watch=self.kick)
        targets = request[0] if request is not None else {}
        request_version = request[1] if request is not None else None
        finished: set[TopicPartition] = {key for key in targets if key[0] not in present or key[0] in deleting}
        for topic in topics:
            try:
                # a data watch: added partitions wake the controller (Kafka's PartitionModificationsHandler)
                node = self._layout.topic_assignment_versioned(topic, watch=self.kick)
            except MalformedNodeError as e:  # that topic alone is left out, the others go on
                malformed[e.path] = str(e)
                continue
            if node is None:
                continue
            assignment, version = node
            if topic not in deleting:
                done, rewritten = self._reassign(fence, topic, assignment, version, (targets, request_version),
                                                 live)
                finished |= done
                if rewritten:
                    continue  # its data watch runs the next pass on the new assignment
                self._initialize_new_partitions(fence, topic, assignment.topic_id, assignment.partitions, live)
            replicated = {p: r for p, r in assignment.partitions.items() if len(r) > 1}
            states = self._layout.partition_states_versioned((topic, p) for p in replicated)
            for (_, partition), versioned in states.items():
                if versioned is not None:
                    seen[(topic, partition)] = (versioned[0].leader, replicated[partition])
                    self._decide(fence, topic, partition, replicated[partition],
                                 {b for b in live if (topic, partition) not in offline.get(b, ())}, *versioned,
                                 preferred=(topic, partition) in preferred)
        self._report(malformed)
        if finished:
            self._layout.remove_from_reassignment_request(finished)
        if requested is not None:
            self._layout.finish_preferred_election()
        if rebalance:
            brokers = imbalanced_brokers(seen, live, self._imbalance_percentage)
            moves = [key for key, (leader, replicas) in seen.items()
                     if replicas[0] in brokers and leader != replicas[0]]
            if moves:
                log.info("leader imbalance on brokers %s: moving %d partitions to their preferred replica",
                         sorted(brokers), len(moves))
                self._layout.request_preferred_election(moves)  # carried out by the next pass (its watch)

    def _offline_replicas(self, live: set[int]) -> dict[int, set[tuple[str, int]]]:
        """Consume the log dir event notifications and read the live brokers' offline partitions: a replica
        in a failed log directory counts as a dead broker for that partition alone (leaves the ISR, loses
        leadership), as Kafka's ``onReplicasBecomeOffline`` (docs/log-dirs.md)."""
        for name, broker in self._layout.log_dir_events(watch=self.kick).items():
            log.info("log directory failure reported by broker %d", broker)
            self._layout.delete_log_dir_event(name)
        return self._layout.offline_replicas(live)

    def _initialize_new_partitions(self, fence: ControllerEpoch, topic: str, topic_id: str | None,
                                   assignment: Mapping[int, tuple[int, ...]], live: set[int]) -> None:
        """Create the first state of each partition of ``topic`` that has none (Kafka's NewPartition ->
        OnlinePartition); one without a live replica is tried again on the next pass."""
        unknown = [p for p in assignment if (topic, topic_id, p) not in self._stated]
        if not unknown:
            return
        for (_, partition), versioned in self._layout.partition_states_versioned((topic, p) for p in unknown).items():
            if versioned is None:
                new = initial_state(assignment[partition], live, controller_epoch=fence.epoch)
                if new is None:
                    log.warning("%s-%d: no live replica among %s: no leader yet", topic, partition,
                                list(assignment[partition]))
                    continue
                try:
                    self._layout.create_partition_state_fenced(fence, topic, partition, new)
                except StaleVersionError:
                    pass  # created meanwhile (or malformed): either way a state node exists
                else:
                    log.info("%s-%d: new partition, leader %d, ISR %s (controller epoch %d)", topic, partition,
                             new.leader, list(new.isr), fence.epoch)
            self._stated.add((topic, topic_id, partition))

    def _report(self, malformed: dict[str, str]) -> None:
        """Log each malformed topic node once while it stays (the controller passes twice a second)."""
        for path in sorted(malformed.keys() - self._malformed.keys()):
            log.error("controller: leaving out a topic whose node does not decode: %s", malformed[path])
        self._malformed = malformed

    def _rebalance_due(self) -> bool:
        if self._rebalance_interval_s is None:
            return False
        now = time.monotonic()
        if now < self._next_rebalance:
            return False
        first = self._next_rebalance == 0.0
        self._next_rebalance = now + self._rebalance_interval_s
        return not first  # not right after the election: returning brokers first catch up

    def _decide(self, fence: ControllerEpoch, topic: str, partition: int, replicas: tuple[int, ...],
                live: set[int], state: Any, version: int, *, preferred: bool = False) -> None:
        new = elect(state, replicas, live, controller_epoch=fence.epoch, unclean=self._unclean)
        if new is None and preferred:
            new = elect_preferred(state, replicas, live, controller_epoch=fence.epoch)
        if new is None:
            return
        try:
            self._layout.set_partition_state_fenced(fence, topic, partition, new, version)
        except ControllerMovedError:
            raise
        except StaleVersionError:
            self._wake.set()  # a leader changed its ISR meanwhile: decide again from the new state
            return
        log.info("%s-%d: leader %d -> %d, leader epoch %d, ISR %s (controller epoch %d)", topic, partition,
                 state.leader, new.leader, new.leader_epoch, list(new.isr), fence.epoch)

    # ------------------------------------------------------------------------------------------ reassignment

    def elect_leaders(self, partitions: Collection[TopicPartition] | None, *, unclean: bool
                      ) -> dict[TopicPartition, PartitionResult]:
        """ElectLeaders (any thread), as Kafka's ``processReplicaLeaderElection``: preferred moves leadership to
        the first replica if it is alive and in the ISR; unclean elects a leader for partitions without a live
        one, from the ISR if any member is alive, else any live replica. ELECTION_NOT_NEEDED where the leader
        is already right. None: every partition. NotControllerError unless this broker is the controller."""
        fence = self._require_fence()
        live = set(self._layout.broker_ids())
        deleting = set(self._layout.topics_marked_for_deletion())
        wanted = sorted(partitions) if partitions is not None else None
        topics = sorted({t for t, _ in wanted}) if wanted is not None else self._layout.topics()
        replicas: dict[TopicPartition, tuple[int, ...]] = {}
        for topic in topics:
            try:
                assignment = self._layout.topic_assignment(topic)
            except MalformedNodeError:
                continue
            if assignment is not None:
                replicas.update(((topic, p), r) for p, r in assignment.partitions.items())
        keys = wanted if wanted is not None else sorted(replicas)
        states = self._layout.partition_states_versioned(k for k in keys if k in replicas)
        results: dict[TopicPartition, PartitionResult] = {}
        for key in keys:
            if key not in replicas:
                results[key] = NO_PARTITION
            elif key[0] in deleting:
                results[key] = PartitionResult(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
            else:
                results[key] = self._elect_one(fence, key, replicas[key], states.get(key), live, unclean=unclean)
        self._wake.set()
        return results

    def _elect_one(self, fence: ControllerEpoch, key: TopicPartition, replicas: tuple[int, ...],
                   versioned: tuple[PartitionState, int] | None, live: set[int], *, unclean: bool) -> PartitionResult:
        failed = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE if unclean else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        if versioned is None:
            return PartitionResult(failed, "the partition has no state yet")
        state, version = versioned
        if unclean:
            if state.leader != NO_LEADER and state.leader in live:
                return PartitionResult(ErrorCode.ELECTION_NOT_NEEDED)
            new = elect(state, replicas, live, controller_epoch=fence.epoch, unclean=True)
        else:
            if replicas and state.leader == replicas[0]:
                return PartitionResult(ErrorCode.ELECTION_NOT_NEEDED)
            new = elect_preferred(state, replicas, live, controller_epoch=fence.epoch)
        if new is None or new.leader == NO_LEADER:
            return PartitionResult(failed, f"no eligible replica among {list(replicas)} (live and in the ISR "
                                           f"{list(state.isr)}{'' if not unclean else ', or live'})")
        try:
            self._layout.set_partition_state_fenced(fence, *key, new, version)
        except StaleVersionError:
            return PartitionResult(failed, "the partition's state changed meanwhile: try again")
        log.info("%s-%d: %s leader election: leader %d -> %d, leader epoch %d, ISR %s", *key,
                 "unclean" if unclean else "preferred", state.leader, new.leader, new.leader_epoch, list(new.isr))
        return PartitionResult(ErrorCode.NONE)

    def _require_fence(self) -> ControllerEpoch:
        fence = self._fence
        if fence is None:
            raise NotControllerError(f"broker {self._broker_id} is not the controller")
        return fence


