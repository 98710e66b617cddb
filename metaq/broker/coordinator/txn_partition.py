"""One ``__transaction_state`` partition as its coordinator holds it: the transactional ids' states, replayed from the
partition's log when this broker becomes its leader, and every change appended to the log before it is used.

The log is kept small as ``__consumer_offsets`` is (metaq/broker/coordinator/offsets_partition.py): once enough records
were appended, the live states are rewritten at the head of a fresh segment and everything older is deleted.
"""

from __future__ import annotations

import logging
import threading
import time

from metaq.broker.coordinator.offsets_partition import replay_records
from metaq.broker.coordinator.txn_state import DEAD, TxnMetadata, decode_key, decode_value, encode_key, encode_value
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import CorruptRecordError
from metaq.protocol.builder import BatchBuilder

log = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
LOADING, LOADED, FAILED = "LOADING", "LOADED", "FAILED"
COMPACT_MIN_RECORDS = 10000


class TxnStatePartition:
    """The transactions of one ``__transaction_state`` partition: replayed from its log, appended to it."""

    def __init__(self, log_: PartitionLog, coordinator_epoch: int) -> None:
        self.log = log_
        self.partition = log_.partition
        self.coordinator_epoch = coordinator_epoch
        self.state = LOADING
        self.txns: dict[str, TxnMetadata] = {}
        self.leader_epoch: int | None = None
        self._appended_since_rewrite = 0
        self._lock = threading.Lock()  # the replay runs on a worker thread

    def _set_state(self, state: str) -> None:
        log.info("%s-%d: %s -> %s", TRANSACTION_TOPIC, self.partition, self.state, state)
        self.state = state

    def load(self) -> None:
        """Replay the log (blocking; on a worker thread); FAILED if it cannot be read."""
        state = FAILED
        try:
            txns, count = self._replay()
            with self._lock:
                self.txns, self._appended_since_rewrite = txns, count
            state = LOADED
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_TOPIC, self.partition)
        self._set_state(state)

    def _replay(self) -> tuple[dict[str, TxnMetadata], int]:
        txns: dict[str, TxnMetadata] = {}
        count = 0
        for key, value in replay_records(self.log):
            count += 1
            self._apply(txns, key, value)
        return txns, count

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
        self._appended_since_rewrite += len(records)

    def compact_if_needed(self, now_ms: int) -> bool:
        """Rewrite the live states in a fresh segment and delete everything older (as offsets_partition.py does)."""
        with self._lock:
            live = list(self.txns.values())
        if self._appended_since_rewrite < max(COMPACT_MIN_RECORDS, 2 * len(live)):
            return False
        self.log.roll("transaction state compaction")
        start = self.log.log_end_offset
        self._appended_since_rewrite = 0
        for i in range(0, len(live), 1000):
            self._append([(encode_key(t.transactional_id), encode_value(t)) for t in live[i:i + 1000]])
        self.log.delete_segments_before(start, now_ms)
        return True
