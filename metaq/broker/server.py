"""The broker process: storage, ZooKeeper registration and metadata, the wire server, housekeeping.

    broker = Broker(BrokerConfig.from_file("server.properties"))
    asyncio.run(broker.run())          # until broker.request_stop() or SIGTERM/SIGINT

Shutdown is orderly and bounded: stop accepting, end connections, flush and checkpoint every log,
write the clean-shutdown marker, and only then leave ZooKeeper (the ephemeral registration goes last,
so clients do not see the broker gone while it still acknowledges writes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from kazoo.client import KazooClient

from metaq.broker.accept_guard import AcceptGuard
from metaq.broker.admin_watcher import AdminWatcher
from metaq.broker.auth.credentials import ScramCredentialCache
from metaq.broker.auth.listeners import advertised_endpoints
from metaq.broker.auth.serving import registration_info, served_listeners
from metaq.broker.config import BrokerConfig
from metaq.broker.connection_limits import ConnectionLimits
from metaq.broker.context import BrokerContext
from metaq.broker.coordinator.config import CoordinatorConfig
from metaq.broker.coordinator.coordinator import GroupCoordinator
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
from metaq.broker.coordinator.txn_coordinator import TransactionCoordinator, TxnCoordinatorConfig, WriteMarkers
from metaq.broker.coordinator.txn_partition import TRANSACTION_TOPIC
from metaq.broker.handlers import DISPATCH
from metaq.broker.log.cleaner.log_cleaner import LogCleaner, loop_caller
from metaq.broker.log.dir_mover import LogDirMover
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.open_files import SEGMENT_FILES, FileBudget, file_budget
from metaq.broker.log.partition_metadata import PARTITION_METADATA_FILE
from metaq.broker.metadata import ClusterSnapshot, MetadataWatcher
from metaq.broker.network import BrokerServer
from metaq.broker.producer_ids import ProducerIdManager
from metaq.broker.purgatory import AppendNotifier
from metaq.broker.quota.config_store import QuotaConfigStore, quotas_for
from metaq.broker.registration import BrokerRegistration
from metaq.broker.replication import leader_epochs
from metaq.broker.replication.controller import Controller
from metaq.broker.replication.replica_manager import ReplicaManager
from metaq.broker.security.acl_rules import Rules
from metaq.broker.security.authorizer import Authorizer, parse_super_users
from metaq.broker.topics import create_topic
from metaq.broker.txn_markers import MarkerWriter
from metaq.errors import MetaqError, StorageError, TopicError, TopicExistsError
from metaq.metrics import MetricsServer, serve_metrics
from metaq.metrics.broker import BrokerMetrics, ClusterState, LogState
from metaq.metrics.off import disabled
from metaq.signals import TerminationHandler
from metaq.zkclient import connect as zk_connect
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

AUTO_CREATE_WAIT_S = 5.0


class Broker:
    """The broker process, its composition root (module docstring): owns every part it builds (the log manager,
    the ZooKeeper session, the socket layer, the group and transaction coordinators, the replica manager, the
    controller, the log cleaner and mover, the authorizer, quotas and metrics). :meth:`run` starts them (the
    listeners first) and, on :meth:`request_stop`, SIGTERM/SIGINT or the failure of every log directory, stops them:
    controlled shutdown first, the logs flushed and closed, the ZooKeeper session last."""

    def __init__(self, config: BrokerConfig, *, on_started: Callable[[str], None] | None = None) -> None:
        """``on_started`` gets one line saying where the broker serves, once it does (the CLI prints it)."""
        self.config = config
        self._on_started = on_started
        self.logs = LogManager(config.data_dirs, config.log_config(), on_dir_failure=self._log_dir_failed)
        self._stop: asyncio.Event | None = None
        self._zk: KazooClient | None = None
        self._server: BrokerServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.port: int | None = None  # the first listener's
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self.metrics = BrokerMetrics() if config.metrics_enabled else disabled(BrokerMetrics)
        self._metrics_server: MetricsServer | None = None
        self.admin_watcher: AdminWatcher | None = None
        self.cleaner: LogCleaner | None = None
        self.authorizer: Authorizer | None = None
        self.scram = ScramCredentialCache()
        self.replication: ReplicaManager | None = None
        self.controller: Controller | None = None
        self.transactions: TransactionCoordinator | None = None
        self._accept_guard = AcceptGuard()
        self._fatal: MetaqError | None = None
        self.mover = LogDirMover(self.logs, side_files=(leader_epochs.FILE_NAME, PARTITION_METADATA_FILE))
        self.quotas = quotas_for(config)  # client quotas and replication throttles (docs/quotas.md)

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # SIGTERM/SIGINT stop cleanly (flush, clean-shutdown marker, deregister), a second one exits at once:
        # the same metaq.signals handler as every other metaq process, kept until the shutdown is done
        handler = (TerminationHandler(partial(loop.call_soon_threadsafe, self.request_stop)).install()
                   if install_signal_handlers else None)
        self._accept_guard.install(loop)
        try:
            await self._start()
            try:
                await self._stop.wait()
            finally:
                await self._shutdown()
        finally:
            self._accept_guard.uninstall(loop)
            if handler is not None:
                handler.restore()
        if self._fatal is not None:
            raise self._fatal  # the process exits 1, as Kafka's halts when every log dir has failed

    def request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _start(self) -> None:
        config = self.config
        budget = file_budget()
        SEGMENT_FILES.resize(budget.segments)
        log.info("open files: %r (RLIMIT_NOFILE)", budget)
        # the listeners first: a port in use or a host that is not ours fails before anything else starts
        self._server = BrokerServer(
            DISPATCH,
            listeners=served_listeners(config, self.scram),
            limits=_within_budget(ConnectionLimits.from_config(config), budget),
            send_buffer_bytes=config.socket_send_buffer_bytes,
            receive_buffer_bytes=config.socket_receive_buffer_bytes,
        )
        await self._server.bind()
        self.port = self._server.port
        self.ports = self._server.ports
        await asyncio.to_thread(self.logs.load)
        self._zk = await asyncio.to_thread(
            zk_connect,
            config.zookeeper_connect,
            session_timeout_ms=config.session_timeout_ms,
            connection_timeout_ms=config.connection_timeout_ms,
            security=config.zookeeper_security(),
        )
        layout = ZkLayout(self._zk)
        self._layout = layout
        self.metadata = MetadataWatcher(layout, on_change=self._on_metadata_change,
                                        before_publish=self._configure_new_topics)
        notifier = AppendNotifier()
        self.replication = ReplicaManager(config, self.logs, self.metadata, layout, notifier,  # started below
                                          follower_quota=self.quotas.follower)
        self.coordinator = GroupCoordinator(
            CoordinatorConfig.from_config(config),
            self.logs,
            lambda: self.metadata.snapshot,
            self._create_offsets_topic,
            replication=self.replication,
            notify=notifier.notify,
        )
        if config.authorizer_class_name:  # ACLs loaded before the first request is served
            self.authorizer = Authorizer(layout, Rules(parse_super_users(config.super_users),
                                                       config.allow_everyone_if_no_acl_found))
            await asyncio.to_thread(self.authorizer.start)
        producer_ids = ProducerIdManager(layout, config.broker_id)
        self.controller = Controller(  # started once this broker is registered (below)
            config.broker_id, layout, self._zk, unclean=config.unclean_leader_election_enable,
            rebalance_interval_s=(config.leader_imbalance_check_interval_seconds
                                  if config.auto_leader_rebalance_enable else None),
            imbalance_percentage=config.leader_imbalance_per_broker_percentage)
        quota_store = QuotaConfigStore(layout, self.quotas, config.broker_id)
        # the marker writer acts on partitions, never on transactions: it gets the context without the
        # transaction coordinator, which the handlers' context (the same collaborators) then holds
        partitions_context = BrokerContext(config, self.logs, self.metadata, notifier, self._auto_create, layout,
                                           self.coordinator, self.metrics, replication=self.replication,
                                           producer_ids=producer_ids, authorizer=self.authorizer,
                                           controller=self.controller, quotas=self.quotas)
        self.transactions = self._transaction_coordinator(producer_ids, notifier.notify,
                                                          MarkerWriter(partitions_context))
        context = dataclasses.replace(partitions_context, transactions=self.transactions)
        self._start_metrics()
        # listeners may say port 0: advertise the port actually bound
        advertised = advertised_endpoints(config.listener_list, config.advertised_list, self.ports)
        info = registration_info(config, advertised)
        self._registration = BrokerRegistration(self._zk, layout, info, self.metadata.request_reload,
                                                session_timeout_ms=config.session_timeout_ms)
        await asyncio.to_thread(self._registration.register)
        await asyncio.to_thread(self.metadata.start)
        await self._report_offline_at_start(layout)
        await asyncio.to_thread(self.scram.load_all, layout)  # before serving: SCRAM users can log in at once
        await self.replication.start()
        self.controller.start()
        self.admin_watcher = AdminWatcher(config.broker_id, layout, self.logs, self.metadata, config.log_config(),
                                          on_user_change=self.scram.reload, on_config_change=quota_store.on_change,
                                          on_topic_config=quota_store.on_topic_config)
        await self.admin_watcher.start()  # topic configs applied before the first request is served
        # quotas hold from the first request; read after the watcher took its place in /config/changes, so a
        # change made meanwhile is either read here or notified
        await asyncio.to_thread(quota_store.load_all)
        self.cleaner = LogCleaner(self.logs, config.cleaner_config(), loop_caller(asyncio.get_running_loop()),
                                  lambda plog: context.high_watermark(plog.topic, plog.partition, plog))
        self.cleaner.start()  # after the topic configs: it cleans the logs whose cleanup.policy is compact
        self.metrics.report_cleaner(self.cleaner.state)
        self.coordinator.start()
        if context.transactions is not None:
            context.transactions.start()
        self.mover.start()
        await self._server.start_serving(context)  # only now: a client that connects finds us registered
        self._tasks = [
            asyncio.create_task(self._every(config.log_flush_scheduler_interval_ms, self._flush_due)),
            asyncio.create_task(self._every(config.log_retention_check_interval_ms, self._retention)),
            asyncio.create_task(
                self._every(config.log_flush_offset_checkpoint_interval_ms, self._checkpoint)
            ),
            asyncio.create_task(self._every(config.producer_id_expiration_check_interval_ms, self._expire_producers)),
        ]
        line = (f"metaq broker {config.broker_id} serving {','.join(a.endpoint() for a in advertised)} "
                f"(ZooKeeper {config.zookeeper_connect}; logs in {', '.join(map(str, config.data_dirs))}"
                f"{self._metrics_note(advertised[0].host if advertised else '')}; "
                f"log level {logging.getLevelName(logging.getLogger().getEffectiveLevel())})")
        log.info("%s", line)
        if self._on_started is not None:
            self._on_started(line)

    def _metrics_note(self, advertised_host: str) -> str:
        """``; metrics http://host:port/metrics`` for the serving line when the endpoint runs: a wildcard bind
        is shown with the advertised host (the address a person would scrape from)."""
        if self._metrics_server is None:
            return ""
        host = self.config.metrics_host
        if host in ("", "0.0.0.0", "::"):
            host = advertised_host or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        return f"; metrics http://{host}:{self._metrics_server.port}/metrics"

    def _start_metrics(self) -> None:
        """Partition and cluster gauges are read at scrape time; the endpoint only if metrics.port is set."""
        self.metrics.report_logs(self._log_states)
        self.metrics.report_cluster(self._cluster_state)
        if self.config.metrics_port is not None:
            self._metrics_server = serve_metrics(self.config.metrics_port, self.config.metrics_host)

    def _log_states(self) -> list[LogState]:
        return [LogState(plog.topic, plog.partition, plog.size_bytes(), plog.segment_count(), plog.log_end_offset)
                for plog in self.logs.logs()]

    def _cluster_state(self) -> ClusterState:
        snapshot = self.metadata.snapshot
        offline = sum(1 for parts in snapshot.topics.values() for meta in parts.values()
                      if meta.leader not in snapshot.brokers)
        led = [meta for parts in snapshot.topics.values() for meta in parts.values()
               if meta.leader == self.config.broker_id]
        groups = self.coordinator.describe()
        return ClusterState(
            under_replicated=sum(1 for meta in led if len(meta.isr) < len(meta.replicas)),
            offline=offline,
            active_controller=snapshot.controller_id == self.config.broker_id,
            groups=len(groups),
            members=sum(len(g["members"]) for g in groups.values()),
        )

    def _configure_new_topics(self, snapshot: ClusterSnapshot) -> None:
        """Watcher thread, before requests see ``snapshot``: new topics' configs in place (before the topic
        admin watcher starts, it applies every config itself before the first request is served)."""
        if self.admin_watcher is not None:
            self.admin_watcher.configure_new_topics(snapshot.topics)

    def _on_metadata_change(self, snapshot: ClusterSnapshot) -> None:
        """Watcher thread: a new topic's config (written with it, without a notification) is applied at once."""
        if self.admin_watcher is not None:
            self.admin_watcher.kick()
        if self.replication is not None:
            self.replication.on_metadata(snapshot)

    async def _shutdown(self) -> None:
        log.info("broker %d shutting down", self.config.broker_id)
        await self._controlled_shutdown()
        if self._metrics_server is not None:
            self._metrics_server.close()
        self.metrics.close()
        for task in self._tasks:
            task.cancel()
        await self.mover.stop()
        if self._server is not None:
            await self._server.close()
        if self.controller is not None:
            await asyncio.to_thread(self.controller.stop)  # the others elect a new controller at once
        if self.replication is not None:
            await self.replication.stop()
        if self._zk is not None:
            if self.admin_watcher is not None:
                await self.admin_watcher.stop()
            await self.coordinator.stop()
            if self.transactions is not None:
                await self.transactions.stop()
        if self.cleaner is not None:
            await asyncio.to_thread(self.cleaner.stop)
        await asyncio.to_thread(self.logs.shutdown)
        if self.authorizer is not None:
            await asyncio.to_thread(self.authorizer.stop)
        if self._zk is not None:
            self.metadata.stop()
            self._registration.close()
            await asyncio.to_thread(self._zk.stop)
            await asyncio.to_thread(self._zk.close)
        log.info("broker %d stopped", self.config.broker_id)

    async def _controlled_shutdown(self) -> None:
        """Move the leadership of replicated partitions away before stopping (docs/architecture.md,
        "Replication"): give up the controller, leave /brokers/ids so the controller elects other ISR members
        at once, and wait (bounded by the session timeout) until no partition we lead could move. A broker
        leading none keeps its registration to the end, as before."""
        if (not self.config.controlled_shutdown_enable or self.replication is None or self.controller is None
                or not self.replication.movable_leaderships()):
            return
        started = time.monotonic()
        await asyncio.to_thread(self.controller.stop)
        self._registration.close()
        await asyncio.to_thread(self._layout.deregister_broker, self.config.broker_id)
        self.metadata.request_reload()
        deadline = started + self.config.session_timeout_ms / 1000.0
        while self.replication.movable_leaderships() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = self.replication.movable_leaderships()
        log.info("controlled shutdown: leadership moved away in %.2fs%s", time.monotonic() - started,
                 f"; still leading {left}" if left else "")

    async def _every(self, interval_ms: int, job: object) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await job()  # type: ignore[operator]
            except Exception:
                log.exception("housekeeping job %s failed", getattr(job, "__name__", job))

    async def _flush_due(self) -> None:
        for plog in self.logs.flush_due(int(time.time() * 1000)):
            try:
                await asyncio.to_thread(plog.flush)
            except (MetaqError, OSError) as e:
                if not self.logs.handle_error(plog.topic, plog.partition, e):
                    raise

    async def _report_offline_at_start(self, layout: ZkLayout) -> None:
        """What an earlier run reported offline is online again, or offline anew: a directory that failed at
        load takes the partitions assigned here that may be in it (LogManager.claim_assigned), and the
        controller is told as for a failure at run time, so their leadership moves (docs/log-dirs.md)."""
        broker_id = self.config.broker_id
        self.logs.claim_assigned((topic, p) for topic, parts in self.metadata.snapshot.topics.items()
                                 for p, meta in parts.items() if broker_id in meta.replicas)
        offline = self.logs.offline_partitions()
        if self.logs.offline_dirs():
            await asyncio.to_thread(layout.announce_log_dir_failure, broker_id, offline)
        else:
            await asyncio.to_thread(layout.set_offline_replicas, broker_id, offline)

    def _log_dir_failed(self, log_dir: Path) -> None:
        """Event loop, once per failed log directory (docs/log-dirs.md): the replicas in it leave their roles,
        ZooKeeper learns which partitions are offline here (the controller moves their leadership), and with
        no directory left the broker stops, as Kafka's does."""
        if self.replication is not None:
            self.replication.reconcile(self.metadata.snapshot)
        offline = self.logs.offline_partitions()
        task = asyncio.create_task(asyncio.to_thread(self._layout.announce_log_dir_failure, self.config.broker_id,
                                                     offline), name="metaq-broker-log-dir-event")
        self._tasks.append(task)
        if not self.logs.online_dirs():
            log.error("every log directory of broker %d has failed: shutting down", self.config.broker_id)
            self._fatal = StorageError(f"every log directory failed: {', '.join(map(str, self.logs.log_dirs))}")
            task.add_done_callback(lambda _: self.request_stop())

    async def _retention(self) -> None:
        removed = self.logs.run_retention(int(time.time() * 1000))
        if removed:
            log.info("retention removed %d segments", removed)

    async def _expire_producers(self) -> None:
        removed = self.logs.remove_expired_producers(int(time.time() * 1000))
        if removed:
            log.info("forgot %d idempotent producer(s) idle for producer.id.expiration.ms", removed)

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self.logs.checkpoint_recovery_points)
        finally:
            self.logs.apply_dir_failures()

    async def _create_offsets_topic(self, partitions: int) -> None:
        """``__consumer_offsets`` on first use, spread over the live brokers (as Kafka does), with
        ``offsets.topic.replication.factor`` replicas, or as many as there are live brokers if fewer."""
        wanted = self.config.offsets_topic_replication_factor
        live = len(self.metadata.snapshot.brokers)
        factor = max(1, min(wanted, live))
        if factor < wanted:
            log.warning("creating %s with replication factor %d: offsets.topic.replication.factor is %d but "
                        "only %d brokers are live", OFFSETS_TOPIC, factor, wanted, live)
        await self._create_and_wait(OFFSETS_TOPIC, partitions, factor, offsets_topic_config(self.config))

    def _transaction_coordinator(self, producer_ids: ProducerIdManager, notify: Callable[[tuple[str, int]], None],
                                 write_markers: WriteMarkers) -> TransactionCoordinator:
        """The transaction coordinator (docs/transactions.md), writing its markers through ``write_markers``."""
        config = self.config
        assert self.replication is not None
        return TransactionCoordinator(
            TxnCoordinatorConfig(
                broker_id=config.broker_id,
                num_partitions=config.transaction_state_log_num_partitions,
                max_timeout_ms=config.transaction_max_timeout_ms,
                cleanup_interval_ms=config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                id_expiration_ms=config.transactional_id_expiration_ms,
            ),
            self.logs, lambda: self.metadata.snapshot, self._create_transaction_topic, producer_ids.next_id,
            asyncio.to_thread, self.replication.append_epoch, replication=self.replication, notify=notify,
            write_markers=write_markers)

    async def _create_transaction_topic(self, partitions: int) -> None:
        """``__transaction_state`` on first use, as ``__consumer_offsets`` (replication capped by live brokers)."""
        factor = max(1, min(self.config.transaction_state_log_replication_factor,
                            len(self.metadata.snapshot.brokers)))
        await self._create_and_wait(TRANSACTION_TOPIC, partitions, factor, transaction_topic_config(self.config))

    async def _create_and_wait(self, topic: str, partitions: int, replication_factor: int = 1,
                               config: Mapping[str, str] | None = None) -> None:
        try:
            await asyncio.to_thread(partial(create_topic, self._layout, topic, partitions,
                                            replication_factor=replication_factor, config=config))
        except TopicExistsError:
            pass
        self.metadata.request_reload()
        await asyncio.to_thread(self.metadata.wait_for, lambda s: s.has_leaders(topic), AUTO_CREATE_WAIT_S)

    async def _auto_create(self, topic: str) -> None:
        """Create a topic on first use (auto.create.topics.enable), then wait for it to be visible. A
        ``default.replication.factor`` above the live brokers creates nothing (logged; the client retries)."""
        try:
            await self._create_and_wait(topic, self.config.num_partitions, self.config.default_replication_factor)
        except TopicError as e:
            log.warning("cannot auto-create topic %s: %s", topic, e)


def offsets_topic_config(config: BrokerConfig) -> dict[str, str]:
    """The topic configs ``__consumer_offsets`` is created with: compacted, so that the log cleaner keeps the
    latest commit of each group and partition (Kafka's GroupCoordinator.offsetsTopicConfigs; docs/compaction.md,
    "Internal topics")."""
    return {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)}


def transaction_topic_config(config: BrokerConfig) -> dict[str, str]:
    """The topic configs ``__transaction_state`` is created with (Kafka's
    TransactionStateManager.transactionTopicConfigs)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(config.transaction_state_log_segment_bytes)}


def _within_budget(limits: ConnectionLimits, budget: FileBudget) -> ConnectionLimits:
    """``max.connections`` at most what the descriptor limit leaves for connections: a connection over it is
    refused (accepted and closed, with a rate-limited log line) while the process still has descriptors,
    instead of ``accept()`` failing for every client once it has none."""
    if limits.max_connections <= budget.connections:
        return limits
    if limits.max_connections != ConnectionLimits.max_connections:  # set by the operator: say it is lowered
        log.warning("max.connections %d lowered to %d: the open-file limit (RLIMIT_NOFILE %d) leaves room for no"
                    " more", limits.max_connections, budget.connections, budget.limit)
    return dataclasses.replace(limits, max_connections=budget.connections)
