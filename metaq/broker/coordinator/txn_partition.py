"""One ``__transaction_state`` partition as its coordinator holds it: the transactional ids' states, replayed from the
partition's log when this broker becomes its leader, and every change appended to the log before it is used
(metaq/broker/coordinator/txn_coordinator.py, which answers the transaction APIs from these states).

The partition is compacted (``cleanup.policy=compact``) as ``__consumer_offsets`` is
(metaq/broker/coordinator/offsets_partition.py), so a replay reads each id's latest state.
"""

from __future__ import annotations

import logging
import threading
import time

from metaq.broker.coordinator.offsets_partition import replay_records, warn_if_not_compacted
from metaq.broker.coordinator.txn_state import (
    DEAD,
    TxnMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import CorruptRecordError
from metaq.protocol.builder import BatchBuilder

log = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
LOADING, LOADED, FAILED = "LOADING", "LOADED", "FAILED"


class TxnStatePartition:
    """The transactions of one ``__transaction_state`` partition: replayed from its log, appended to it."""

    def __init__(self, log_: PartitionLog, coordinator_epoch: int) -> None:
        self.log = log_
        self.partition = log_.partition
        self.coordinator_epoch = coordinator_epoch
        self.state = LOADING
        self.txns: dict[str, TxnMetadata] = {}
        self.leader_epoch: int | None = None
        self._lock = threading.Lock()  # the replay runs on a worker thread

    def _set_state(self, state: str) -> None:
        log.info("%s-%d: %s -> %s", TRANSACTION_TOPIC, self.partition, self.state, state)
        self.state = state

    def load(self) -> None:
        """Replay the log (blocking; on a worker thread); FAILED if it cannot be read."""
        state = FAILED
        warn_if_not_compacted(self.log)
        try:
            txns = self._replay()
            with self._lock:
                self.txns = txns
            state = LOADED
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_TOPIC, self.partition)
        self._set_state(state)

    def _replay(self) -> dict[str, TxnMetadata]:
        """The latest state of each transactional id: the partition is compacted (``cleanup.policy=compact``),
        so a cleaned log, holding only each id's last record, replays to the same (docs/compaction.md)."""
        txns: dict[str, TxnMetadata] = {}
        for key, value in replay_records(self.log):
            self._apply(txns, key, value)
        return txns

    @staticmethod
    def _apply(txns: dict[str, TxnMetadata], key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            txn_id = decode_key(key)
            if value is None:
                txns.pop(txn_id, None)
            else:
                txns[txn_id] = decode_value(txn_id, value)
        except CorruptRecordError as e:
            log.warning("skipping an unreadable %s record: %s", TRANSACTION_TOPIC, e)

    def store(self, txn: TxnMetadata) -> None:
        """Append the state (a tombstone for Dead), then use it. Raises, changing nothing, if the append fails."""
        self._append([(encode_key(txn.transactional_id), None if txn.state == DEAD else encode_value(txn))])
        with self._lock:
            if txn.state == DEAD:
                self.txns.pop(txn.transactional_id, None)
            else:
                self.txns[txn.transactional_id] = txn

    def restore(self, transactional_id: str, txn: TxnMetadata | None) -> None:
        """Use ``txn`` again (None: forget the id) after a stored change the ISR did not take."""
        with self._lock:
            if txn is None:
                self.txns.pop(transactional_id, None)
            else:
                self.txns[transactional_id] = txn

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        builder = BatchBuilder(1 << 30)
        now = int(time.time() * 1000)
        for key, value in records:
            builder.append(now, key, value)
        self.log.append(builder.build(), leader_epoch=self.leader_epoch)
