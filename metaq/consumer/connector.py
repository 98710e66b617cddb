"""Consumer (Kafka 0.8's ZookeeperConsumerConnector): one group member with one ZooKeeper session and N streams.

    with Consumer({"group.id": "etl", "zookeeper.connect": "127.0.0.1:2181"}) as consumer:
        [stream] = consumer.create_message_streams({"clicks": 1})["clicks"]
        for message in stream:
            print(message.offset, message.value)

    consumer.create_message_streams_by_filter(Whitelist("logs\\..*"), 2)   # wildcard subscription

Session handling: on SUSPENDED nothing is delivered and nothing is committed; on LOST every partition is
given up at once (the owner nodes died with the session), the member re-registers and rebalances. Besides,
records are delivered only while the session is proven alive (``metaq.session.lease.fraction``, see
metaq.zklease): a process paused past its session timeout delivers nothing when it resumes, before kazoo
even notices that the session expired.

With ``group.coordination=kafka`` the broker's group coordinator decides ownership instead
(metaq.consumer.coordination.GroupMember: JoinGroup/SyncGroup/Heartbeat, offsets committed with the member's
generation); ZooKeeper then only names partition leaders, and delivery is leased on the heartbeats. Without
``zookeeper.connect`` it needs no ZooKeeper at all: ``bootstrap.servers``' Metadata answers name the leaders
and partition counts (metaq.client.metadata).

With ZooKeeper, the group's live migration marker (metaq.consumer.migration) overrides ``group.coordination``:
the member switches between ZooKeeper and broker coordination while running.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Self, cast

from kazoo.client import KazooState
from prometheus_client import REGISTRY, CollectorRegistry

from metaq.consumer.committer import AutoCommitter
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.coordination import GroupMember
from metaq.consumer.fetcher_manager import FetcherManager
from metaq.consumer.group_commits import CommitListener
from metaq.consumer.ids import make_consumer_id, make_thread_ids
from metaq.consumer.kafka_offsets import KafkaOffsetStore
from metaq.consumer.membership import ConsumerState, RebalanceListener
from metaq.consumer.migration import MigratingMember, MigrationDriver
from metaq.consumer.offset_store import OffsetStore, ZooKeeperOffsetStore
from metaq.consumer.partition_info import ChunkQueue
from metaq.consumer.rebalance import ZKRebalancerListener
from metaq.consumer.serde import get_deserializer
from metaq.consumer.streams import DeliveryGate, FailureSignal, KafkaStream
from metaq.consumer.topic_filter import TopicFilter
from metaq.errors import ConsumerRebalanceFailedError, MetaqError
from metaq.metrics import serve_metrics
from metaq.metrics.consumer import ConsumerMetrics, PartitionPosition
from metaq.metrics.off import disabled
from metaq.signals import TerminationHandler
from metaq.zkclient import connect
from metaq.zklease import SessionLease
from zk_layout import TopicCount, ZkLayout
from zk_layout.migration import BRIDGE_MODE, KAFKA_MODE, ZOOKEEPER_MODE, MigrationMarker

log = logging.getLogger(__name__)

BRIDGE_ASSIGNORS = ("range", "roundrobin")  # eager, and Kafka 0.8's: what a bridge can run (_check_bridge_assignor)
SWITCH_WAIT_S = 60.0  # a migration step in place (bridge <-> kafka) waits this long for the member's rebalance


class _Subscription:
    """Queues and streams for what this member subscribed to; see rebalance.Subscription."""

    def __init__(self, topic_count: TopicCount, queues: dict[Any, ChunkQueue], wildcard: bool) -> None:
        self._topic_count = topic_count
        self._queues = queues
        self.is_wildcard = wildcard
        self.streams: list[KafkaStream] = []

    def topic_count(self) -> TopicCount:
        return self._topic_count

    def queue_for(self, topic: str, thread_id: str) -> ChunkQueue:
        return self._queues[thread_id] if self.is_wildcard else self._queues[(topic, thread_id)]

    def clear_queues(self) -> None:
        for stream in self.streams:
            stream.clear()


def default_offset_store(layout: ZkLayout, config: ConsumerConfig) -> OffsetStore:
    """The store ``offsets.storage`` names (kafka: ZooKeeper-fenced, see metaq.consumer.kafka_offsets)."""
    if config.offsets_storage == "kafka":
        return KafkaOffsetStore(layout, config)
    return ZooKeeperOffsetStore(layout, config.group_id, auto_offset_reset=config.auto_offset_reset)


def _metadata_layout(config: ConsumerConfig) -> ZkLayout:
    """``bootstrap.servers`` instead of ZooKeeper (group.coordination=kafka): leaders and partition counts from
    Metadata answers, asked again at most every ``refresh.leader.backoff.ms`` (metaq.client.metadata)."""
    from metaq.client.metadata import MetadataLayout
    from metaq.consumer.fetcher import connection_settings

    layout = MetadataLayout.connect(config.bootstrap_servers, connection_settings(config),
                                    option="config 'bootstrap.servers':",
                                    min_refresh_s=config.refresh_leader_backoff_ms / 1000.0)
    return cast(ZkLayout, layout)  # the consumer reads only what MetadataLayout answers (its module docstring)


class Consumer:
    """One group member (module docstring): owns its ZooKeeper session (and the session lease and delivery
    gate that depend on it), its consumer id, the streams and chunk queues it hands out, the fetcher manager,
    the offset store, the auto-committer, the rebalancer once streams are created, and its metrics (and their
    HTTP server, if ``metrics.port`` is set). Closing it (:meth:`shutdown`, or leaving ``with``) releases all
    of them."""

    def __init__(
        self,
        config: ConsumerConfig | Mapping[str, Any],
        *,
        rebalance_listener: RebalanceListener | None = None,
        key_deserializer: Any = "bytes",
        value_deserializer: Any = "bytes",
        offset_store_factory: Callable[[ZkLayout, ConsumerConfig], OffsetStore] | None = None,
        metrics_registry: CollectorRegistry | None = None,
        commit_listener: CommitListener | None = None,
    ) -> None:
        self.config = config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_properties(config)
        self._listener = rebalance_listener
        self._commit_listener = commit_listener  # group.coordination=kafka: see group_commits.CommitListener
        self._key = get_deserializer(key_deserializer)
        self._value = get_deserializer(value_deserializer)
        self.consumer_id = make_consumer_id(self.config.group_id, self.config.consumer_id)
        registry = metrics_registry if metrics_registry is not None else REGISTRY
        self.metrics = (ConsumerMetrics(self.config.group_id, self.consumer_id, registry)
                        if self.config.metrics_enabled else disabled(ConsumerMetrics))
        """This member's Prometheus metrics (metaq.metrics.consumer), in ``metrics_registry`` or the default;
        a do-nothing stand-in with ``metrics.enabled=false``."""
        self.metrics.report_positions(self._positions)
        self._rebalancer: ZKRebalancerListener | GroupMember | None = None
        self._broker_coordinated = self.config.group_coordination == "kafka"
        self._mode = self.config.group_coordination  # zookeeper, bridge or kafka: see metaq.consumer.migration
        self._migration: MigrationDriver | None = None
        self._switch_lock = threading.Lock()
        self._mode_changed = threading.Condition()
        port = self.config.metrics_port
        self._metrics_server = serve_metrics(port, self.config.metrics_host, registry) if port is not None else None
        self._zk = None if not self.config.zookeeper_connect else connect(
            self.config.zookeeper_connect,
            session_timeout_ms=self.config.zookeeper_session_timeout_ms,
            connection_timeout_ms=self.config.connection_timeout_ms,
            security=self.config.zookeeper_security(),
        )
        self._layout = ZkLayout(self._zk) if self._zk is not None else _metadata_layout(self.config)
        fraction = self.config.session_lease_fraction
        self._gate = DeliveryGate(leased=fraction > 0)
        self._lease: SessionLease | None = None
        # broker-coordinated: leased on heartbeats instead
        if fraction > 0 and not self._broker_coordinated and self._zk is not None:
            self._lease = SessionLease(
                self._zk, requested_timeout_ms=self.config.zookeeper_session_timeout_ms, fraction=fraction,
                on_renewed=self._gate.extend, on_void=self._gate.lapse, name=f"{self.consumer_id}-session-lease")
        self._session_listeners: list[Callable[[str], None]] = []
        self._failures = FailureSignal()
        self._fetcher = FetcherManager(self.config, self._layout, consumer_id=self.consumer_id, metrics=self.metrics)
        factory = offset_store_factory or default_offset_store
        # broker-coordinated: the member commits to its coordinator with its generation; with ZooKeeper it keeps
        # a ZooKeeper store for a live migration (a bridge member fences and commits there too)
        self._store: OffsetStore | None = (
            None if self._zk is None else
            ZooKeeperOffsetStore(self._layout, self.config.group_id, auto_offset_reset=self.config.auto_offset_reset)
            if self._broker_coordinated else factory(self._layout, self.config))
        self._subscription: _Subscription | None = None
        self._committer: AutoCommitter | None = None
        self._shutdown_lock = threading.Lock()
        self._closed = False
        if self._zk is not None:
            self._zk.add_listener(self._on_session_state)
        if self._lease is not None:
            self._lease.start()

    # -- subscribing -------------------------------------------------------------------------------

    def create_message_streams(self, topic_count: Mapping[str, int]) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` → ``{topic: [n streams]}``; the first rebalance runs now, on this thread."""
        counts = {topic: int(n) for topic, n in topic_count.items()}
        if not counts or any(n <= 0 for n in counts.values()):
            raise MetaqError(f"create_message_streams needs {{topic: streams >= 1}}, got {dict(topic_count)}")
        queues: dict[Any, ChunkQueue] = {}
        result: dict[str, list[KafkaStream]] = {}
        sub = _Subscription(TopicCount(subscription=counts), queues, wildcard=False)
        for topic, n in counts.items():
            for tid in make_thread_ids(self.consumer_id, n):
                queues[(topic, tid)] = ChunkQueue(self.config.queued_max_message_chunks)
                stream = self._stream(queues[(topic, tid)])
                sub.streams.append(stream)
                result.setdefault(topic, []).append(stream)
        self._start(sub)
        return result

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list[KafkaStream]:
        """A whitelist or blacklist; the streams are shared by every matching topic, now and later."""
        if num_streams <= 0:
            raise MetaqError(f"num_streams must be >= 1, got {num_streams}")
        queues: dict[Any, ChunkQueue] = {}
        count = TopicCount(subscription={topic_filter.regex: num_streams}, pattern=topic_filter.pattern)
        sub = _Subscription(count, queues, wildcard=True)
        for tid in make_thread_ids(self.consumer_id, num_streams):
            queues[tid] = ChunkQueue(self.config.queued_max_message_chunks)
            sub.streams.append(self._stream(queues[tid]))
        self._start(sub)
        return list(sub.streams)

    def _stream(self, chunks: ChunkQueue) -> KafkaStream:
        return KafkaStream(chunks, consumer_timeout_ms=self.config.consumer_timeout_ms, gate=self._gate,
                           failures=self._failures, key_deserializer=self._key, value_deserializer=self._value)

    def _start(self, sub: _Subscription) -> None:
        if self._rebalancer is not None:
            raise MetaqError("streams were already created for this consumer (one subscription per connector)")
        if self._closed:
            raise MetaqError("consumer is shut down")
        marker: MigrationMarker | None = None
        if self._zk is not None:
            self._migration = MigrationDriver(self._layout, self.config.group_id, self.consumer_id,
                                              self.config.group_coordination, lambda: self._mode, self._switch_mode,
                                              ready=self._stable)
            mode, marker = self._migration.initial_mode()
            self._check_bridge_assignor(mode)
            self._mode_applied(mode)
        if self._mode == BRIDGE_MODE and sub.is_wildcard:
            raise MetaqError("create_message_streams_by_filter cannot take part in a live migration (a bridge member "
                             "claims named topics' owner nodes): subscribe to named topics")
        self._subscription = sub
        if self._mode != KAFKA_MODE:
            self._layout.register_consumer(self.config.group_id, self.consumer_id, sub.topic_count())
        self._rebalancer = self._new_rebalancer(sub, self._mode, 0 if marker is None else marker.epoch)
        try:
            self._rebalancer.wait_for_quiet_group()  # members starting together: one assignment, not N
            self._rebalancer.synced_rebalance()  # the first one on the caller's thread: failures raise here
        except MetaqError:
            # Leave no half-started member behind: release, leave the group, and let the caller try again.
            self._rebalancer.shutdown(commit=False)
            self._rebalancer = None
            self._subscription = None
            self._migration = None
            if self._store is not None:
                self._layout.unregister_consumer(self.config.group_id, self.consumer_id)
            raise
        self._rebalancer.start()
        if self._migration is not None:
            self._migration.publish(self._mode, marker)
            self._migration.start()
        if self.config.auto_commit_enable and self._committer is None:
            self._committer = AutoCommitter(self.commit_offsets, self.config.auto_commit_interval_ms,
                                            name=f"{self.consumer_id}-autocommit")
            self._committer.start()

    # -- live migration (metaq.consumer.migration) ------------------------------------------------------

    def _new_rebalancer(self, sub: _Subscription, mode: str, epoch: int) -> ZKRebalancerListener | GroupMember:
        common: dict[str, Any] = {"listener": self._listener, "on_failure": self._failures.fail,
                                  "metrics": self.metrics}
        if mode == ZOOKEEPER_MODE:
            assert self._store is not None
            return ZKRebalancerListener(self.config, self._layout, self.consumer_id, sub, self._fetcher, self._store,
                                        **common)
        if self._store is None:  # no ZooKeeper: no migration either
            return GroupMember(self.config, self._layout, self.consumer_id, sub, self._fetcher, self._gate,
                               polls=self, commit_listener=self._commit_listener, **common)
        return MigratingMember(self.config, self._layout, self.consumer_id, sub, self._fetcher, self._gate,
                               polls=self, commit_listener=self._commit_listener, store=self._store, mode=mode,
                               epoch=epoch, on_mode=self._mode_applied, **common)

    def _stable(self) -> bool:
        """The member owns what its current mode gives it (what the migration driver reports)."""
        rebalancer = self._rebalancer
        return rebalancer is not None and rebalancer.state == "STABLE"

    def _check_bridge_assignor(self, mode: str) -> None:
        """A bridge takes and gives up partitions only around a full revoke (it releases its owner nodes
        there) and its leader runs Kafka 0.8's assignor: the eager assignors only. Checked before anything
        changes, so a member that cannot be a bridge stays what it is (the migrate command then waits for it
        and names it)."""
        strategy = self.config.partition_assignment_strategy
        if mode == BRIDGE_MODE and strategy not in BRIDGE_ASSIGNORS:
            raise MetaqError(f"consumer {self.consumer_id} cannot take part in a live migration of group "
                             f"{self.config.group_id} with partition.assignment.strategy={strategy} (it needs one "
                             f"of {', '.join(BRIDGE_ASSIGNORS)})")

    def _mode_applied(self, mode: str) -> None:
        """The member is now in ``mode`` (a MigratingMember changes between bridge and kafka at a rebalance)."""
        with self._mode_changed:
            self._mode = mode
            self._mode_changed.notify_all()
        self._lease_for(mode)

    def _lease_for(self, mode: str) -> None:
        """ZooKeeper's session lease gates delivery in zookeeper and bridge modes (owner nodes are held);
        in kafka mode only the heartbeats do."""
        fraction = self.config.session_lease_fraction
        if mode == KAFKA_MODE and self._lease is not None:
            self._lease.stop()
            self._lease = None
        elif mode != KAFKA_MODE and self._lease is None and fraction > 0 and self._zk is not None:
            self._lease = SessionLease(
                self._zk, requested_timeout_ms=self.config.zookeeper_session_timeout_ms, fraction=fraction,
                on_renewed=self._gate.extend, on_void=self._gate.lapse, name=f"{self.consumer_id}-session-lease")
            self._lease.start()

    def _switch_mode(self, step: str, marker: MigrationMarker | None) -> None:
        """One step of the migration driver (on its thread): zookeeper <-> bridge replaces the rebalancer (the
        old one commits, releases its owner nodes and stops first); bridge <-> kafka happens in place, at the
        member's next rebalance, which this waits for."""
        epoch = 0 if marker is None else marker.epoch
        self._check_bridge_assignor(step)
        with self._switch_lock:
            old, sub = self._rebalancer, self._subscription
            if self._closed or old is None or sub is None:
                return
            if ZOOKEEPER_MODE in (self._mode, step):
                old.shutdown(commit=self.config.auto_commit_enable and self._gate.connected)
                self._layout.register_consumer(self.config.group_id, self.consumer_id, sub.topic_count())
                new = self._new_rebalancer(sub, step, epoch)
                self._rebalancer = new
                self._mode_applied(step)
                if self.closed:  # shut down meanwhile: the new rebalancer was never started
                    return
                try:
                    new.wait_for_quiet_group()
                    new.synced_rebalance()
                except MetaqError as e:  # the new rebalancer's executor retries (its failure timer)
                    log.warning("consumer %s: first rebalance as a %s member failed: %s", self.consumer_id, step, e)
                new.start()
                return
            if not isinstance(old, MigratingMember):
                raise MetaqError(f"consumer {self.consumer_id} cannot become a {step} member without ZooKeeper")
            old.set_mode(step, epoch)
        with self._mode_changed:
            self._mode_changed.wait_for(lambda: self._mode == step or self._closed, SWITCH_WAIT_S)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def coordination_mode(self) -> str:
        """zookeeper, bridge (during a live migration) or kafka."""
        return self._mode

    # -- offsets and state -------------------------------------------------------------------------

    def commit_offsets(self) -> None:
        """Commit the consumed offsets of owned partitions (skipped while ZooKeeper is suspended)."""
        if self._rebalancer is None:
            return
        if not self._gate.connected:
            log.info("consumer %s: ZooKeeper suspended; commit skipped", self.consumer_id)
            return
        self._rebalancer.commit()

    def stalled_since(self) -> float | None:
        """Since when the earliest of the streams with chunks waiting has not taken one (max.poll.interval.ms
        with group.coordination=kafka); None if every stream is waiting for chunks."""
        sub = self._subscription
        if sub is None:
            return None
        times = [t for t in (stream.stalled_since() for stream in sub.streams) if t is not None]
        return min(times) if times else None

    @property
    def member_id(self) -> str | None:
        """The member id the group coordinator gave this member (group.coordination=kafka), else None."""
        return self._rebalancer.member_id if isinstance(self._rebalancer, GroupMember) else None

    @property
    def state(self) -> ConsumerState:
        if self._rebalancer is None:
            return ConsumerState("CLOSED" if self._closed else "STARTING", 0)
        return self._rebalancer.snapshot()

    @property
    def zookeeper_session(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current ZooKeeper session, for fault-injection tools."""
        if self._zk is None:
            return None
        session: tuple[int, bytes] | None = self._zk.client_id  # kazoo is untyped
        return session

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener("SUSPENDED" | "LOST" | "CONNECTED")`` after the consumer handled that change of its
        ZooKeeper session (on kazoo's thread: it must not block). For monitoring and fault-injection tests."""
        self._session_listeners.append(listener)

    def _on_session_state(self, state: str) -> None:
        """kazoo's listener: must not block."""
        rebalancer = self._rebalancer
        if self._mode == KAFKA_MODE:
            pass  # ZooKeeper only names partition leaders: its session says nothing on ownership or delivery
        elif state == KazooState.SUSPENDED:
            self._gate.close()
            if rebalancer:
                rebalancer.session_suspended()
        elif state == KazooState.LOST:
            self._gate.close()
            if rebalancer:
                rebalancer.session_lost()
        elif state == KazooState.CONNECTED:
            if rebalancer:
                rebalancer.session_resumed()
            self._gate.open()
        if self._migration is not None and state == KazooState.LOST:
            self._migration.session_lost()
        elif self._migration is not None and state == KazooState.CONNECTED:
            self._migration.wake()
        for listener in list(self._session_listeners):
            try:
                listener(str(state))
            except Exception:
                log.exception("consumer %s: session listener failed", self.consumer_id)

    # -- shutdown ----------------------------------------------------------------------------------

    def stop_streams(self) -> None:
        """End every stream: a loop over one finishes the chunk in hand and stops. Nothing is committed
        or released here; :meth:`shutdown` (or leaving the ``with`` block) does that next."""
        if self._subscription is not None:
            for stream in self._subscription.streams:
                stream.end()

    def stop_on_signals(self) -> TerminationHandler:
        """SIGTERM or SIGINT ends the streams (:meth:`stop_streams`), so the application's loop ends and
        its ``with`` block commits what was handed out, releases the partitions and leaves the group; a
        second signal exits at once. Call from the main thread; ``.restore()`` on the result undoes it."""
        return TerminationHandler(self.stop_streams).install()

    def shutdown(self) -> None:
        """Orderly and bounded: stop committing and fetching, final commit (if auto-commit), release
        ownership, end the streams, leave the group, close ZooKeeper."""
        with self._shutdown_lock:
            if self._closed:
                return
            self._closed = True
        with self._mode_changed:  # a migration step waiting for a rebalance gives up
            self._mode_changed.notify_all()
        if self._migration is not None:
            self._migration.stop()
        if self._committer is not None:
            self._committer.stop()
        if self._rebalancer is not None:
            self._rebalancer.shutdown(commit=self.config.auto_commit_enable and self._gate.connected)
        self._fetcher.close()
        if self._subscription is not None:
            for stream in self._subscription.streams:
                stream.end()
        if self._store is not None:
            try:
                self._layout.unregister_consumer(self.config.group_id, self.consumer_id)
            except MetaqError as e:
                log.info("consumer %s: unregister failed (the session close removes it): %s", self.consumer_id, e)
            self._store.close()
        if self._zk is not None:
            self._zk.remove_listener(self._on_session_state)
            self._zk.stop()  # first: a renewal in flight then fails at once instead of holding up the lease's stop
        if self._lease is not None:
            self._lease.stop()
        if self._zk is not None:
            self._zk.close()
        self.metrics.close()
        if self._metrics_server is not None:
            self._metrics_server.close()

    def _positions(self) -> list[PartitionPosition]:
        """What lag and owned partitions are computed from when Prometheus scrapes (metaq.metrics.consumer)."""
        rebalancer = self._rebalancer
        if rebalancer is None:
            return []
        return [PartitionPosition(info.topic, info.partition, info.get_consumed_offset(), info.log_end_offset)
                for info in list(rebalancer.registry.values()) if not info.is_revoked]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


ZookeeperConsumerConnector = Consumer
"""Kafka 0.8's name for :class:`Consumer`, kept so that code written against 0.8 naming reads the same."""
__all__ = ["Consumer", "ConsumerRebalanceFailedError", "ZookeeperConsumerConnector"]
