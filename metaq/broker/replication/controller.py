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

New partitions have no ``state`` node (topic creation writes only the assignment, as Kafka's does): the controller
creates it, electing the first live replica, when the ``/brokers/topics`` child watch or a topic's data watch
(added partitions) fires. Partitions with one replica are otherwise left alone: their only replica leads whenever
it is up.
Thread: ``metaq-broker-controller``; ZooKeeper watches only wake it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient, KazooState

from metaq.broker.replication.election import elect, elect_preferred, imbalanced_brokers
from metaq.errors import ControllerMovedError, MalformedNodeError, MetaqError, StaleVersionError
from zk_layout import PartitionState, ZkLayout
from zk_layout.controller import ControllerEpoch

log = logging.getLogger(__name__)

SAFETY_RUN_S = 10.0  # act even without events, in case a watch was missed


class Controller:
    """Runs for controller and, while elected, keeps partition leaders on live brokers."""

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
        self._malformed: dict[str, str] = {}  # path -> why, of the nodes the last pass skipped
        self._fence: ControllerEpoch | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()
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
                self._stopped.wait(0.5)
                self._wake.set()

    def run_once(self) -> None:
        """One election attempt or, as controller, one pass over the partitions."""
        holder = self._layout.controller(watch=self.kick)
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
            log.info("broker %d is the controller (controller epoch %d)", self._broker_id, fence.epoch)
        self._act(self._fence)

    def _act(self, fence: ControllerEpoch) -> None:
        live = set(self._layout.broker_ids(watch=self.kick))
        self._layout.topics(watch=self.kick)  # a new topic: its partitions are checked at once
        for name in self._layout.isr_changes(watch=self.kick):
            self._layout.delete_isr_change(name)
        requested = self._layout.preferred_election_request(watch=self.kick)
        preferred = set(requested or ())
        rebalance = self._rebalance_due()
        seen: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
        deleting = set(self._layout.topics_marked_for_deletion(watch=self.kick))
        malformed: dict[str, str] = {}
        for topic in self._layout.topics():
            try:
                assignment = self._layout.topic_assignment(topic, watch=self.kick)  # fires on added partitions
                if assignment is None:
                    continue
                states = self._layout.partition_states_versioned((topic, p) for p in assignment.partitions)
            except MalformedNodeError as e:  # one bad node must not stop the other topics' elections
                malformed[e.path] = str(e)
                continue
            for (_, partition), versioned in states.items():
                replicas = assignment.partitions[partition]
                if versioned is None:
                    if topic not in deleting:  # its partitions are going: no new state (as Kafka's controller)
                        self._create_state(fence, topic, partition, replicas, live)
                elif len(replicas) > 1:
                    seen[(topic, partition)] = (versioned[0].leader, replicas)
                    self._decide(fence, topic, partition, replicas, live, *versioned,
                                 preferred=(topic, partition) in preferred)
        self._report_malformed(malformed)
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

    def _report_malformed(self, malformed: dict[str, str]) -> None:
        """Log each node skipped for being malformed once per change (the passes repeat every few seconds)."""
        for path in sorted(malformed.keys() - self._malformed.keys()):
            log.warning("controller: skipping a topic whose node does not decode: %s", malformed[path])
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

    def _create_state(self, fence: ControllerEpoch, topic: str, partition: int, replicas: tuple[int, ...],
                      live: set[int]) -> None:
        """A new partition (no ``state`` node yet): its first live replica leads, the live replicas are the
        ISR, leader epoch 0, as Kafka's ``PartitionStateMachine.initializeLeaderAndIsrForPartitions``. With no
        live replica it stays without state until one registers (the ``/brokers/ids`` watch runs us again)."""
        alive = tuple(b for b in replicas if b in live)
        if not alive:
            log.warning("%s-%d: new partition, but none of its replicas %s is alive: no leader yet", topic,
                        partition, list(replicas))
            return
        state = PartitionState(leader=alive[0], leader_epoch=0, isr=alive, controller_epoch=fence.epoch)
        try:
            self._layout.create_partition_state_fenced(fence, topic, partition, state)
        except StaleVersionError:
            self._wake.set()  # created meanwhile: decide again from what is there
            return
        log.info("%s-%d: new partition, leader %d, ISR %s (controller epoch %d)", topic, partition, state.leader,
                 list(state.isr), fence.epoch)

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
