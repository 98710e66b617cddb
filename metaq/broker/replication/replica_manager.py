"""The broker's side of replication: partition state nodes in ZooKeeper become roles.

Brokers learn their roles by watching the partition state nodes (the metadata watcher already does, see
:mod:`metaq.broker.metadata`), not through LeaderAndIsr requests from the controller: after every reload
:meth:`ReplicaManager.reconcile` runs on the event loop and, for each replicated partition hosting a replica
here, becomes

* **leader** (:data:`~.roles.LEADER`) when the state names this broker: tracks the followers' fetch
  offsets, keeps the high watermark (:mod:`.partition_state`), answers acks=all produces once the ISR has
  the batch, and shrinks or expands the ISR with writes conditional on the state node's zkVersion,
  announced through ``/isr_change_notification``;
* **follower** of the named leader, first :data:`~.roles.TRUNCATING` then :data:`~.roles.FETCHING`: a
  :class:`~.replica_fetcher.ReplicaFetcher` thread per leader broker copies the leader's batches with their
  offsets and leader epochs, and the HW the leader sends is kept in ``replication-offset-checkpoint``;
* :data:`~.roles.OFFLINE` (leader -1, or not registered).

The states and their transitions are :mod:`.roles`; only :meth:`.roles.Role.transition` changes them.

Single-replica partitions are not tracked at all: their HW is their log end offset, as before.
Everything here runs on the event loop except the fetchers' network I/O and ZooKeeper writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from metaq.broker.auth.listeners import Listener
from metaq.broker.config import BrokerConfig
from metaq.broker.log.checkpoint import read_checkpoint, write_checkpoint
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.metadata import ClusterSnapshot, MetadataWatcher, PartitionMeta
from metaq.broker.purgatory import AppendNotifier
from metaq.broker.quota.replication import ReplicationQuota
from metaq.broker.replication.acks_all import AcksAll
from metaq.broker.replication.follower import FollowerSide, wall_clock_ms
from metaq.broker.replication.leader_epochs import EpochEnd, LeaderEpochCache
from metaq.broker.replication.partition_state import LeaderState
from metaq.broker.replication.replica_fetcher import ReplicaFetcher
from metaq.broker.replication.roles import LEADER, OFFLINE, TRUNCATING, Following, Role
from metaq.errors import ErrorCode, MetaqError, StaleVersionError
from metaq.retry import replica_role_retry
from zk_layout import PartitionState, ZkLayout

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
HW_CHECKPOINT = "replication-offset-checkpoint"


class ReplicaManager(AcksAll, FollowerSide):
    """Owns the :class:`~.roles.Role` of every replicated partition hosted here, the replica fetcher threads (one per
    leader broker), the leader epoch caches, the high watermark checkpoints and the ISR writes of the partitions
    this broker leads. Runs on the event loop; the fetchers call back into it there (module docstring)."""

    def __init__(self, config: BrokerConfig, logs: LogManager, metadata: MetadataWatcher, layout: ZkLayout,
                 notifier: AppendNotifier, *, follower_quota: ReplicationQuota | None = None) -> None:
        self._config = config
        self.follower_quota = follower_quota
        self._id = config.broker_id
        self._logs = logs
        self._metadata = metadata
        self._layout = layout
        self._notifier = notifier
        self._replicas: dict[TopicPartition, Role] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._checkpointed: dict[TopicPartition, int] = {}
        self._min_isr: dict[str, tuple[int, float]] = {}
        self._isr_writes: set[TopicPartition] = set()
        self._isr_tasks: set[asyncio.Task[None]] = set()  # ISR expansions started by a fetch (kept referenced)
        self._epochs: dict[TopicPartition, LeaderEpochCache] = {}
        self._hosted: set[TopicPartition] = set()  # assigned here in some snapshot (a later removal deletes the log)
        self._single: set[TopicPartition] = set()  # assigned here alone in the last snapshot
        self._retry_scheduled = False
        self._role_retry = replica_role_retry()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for log_dir in self._logs.log_dirs:
            path = Path(log_dir) / HW_CHECKPOINT
            if path.exists():
                try:
                    self._checkpointed.update(read_checkpoint(path))
                except MetaqError as e:
                    log.warning("ignoring %s: %s", path, e)
        self.reconcile(self._metadata.snapshot)
        interval = max(self._config.replica_lag_time_max_ms / 2, 50) / 1000.0
        self._tasks = [
            asyncio.create_task(self._every(interval, self._update_isrs), name="metaq-broker-isr"),
            asyncio.create_task(self._every(self._config.replica_high_watermark_checkpoint_interval_ms / 1000.0,
                                            self._checkpoint_async), name="metaq-broker-hw-checkpoint"),
        ]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._isr_tasks]:
            task.cancel()
        for fetcher in self._fetchers.values():
            fetcher.shutdown()
        for fetcher in self._fetchers.values():
            await asyncio.to_thread(fetcher.join, 5)
        self._fetchers.clear()
        for role in self._replicas.values():
            self._fail_waiters(role, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.checkpoint_high_watermarks()

    def on_metadata(self, _snapshot: ClusterSnapshot) -> None:
        """Metadata watcher thread: reconcile on the event loop (never blocks)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: self.reconcile(self._metadata.snapshot))

    async def _every(self, interval_s: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("replication job %s failed", getattr(job, "__name__", job))

    # ------------------------------------------------------------------------------------------ roles

    def reconcile(self, snapshot: ClusterSnapshot) -> None:
        """Take the roles the state nodes give this broker (idempotent; runs after every metadata reload)."""
        wanted: dict[TopicPartition, PartitionMeta] = {
            (topic, p): meta for topic, parts in snapshot.topics.items() for p, meta in parts.items()
            if len(meta.replicas) > 1 and self._id in meta.replicas
            and not self._logs.is_offline(topic, p)}  # a replica in a failed log dir has no role (docs/log-dirs.md)
        for key in list(self._replicas):
            if key not in wanted:
                self._drop(key)
        self._delete_removed_replicas(snapshot)
        for key, meta in wanted.items():
            if key not in self._replicas and key in self._single:
                self._start_replicating(key)
            role = self._replicas.setdefault(key, Role(key))
            try:
                if meta.leader == self._id:
                    self._become_leader(role, meta)
                else:
                    self._become_follower(role, meta, snapshot)
            except (MetaqError, OSError) as e:  # one partition's log must not stop the others' roles
                delay = self._role_retry.delay(1)
                log.error("%s-%d: cannot take the role the state node gives (retrying in %.0fs): %s", *key, delay, e)
                if self._loop is not None and not self._retry_scheduled:
                    self._retry_scheduled = True
                    self._loop.call_later(delay, self._retry_reconcile)
        for leader_id in [b for b, f in self._fetchers.items() if f.idle()]:
            self._fetchers.pop(leader_id).shutdown()

    def _delete_removed_replicas(self, snapshot: ClusterSnapshot) -> None:
        """Delete the log of each partition this broker hosted and no longer does (a reassignment moved it
        away: Kafka's StopReplica with delete), and note which hosted ones have a single replica. Only
        partitions seen assigned here while this process ran: a log the assignment never named here is not
        ours to delete (docs/reassignment.md)."""
        hosted: set[TopicPartition] = set()
        single: set[TopicPartition] = set()
        for topic, parts in snapshot.topics.items():
            for partition, meta in parts.items():
                key = (topic, partition)
                if self._id in meta.replicas:
                    hosted.add(key)
                    if len(meta.replicas) == 1:
                        single.add(key)
                elif key in self._hosted and meta.replicas and self._logs.get(*key) is not None:
                    log.info("%s-%d: no longer a replica here (replicas %s): deleting its log", *key,
                             list(meta.replicas))
                    self._checkpointed.pop(key, None)
                    self._epochs.pop(key, None)
                    self._logs.delete_log(*key)
        # forgotten once the snapshot shows it elsewhere (deleted above); kept while its topic is out of view
        self._hosted = hosted | {key for key in self._hosted if snapshot.partition(*key) is None}
        self._single = single

    def _start_replicating(self, key: TopicPartition) -> None:
        """A single-replica partition gains replicas (its replication factor raised): its high watermark was
        its log end, and stays there rather than falling back to a checkpoint it never had."""
        plog = self._logs.get(*key)
        if plog is not None:
            self._checkpointed[key] = plog.log_end_offset

    def epoch_cache(self, key: TopicPartition, plog: PartitionLog) -> LeaderEpochCache:
        cache = self._epochs.get(key)
        if cache is None or cache.path.parent != plog.directory:  # a re-created topic has a new directory
            cache = self._epochs[key] = LeaderEpochCache.load(plog.directory)
        return cache

    def append_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch a produce to this partition is stamped with (None: not replicated, unchanged)."""
        role = self._replicas.get((topic, partition))
        return role.leading.leader_epoch if role is not None and role.leading is not None else None

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int) -> EpochEnd:
        """OffsetForLeaderEpoch on the leader: (epoch, end offset) from the log's epoch cache; a
        single-replica log, which keeps none, answers its log end at the asked epoch (nothing diverges)."""
        plog = self._logs.get_or_create(topic, partition)
        if (topic, partition) not in self._replicas:
            return EpochEnd(epoch, plog.log_end_offset)
        return self.epoch_cache((topic, partition), plog).end_offset_for(epoch, plog.log_end_offset)

    def _retry_reconcile(self) -> None:
        self._retry_scheduled = False
        self.reconcile(self._metadata.snapshot)

    def _drop(self, key: TopicPartition) -> None:
        """The replica left this broker (reassigned, topic deleted): OFFLINE, then forgotten."""
        role = self._replicas.pop(key)
        self._epochs.pop(key, None)
        self._fail_waiters(role, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._stop_fetching(key)
        if not role.is_(OFFLINE):
            role.transition(OFFLINE, why="no longer a replica here")

    def _stop_fetching(self, key: TopicPartition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(key)

    def _become_leader(self, role: Role, meta: PartitionMeta) -> None:
        key = role.key
        if role.leading is not None and role.leading.leader_epoch == meta.leader_epoch:
            self._update_hw(role, meta)
            return
        self._stop_fetching(key)
        plog = self._logs.get_or_create(*key)
        hw = self._initial_hw(role, plog)
        self.epoch_cache(key, plog).assign(meta.leader_epoch, plog.log_end_offset)
        role.transition(LEADER, leading=LeaderState(self._id, meta.leader_epoch, hw, wall_clock_ms(),
                                                    epoch_start_offset=plog.log_end_offset),
                        why=f"epoch {meta.leader_epoch}, log end {plog.log_end_offset}, high watermark {hw}, "
                            f"ISR {list(meta.isr)}")
        self._update_hw(role, meta)

    def _become_follower(self, role: Role, meta: PartitionMeta, snapshot: ClusterSnapshot) -> None:
        key = role.key
        if role.is_(LEADER):
            self._fail_waiters(role, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        current = role.following
        if current is not None and current.is_(meta.leader, meta.leader_epoch):
            return
        self._stop_fetching(key)
        plog = self._logs.get_or_create(*key)
        self.epoch_cache(key, plog)  # loaded before a fetcher asks for our latest epoch
        hw = current.hw if current is not None else min(self._checkpointed.get(key, 0), plog.log_end_offset)
        if meta.leader < 0 or meta.leader not in snapshot.brokers:
            if not role.is_(OFFLINE):  # wait for the next state
                role.transition(OFFLINE, why=f"leader {meta.leader} offline or not registered")
            return
        role.transition(TRUNCATING, following=Following(meta.leader, meta.leader_epoch, hw),
                        why=f"follower of broker {meta.leader} at leader epoch {meta.leader_epoch}, "
                            f"log end {plog.log_end_offset}")
        source = self._fetchers.get(meta.leader)
        if source is None:
            source = ReplicaFetcher(self, self._config, meta.leader)
            self._fetchers[meta.leader] = source
            source.start()
        source.add(key, meta.leader_epoch)

    def _initial_hw(self, role: Role, plog: PartitionLog) -> int:
        if role.following is not None:
            return min(role.following.hw, plog.log_end_offset)
        return min(self._checkpointed.get(role.key, 0), plog.log_end_offset)

    def movable_leaderships(self) -> list[TopicPartition]:
        """Replicated partitions this broker leads that another live ISR member could take over (what a
        controlled shutdown waits to see moved)."""
        snapshot = self._metadata.snapshot
        return [key for key in self._replicas
                if (meta := snapshot.partition(*key)) is not None and meta.leader == self._id
                and any(b != self._id and b in snapshot.brokers for b in meta.isr)]

    # ------------------------------------------------------------------------------------------ reads

    def high_watermark(self, topic: str, partition: int, plog: PartitionLog) -> int:
        """What consumers may read up to: the HW of a replicated partition, else the log end offset."""
        role = self._replicas.get((topic, partition))
        if role is None:
            return plog.log_end_offset
        if role.leading is not None:
            return min(role.leading.hw, plog.log_end_offset)
        if role.following is not None:
            return min(role.following.hw, plog.log_end_offset)
        return min(self._checkpointed.get((topic, partition), 0), plog.log_end_offset)

    def epoch_start_unconfirmed(self, topic: str, partition: int) -> bool:
        """True while this broker leads the partition with a HW below its epoch's start offset."""
        role = self._replicas.get((topic, partition))
        return role is not None and role.leading is not None and role.leading.epoch_start_unconfirmed

    def epoch_error(self, topic: str, partition: int, current_leader_epoch: int) -> int:
        """FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a request's ``current_leader_epoch`` (-1: none)."""
        if current_leader_epoch < 0:
            return ErrorCode.NONE
        meta = self._metadata.snapshot.partition(topic, partition)
        if meta is None or len(meta.replicas) <= 1:
            return ErrorCode.NONE
        if current_leader_epoch < meta.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > meta.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int,
                         plog: PartitionLog) -> None:
        """A follower's Fetch at ``fetch_offset``: its LEO; may move the HW."""
        key = (topic, partition)
        role = self._replicas.get(key)
        if role is None or role.leading is None:
            return
        role.leading.record_fetch(replica_id, fetch_offset, plog.log_end_offset, wall_clock_ms())
        meta = self._metadata.snapshot.partition(topic, partition)
        if meta is not None:
            self._update_hw(role, meta)
            if replica_id not in meta.isr:
                self._expand_isr(key, role.leading, meta)

    def _expand_isr(self, key: TopicPartition, state: LeaderState, meta: PartitionMeta) -> None:
        """Event loop, on a fetch of a follower outside the ISR: add it back as soon as it caught up (Kafka's
        maybeExpandIsr on the fetch path), not at the next periodic check, which comes only every
        replica.lag.time.max.ms / 2 (15 s by default) and would leave acks=all writes that long with a
        smaller ISR after a broker restart."""
        joining = state.caught_up(meta.replicas, meta.isr)
        if not joining or key in self._isr_writes or self._loop is None:
            return
        self._isr_writes.add(key)
        task = self._loop.create_task(self._write_isr_async(key, state.leader_epoch, meta.isr + tuple(joining)),
                                      name="metaq-broker-isr-expand")
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _write_isr_async(self, key: TopicPartition, leader_epoch: int, isr: tuple[int, ...]) -> None:
        try:
            await asyncio.to_thread(self._write_isr, key, leader_epoch, isr)
        except Exception:
            log.exception("%s-%d: adding caught-up followers to the ISR failed (the periodic check retries)", *key)
        finally:
            self._isr_writes.discard(key)

    def leader_appended(self, topic: str, partition: int) -> None:
        """After a produce append: with the leader alone in the ISR the HW moves at once."""
        key = (topic, partition)
        role = self._replicas.get(key)
        meta = self._metadata.snapshot.partition(topic, partition)
        if role is not None and role.leading is not None and meta is not None:
            self._update_hw(role, meta)

    def _update_hw(self, role: Role, meta: PartitionMeta) -> None:
        state = role.leading
        key = role.key
        plog = self._logs.get(*key)
        if state is None or plog is None:
            return
        if state.update_hw(plog.log_end_offset, meta.isr):
            self._notifier.notify(key)  # consumers waiting in a long poll may now read more
        self._check_waiters(role, meta)

    # ------------------------------------------------------------------------------------------ ISR

    async def _update_isrs(self) -> None:
        """Leader: shrink the ISR by followers that lag more than replica.lag.time.max.ms, expand it by
        followers that caught up; each change a conditional write of the state node."""
        now = wall_clock_ms()
        snapshot = self._metadata.snapshot
        for key, role in list(self._replicas.items()):
            state = role.leading
            meta = snapshot.partition(*key)
            if state is None or meta is None or meta.leader != self._id or key in self._isr_writes:
                continue
            lagging = state.lagging(meta.isr, now, self._config.replica_lag_time_max_ms)
            joining = state.caught_up(meta.replicas, meta.isr)
            if not lagging and not joining:
                continue
            isr = tuple(b for b in meta.isr if b not in lagging) + tuple(joining)
            self._isr_writes.add(key)
            try:
                await asyncio.to_thread(self._write_isr, key, state.leader_epoch, isr)
            finally:
                self._isr_writes.discard(key)

    def _write_isr(self, key: TopicPartition, leader_epoch: int, isr: tuple[int, ...]) -> None:
        """Worker thread: the ISR change, only if the node still names us leader at our epoch."""
        current = self._layout.partition_state_versioned(*key)
        if current is None:
            return
        state, version = current
        if state.leader != self._id or state.leader_epoch != leader_epoch or state.isr == isr:
            return
        new = PartitionState(leader=self._id, leader_epoch=leader_epoch, isr=isr,
                             controller_epoch=state.controller_epoch)
        try:
            self._layout.set_partition_state(*key, new, version)
        except StaleVersionError:
            log.info("%s-%d: ISR change lost a race (the state node changed): re-reading", *key)
            self._metadata.request_reload()
            return
        log.info("%s-%d: ISR %s -> %s", *key, list(state.isr), list(isr))
        self._layout.announce_isr_change([key])
        self._metadata.request_reload()

    # ------------------------------------------------------------------------------------------ checkpoint

    async def _checkpoint_async(self) -> None:
        await asyncio.to_thread(self._write_high_watermarks, self._high_watermarks())

    def checkpoint_high_watermarks(self) -> None:
        """``replication-offset-checkpoint`` in each log dir: the HW of every replicated partition."""
        self._write_high_watermarks(self._high_watermarks())

    def _high_watermarks(self) -> dict[Path, dict[TopicPartition, int]]:
        """Event loop: each log dir's HWs (collected here, where the replicas change, written elsewhere)."""
        by_dir: dict[Path, dict[TopicPartition, int]] = {}
        for key in self._replicas:
            plog = self._logs.get(*key)
            if plog is None:
                continue
            hw = self.high_watermark(key[0], key[1], plog)
            by_dir.setdefault(plog.directory.parent, {})[key] = hw
            self._checkpointed[key] = hw
        return by_dir

    def _write_high_watermarks(self, by_dir: dict[Path, dict[TopicPartition, int]]) -> None:
        for directory, entries in by_dir.items():
            try:
                write_checkpoint(directory / HW_CHECKPOINT, entries)
            except (MetaqError, OSError) as e:
                log.warning("cannot write %s: %s", directory / HW_CHECKPOINT, e)

    # ------------------------------------------------------------------------------------------ helpers

    @property
    def broker_id(self) -> int:
        return self._id

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def leader_address(self, broker_id: int) -> tuple[str, int] | None:
        """Where the replica fetchers reach ``broker_id``: its endpoint on the inter-broker listener
        (``inter.broker.listener.name``; the first listener by default), as Kafka's followers do."""
        return self._metadata.snapshot.address(broker_id, self.inter_broker_listener().name)

    def inter_broker_listener(self) -> Listener:
        return self._config.inter_broker_listener_of()
