"""What the cleaner knows of transactions while it walks a log, as Kafka's ``CleanedTransactionMetadata``
(docs/compaction.md, "Transactions").

The log's aborted-transaction index says which transactions were aborted and where they start. Walking the
batches in offset order, a transactional batch of a producer whose aborted transaction has started (and whose
abort marker has not been passed yet) belongs to that transaction: its records are removed and it maps no key.
Every other transactional batch belongs to a committed transaction and is cleaned by key as usual.

A marker may go once no batch of its transaction was seen in the same pass (an abort marker's data all removed
by an earlier pass, a commit marker's data all superseded); it is then given a delete horizon and dropped by a
pass after it, so that a read_committed consumer that fetched the transaction's data still sees its end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from metaq.broker.log.txn_index import AbortedTxn
from metaq.protocol.batches import BatchHeader

__all__ = ["TxnTracker"]


@dataclass
class _OpenAbort:
    txn: AbortedTxn
    seen_batch: bool = False


class TxnTracker:
    """One walk over a log's batches in offset order (one per offset map pass, one per cleaning)."""

    def __init__(self, aborted: Iterable[AbortedTxn], start: int = 0) -> None:
        """``aborted``: the log's aborted transactions; the walk starts at offset ``start`` (a transaction whose
        marker lies below it is over before the walk)."""
        self._pending = deque(sorted(txn for txn in aborted if txn.last_offset >= start))  # by first offset
        self._aborting: dict[int, _OpenAbort] = {}  # producer id -> its aborted transaction under way
        self._committing: set[int] = set()  # producers with a batch seen of a transaction not aborted

    def _start_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._aborting.setdefault(txn.producer_id, _OpenAbort(txn))

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (its records go)."""
        self._start_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        open_abort = self._aborting.get(header.producer_id)
        if open_abort is not None:
            open_abort.seen_batch = True
            return True
        self._committing.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, abort: bool | None) -> bool:
        """A control batch (``abort``: the marker's kind, None if not a readable marker): True if no batch of
        its transaction was seen in this walk, so that the marker may go once its delete horizon passed."""
        self._start_up_to(header.last_offset)
        if abort is None:
            return False  # not an end-transaction marker: kept
        if abort:
            open_abort = self._aborting.pop(header.producer_id, None)
            return open_abort is None or not open_abort.seen_batch
        if header.producer_id in self._committing:
            self._committing.discard(header.producer_id)
            return False
        return True
