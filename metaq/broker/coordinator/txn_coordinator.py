"""The transaction coordinator: Kafka's ``TransactionCoordinator`` and ``TransactionStateManager`` for the
transactional ids that map to the ``__transaction_state`` partitions this broker leads (docs/transactions.md).

Every state change is appended to the transactional id's ``__transaction_state`` partition before it is used
(Kafka's prepareTransitionTo / appendTransactionToLog / completeTransitionTo), so a restarted or new
coordinator replays the log and finds each transaction where it was: one left in PrepareCommit or
PrepareAbort gets its markers written again (markers are idempotent for the partitions: a second marker
for a transaction already ended there ends nothing). The log is kept small as ``__consumer_offsets`` is
(metaq/broker/coordinator/offsets_partition.py): once enough records were appended, the live states are rewritten at
the head of a fresh segment and everything older is deleted.

Markers go to every partition of the transaction through ``write_markers`` (metaq/broker/txn_markers.py):
appended locally when this broker leads the partition, else sent to its leader with WriteTxnMarkers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from metaq.broker.coordinator.locate import CoordinatorAddress, locate_coordinator
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, partition_for
from metaq.broker.coordinator.replicated_append import COMMIT_TIMEOUT_S, Replication, replicate_append
from metaq.broker.coordinator.txn_partition import LOADED, LOADING, TRANSACTION_TOPIC, TxnStatePartition
from metaq.broker.coordinator.txn_state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    MAX_EPOCH,
    NO_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    STATE_IDS,
    TopicPartition,
    TxnMetadata,
)
from metaq.broker.log.log_manager import LogManager
from metaq.broker.metadata import ClusterSnapshot
from metaq.errors import ErrorCode

log = logging.getLogger(__name__)

MARKER_RETRY_S = 0.2

WriteMarkers = Callable[[int, int, bool, int, Collection[TopicPartition]], Awaitable[dict[TopicPartition, int]]]
"""(producer id, epoch, commit, coordinator epoch, partitions) -> error code per partition (0: written)."""


@dataclass(frozen=True)
class TxnCoordinatorConfig:
    broker_id: int
    num_partitions: int  # transaction.state.log.num.partitions
    max_timeout_ms: int  # transaction.max.timeout.ms
    cleanup_interval_ms: int  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    id_expiration_ms: int  # transactional.id.expiration.ms


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    """The transaction coordinator of one broker (module docstring): owns the :class:`TxnStatePartition` of every
    ``__transaction_state`` partition this broker leads (with the leader epoch it was loaded in), the replay tasks
    of partitions still loading, one lock per transactional id (a transaction's steps never interleave) and the task
    that aborts timed-out transactions. Everything it owns is touched on the event loop only; markers are written
    through ``write_markers``, producer ids come from ``next_producer_id``."""

    def __init__(
        self,
        config: TxnCoordinatorConfig,
        logs: LogManager,
        snapshot: Callable[[], ClusterSnapshot],
        create_topic: Callable[[int], Awaitable[None]],
        next_producer_id: Callable[[], Awaitable[int]],
        in_thread: Callable[..., Awaitable[object]],
        append_epoch: Callable[[str, int], int | None],
        *,
        replication: Replication | None = None,
        notify: Callable[[tuple[str, int]], None] = lambda _key: None,
        write_markers: WriteMarkers | None = None,
    ) -> None:
        """``append_epoch``: the leader epoch to stamp on ``__transaction_state`` appends (the replica
        manager's); ``replication`` and ``notify``: an append is answered once the ISR has it;
        ``write_markers``: where commit/abort markers go (metaq/broker/txn_markers.py; without it a prepared
        transaction stays prepared)."""
        self._config = config
        self._logs = logs
        self._snapshot = snapshot
        self._create_topic = create_topic
        self._next_producer_id = next_producer_id
        self._in_thread = in_thread
        self._partitions: dict[int, TxnStatePartition] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.write_markers = write_markers
        self.append_epoch = append_epoch
        self._replication = replication
        self._notify = notify

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._cleanup_loop(), name="txn-coordinator-timeouts")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    # -- where a transactional id lives ------------------------------------------------------------

    def _num_partitions(self, snapshot: ClusterSnapshot) -> int:
        parts = snapshot.topics.get(TRANSACTION_TOPIC)
        return len(parts) if parts else self._config.num_partitions

    async def find_coordinator(self, transactional_id: str, listener: str) -> CoordinatorAddress:
        """The broker coordinating ``transactional_id``, on ``listener``."""
        return await locate_coordinator(self._snapshot, TRANSACTION_TOPIC, transactional_id, self._create_topic,
                                        self._config.num_partitions, listener)

    def _check(self, transactional_id: str) -> tuple[int, TxnStatePartition | None]:
        """(0, its partition) if this broker coordinates ``transactional_id`` and its partition is loaded."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        snapshot = self._snapshot()
        if TRANSACTION_TOPIC not in snapshot.topics:
            return ErrorCode.NOT_COORDINATOR, None
        self._resign(snapshot)
        index = partition_for(transactional_id, self._num_partitions(snapshot))
        meta = snapshot.partition(TRANSACTION_TOPIC, index)
        if meta is None or meta.leader != self._config.broker_id:
            return ErrorCode.NOT_COORDINATOR, None
        part = self._partition(index, meta.leader_epoch)
        if part.state == LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        if part.state != LOADED:
            del self._partitions[index]
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        return ErrorCode.NONE, part

    def _resign(self, snapshot: ClusterSnapshot) -> None:
        """Forget the partitions this broker no longer leads (or leads in a newer epoch: replayed again)."""
        parts = snapshot.topics.get(TRANSACTION_TOPIC) or {}
        for index in list(self._partitions):
            meta = parts.get(index)
            if meta is None or meta.leader != self._config.broker_id \
                    or max(meta.leader_epoch, 0) != self._partitions[index].coordinator_epoch:
                del self._partitions[index]
                log.info("no longer coordinating the transactions of %s-%d", TRANSACTION_TOPIC, index)

    def _partition(self, index: int, leader_epoch: int) -> TxnStatePartition:
        part = self._partitions.get(index)
        if part is None:
            part = self._partitions[index] = TxnStatePartition(
                self._logs.get_or_create(TRANSACTION_TOPIC, index), max(leader_epoch, 0))
            part.leader_epoch = self.append_epoch(TRANSACTION_TOPIC, index)
            self._loads[index] = asyncio.get_running_loop().create_task(self._load(index, part))
        return part

    async def _load(self, index: int, part: TxnStatePartition) -> None:
        try:
            await self._in_thread(part.load)
        finally:
            self._loads.pop(index, None)
        if part.state == LOADED:  # transactions a former coordinator left completing: finish them
            for txn in list(part.txns.values()):
                if txn.completing:
                    asyncio.get_running_loop().create_task(self._resume(part, txn.transactional_id))

    async def _ready(self, transactional_id: str) -> tuple[int, TxnStatePartition | None]:
        """As :meth:`_check`, waiting for a partition being loaded."""
        error, part = self._check(transactional_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            index = partition_for(transactional_id, self._num_partitions(self._snapshot()))
            task = self._loads.get(index)
            if task is not None:
                await asyncio.wait([asyncio.shield(task)])
            error, part = self._check(transactional_id)
        return error, part

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    # -- InitProducerId ----------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> ProducerIdAndEpoch:
        """Kafka's handleInitProducerId: a new transactional id gets a producer id, a known one the next epoch,
        which fences the older instance; a transaction that instance left open is aborted first (the client
        retries CONCURRENT_TRANSACTIONS). ``expected``: the (producer id, epoch) the client has (KIP-360,
        InitProducerId v3+), checked by :func:`_bump`."""
        if timeout_ms <= 0 or timeout_ms > self._config.max_timeout_ms:
            return ProducerIdAndEpoch(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error, part = await self._ready(transactional_id)
        if error or part is None:
            return ProducerIdAndEpoch(error)
        async with self._lock(transactional_id):
            now = _now_ms()
            txn = part.txns.get(transactional_id)
            if txn is None or txn.state == DEAD:
                new = TxnMetadata(transactional_id, await self._next_producer_id(), 0, timeout_ms, EMPTY,
                                  frozenset(), -1, now)
            elif txn.completing:
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            elif expected is not None and not _expected_id(txn, expected):
                return ProducerIdAndEpoch(ErrorCode.PRODUCER_FENCED)
            elif txn.state in (ONGOING, PREPARE_EPOCH_FENCE):
                await self._fence_and_abort(part, txn, "a new producer instance started")
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            else:
                bumped = await self._bump(txn, timeout_ms, expected, now)
                if isinstance(bumped, int):
                    return ProducerIdAndEpoch(bumped)
                if bumped is txn:  # a retry of a bump that was done: its answer again
                    return ProducerIdAndEpoch(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)
                new = bumped
            error = await self._store(part, new)
            if error:
                return ProducerIdAndEpoch(error)
            log.info("transactional id %r: producer id %d, epoch %d", transactional_id, new.producer_id,
                     new.producer_epoch)
            return ProducerIdAndEpoch(ErrorCode.NONE, new.producer_id, new.producer_epoch)

    async def _bump(self, txn: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None, now: int
                    ) -> TxnMetadata | int:
        """The next epoch of a transactional id with no open transaction, or a new producer id when the epoch
        is exhausted (Kafka's prepareIncrementProducerEpoch / prepareProducerIdRotation). With KIP-360's
        ``expected`` epoch: the current one is bumped, the one before the last bump is a retry (``txn``
        itself returned), any other is PRODUCER_FENCED (the error code returned)."""
        reset: dict[str, object] = {"timeout_ms": timeout_ms, "partitions": frozenset(), "start_ms": -1}
        if txn.producer_epoch >= MAX_EPOCH - 1 and (expected is None or expected[1] == txn.producer_epoch):
            return txn.transition(EMPTY, now, producer_id=await self._next_producer_id(), producer_epoch=0,
                                  previous_producer_id=txn.producer_id if expected else -1,
                                  last_producer_epoch=txn.producer_epoch if expected else NO_EPOCH, **reset)
        if expected is None or txn.producer_epoch == NO_EPOCH or expected[1] == txn.producer_epoch:
            return txn.transition(EMPTY, now, producer_epoch=txn.producer_epoch + 1,
                                  last_producer_epoch=txn.producer_epoch if expected else NO_EPOCH, **reset)
        if expected[1] == txn.last_producer_epoch:
            return txn
        return ErrorCode.PRODUCER_FENCED

    # -- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------

    def _producer_error(self, txn: TxnMetadata | None, producer_id: int, producer_epoch: int) -> int:
        """Kafka's checks of a client's producer id and epoch against the coordinator's."""
        if txn is None or txn.state == DEAD or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Collection[TopicPartition]) -> int:
        """Kafka's handleAddPartitionsToTransaction: the transaction is Ongoing and holds ``partitions``."""
        async def add(part: TxnStatePartition, txn: TxnMetadata) -> int:
            if txn.completing or txn.state == PREPARE_EPOCH_FENCE:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if txn.state == ONGOING and set(partitions) <= txn.partitions:
                return ErrorCode.NONE
            now = _now_ms()
            new = txn.transition(ONGOING, now, partitions=txn.partitions | frozenset(partitions),
                                 start_ms=txn.start_ms if txn.state == ONGOING else now)
            return await self._store(part, new)

        return await self._client_request(transactional_id, producer_id, producer_epoch, add)

    async def _client_request(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              handle: Callable[[TxnStatePartition, TxnMetadata], Awaitable[int]]) -> int:
        """``handle`` the client's transaction under its id's lock once this broker is its loaded coordinator
        and the producer id and epoch are its current ones; else the error to answer."""
        error, part = await self._ready(transactional_id)
        if error or part is None:
            return error
        async with self._lock(transactional_id):
            txn = part.txns.get(transactional_id)
            error = self._producer_error(txn, producer_id, producer_epoch)
            if error or txn is None:
                return error
            return await handle(part, txn)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          offsets_partition: int) -> int:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         [(OFFSETS_TOPIC, offsets_partition)])

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int) -> int:
        """TxnOffsetCommit's check that the producer is the transaction's current one (0 if it is, or if this
        broker does not coordinate the id: the group coordinator cannot tell then, as in Kafka)."""
        error, part = self._check(transactional_id)
        if error or part is None:
            return ErrorCode.NONE
        return self._producer_error(part.txns.get(transactional_id), producer_id, producer_epoch)

    # -- EndTxn ------------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """Kafka's handleEndTransaction: PrepareCommit/PrepareAbort stored, markers written to every
        partition, then CompleteCommit/CompleteAbort stored. A retry of a completed EndTxn answers NONE."""
        async def end(part: TxnStatePartition, txn: TxnMetadata) -> int:
            if txn.state == ONGOING:
                prepared = txn.transition(PREPARE_COMMIT if commit else PREPARE_ABORT, _now_ms())
                error = await self._store(part, prepared)
                return error or await self._complete(part, prepared)
            if txn.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                return ErrorCode.NONE
            if txn.state in (PREPARE_COMMIT if commit else PREPARE_ABORT, PREPARE_EPOCH_FENCE):
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if txn.state == EMPTY and not commit:
                return ErrorCode.NONE  # nothing was added: nothing to abort (as Kafka, for a bumped epoch)
            return ErrorCode.INVALID_TXN_STATE

        return await self._client_request(transactional_id, producer_id, producer_epoch, end)

    async def _fence_and_abort(self, part: TxnStatePartition, txn: TxnMetadata, why: str) -> int:
        """Abort an open transaction with the next epoch, so its producer is fenced everywhere (Kafka's
        prepareFenceProducerEpoch, then endTransaction(ABORT) not from the client)."""
        now = _now_ms()
        epoch = txn.producer_epoch if txn.producer_epoch >= MAX_EPOCH - 1 else txn.producer_epoch + 1
        fencing = txn.transition(PREPARE_EPOCH_FENCE, now, producer_epoch=epoch) \
            if txn.state != PREPARE_EPOCH_FENCE else txn
        prepared = fencing.transition(PREPARE_ABORT, now)
        log.info("transactional id %r: aborting the open transaction of producer %d epoch %d (%s)",
                 txn.transactional_id, txn.producer_id, txn.producer_epoch, why)
        error = await self._store(part, prepared)
        if error:
            return error
        return await self._complete(part, prepared)

    async def _complete(self, part: TxnStatePartition, txn: TxnMetadata) -> int:
        """Write the markers of a PrepareCommit/PrepareAbort transaction until every partition has its own
        (or is gone), then store CompleteCommit/CompleteAbort. Gives up (leaving the prepared state for the
        next coordinator) only if this broker stops coordinating the transactional id."""
        commit = txn.state == PREPARE_COMMIT
        remaining = set(txn.partitions)
        writer = self.write_markers
        while remaining and writer is not None:
            errors = await writer(txn.producer_id, txn.producer_epoch, commit, part.coordinator_epoch, remaining)
            for tp, code in errors.items():
                if code in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    remaining.discard(tp)  # written, or the partition was deleted
                elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                    log.warning("transactional id %r: the marker for %s-%d was refused (error %d)",
                                txn.transactional_id, tp[0], tp[1], code)
                    remaining.discard(tp)
            if not remaining:
                break
            if self._partitions.get(part.partition) is not part:
                log.info("transactional id %r: stopped writing markers, no longer its coordinator",
                         txn.transactional_id)
                return ErrorCode.NOT_COORDINATOR
            await asyncio.sleep(MARKER_RETRY_S)
        done = txn.transition(COMPLETE_COMMIT if commit else COMPLETE_ABORT, _now_ms(), partitions=frozenset(),
                              start_ms=-1)
        while True:  # as Kafka's marker channel retries the completion's append until it is replicated
            error = await self._store(part, done)
            if error != ErrorCode.COORDINATOR_NOT_AVAILABLE or self._partitions.get(part.partition) is not part:
                return error
            await asyncio.sleep(MARKER_RETRY_S)

    async def _resume(self, part: TxnStatePartition, transactional_id: str) -> None:
        async with self._lock(transactional_id):
            txn = part.txns.get(transactional_id)
            if txn is not None and txn.completing:
                log.info("transactional id %r: completing its %s after a coordinator change", transactional_id,
                         txn.state)
                await self._complete(part, txn)

    async def _store(self, part: TxnStatePartition, txn: TxnMetadata) -> int:
        """Append ``txn`` and use it once the ISR has it; an append the ISR does not take within the timeout
        leaves the previous state in use (as Kafka drops a pending transition whose append failed)."""
        previous = part.txns.get(txn.transactional_id)
        try:
            part.leader_epoch = self.append_epoch(TRANSACTION_TOPIC, part.partition)
            part.store(txn)
        except Exception as e:
            log.error("transactional id %r: appending to %s-%d failed: %s", txn.transactional_id,
                      TRANSACTION_TOPIC, part.partition, e)
            return ErrorCode.NOT_COORDINATOR  # as Kafka maps a failed append: the client finds the coordinator
        code = await replicate_append(self._replication, self._notify, TRANSACTION_TOPIC, part.partition,
                                      part.log.log_end_offset, COMMIT_TIMEOUT_S)
        if code:
            # as Kafka's TransactionStateManager maps them: the client retries (and finds the coordinator)
            log.warning("transactional id %r: %s-%d append not replicated (error %d)", txn.transactional_id,
                        TRANSACTION_TOPIC, part.partition, code)
            part.restore(txn.transactional_id, previous)
            return ErrorCode.NOT_COORDINATOR if code == ErrorCode.NOT_LEADER_OR_FOLLOWER \
                else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    # -- DescribeTransactions, ListTransactions ----------------------------------------------------

    async def describe(self, transactional_id: str) -> tuple[int, TxnMetadata | None]:
        """Kafka's handleDescribeTransactions: (0, the id's state), or the error (TRANSACTIONAL_ID_NOT_FOUND
        for an id this coordinator does not know)."""
        error, part = await self._ready(transactional_id)
        if error or part is None:
            return error, None
        txn = part.txns.get(transactional_id)
        if txn is None or txn.state == DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, txn

    async def list_transactions(self, states: Collection[str], producer_ids: Collection[int],
                                min_duration_ms: int) -> tuple[list[str], list[TxnMetadata]]:
        """Kafka's listTransactionStates over the ``__transaction_state`` partitions this broker leads (their
        loads waited for): (the unknown state names of ``states``, the transactions that match every filter
        given: one of ``states``, one of ``producer_ids``, open longer than ``min_duration_ms`` if >= 0)."""
        snapshot = self._snapshot()
        self._resign(snapshot)
        led = {i: meta.leader_epoch for i, meta in (snapshot.topics.get(TRANSACTION_TOPIC) or {}).items()
               if meta.leader == self._config.broker_id}
        parts = [self._partition(i, epoch) for i, epoch in led.items()]
        loading = [self._loads[i] for i in led if i in self._loads]
        if loading:
            await asyncio.wait([asyncio.shield(t) for t in loading])
        unknown = [s for s in states if s not in STATE_IDS]
        now = _now_ms()

        def wanted(txn: TxnMetadata) -> bool:
            return txn.state != DEAD and (not producer_ids or txn.producer_id in producer_ids) \
                and (not states or txn.state in states) \
                and (min_duration_ms < 0 or now - txn.start_ms > min_duration_ms)

        found = [txn for part in parts if part.state == LOADED for txn in part.txns.values() if wanted(txn)]
        return unknown, sorted(found, key=lambda t: t.transactional_id)

    # -- timeouts and expiry -----------------------------------------------------------------------

    async def _cleanup_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.cleanup_interval_ms / 1000.0)
            try:
                await self.abort_timed_out(_now_ms())
            except Exception:
                log.exception("aborting timed out transactions failed")

    async def abort_timed_out(self, now_ms: int) -> int:
        """Abort (fencing their producer) the Ongoing transactions older than their transaction.timeout.ms
        (Kafka's abortTimedOutTransactions); forget ids idle for transactional.id.expiration.ms."""
        aborted = 0
        for part in list(self._partitions.values()):
            if part.state != LOADED:
                continue
            for txn in list(part.txns.values()):
                if txn.state == ONGOING and txn.start_ms >= 0 and now_ms > txn.start_ms + txn.timeout_ms:
                    aborted += await self._unless_changed(part, txn, lambda p, t: self._fence_and_abort(
                        p, t, "transaction.timeout.ms passed"))
                elif txn.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) \
                        and now_ms - txn.last_update_ms > self._config.id_expiration_ms:
                    await self._unless_changed(part, txn, lambda p, t: self._store(p, t.transition(DEAD, now_ms)))
        return aborted

    async def _unless_changed(self, part: TxnStatePartition, txn: TxnMetadata,
                              action: Callable[[TxnStatePartition, TxnMetadata], Awaitable[int]]) -> int:
        """Run ``action`` under the id's lock if its state is still ``txn`` (a client may have moved it
        meanwhile); 1 if it ran."""
        async with self._lock(txn.transactional_id):
            if part.txns.get(txn.transactional_id) is not txn:
                return 0
            await action(part, txn)
            return 1


def _expected_id(txn: TxnMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: the client's producer id may bump ``txn``'s epoch: it is the current one, or the previous one
    with an exhausted epoch (a retry after the rotation), or the id has no epoch yet (Kafka's
    isValidProducerId)."""
    producer_id, epoch = expected
    return txn.producer_epoch == NO_EPOCH or producer_id == txn.producer_id \
        or (producer_id == txn.previous_producer_id and epoch >= MAX_EPOCH - 1)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["NO_EPOCH", "ProducerIdAndEpoch", "TransactionCoordinator", "TxnCoordinatorConfig"]
