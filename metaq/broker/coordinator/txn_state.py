"""One transactional id's state, as Kafka's ``TransactionMetadata`` and ``TransactionState``, and its record
in ``__transaction_state`` (Kafka's ``TransactionLog`` key and value, version 0). docs/transactions.md has
the state machine and the Kafka sources it follows.

States (only :meth:`TxnMetadata.transition` changes them; a transition Kafka does not allow raises)::

    Empty / CompleteCommit / CompleteAbort --AddPartitionsToTxn, AddOffsetsToTxn--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, fencing--> PrepareAbort --markers written--> CompleteAbort
    Ongoing --InitProducerId of a newer instance, timeout--> PrepareEpochFence --> PrepareAbort
    Empty / CompleteCommit / CompleteAbort --InitProducerId--> Empty (epoch bumped)
    Empty / CompleteCommit / CompleteAbort --transactional.id.expiration.ms--> Dead (record tombstoned)
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field

from metaq.errors import CorruptRecordError

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
DEAD = "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"

# Kafka's TransactionState.validPreviousStates, turned around: state -> states it may move to
_ALLOWED: dict[str, frozenset[str]] = {
    EMPTY: frozenset({EMPTY, ONGOING, DEAD, PREPARE_EPOCH_FENCE}),
    ONGOING: frozenset({ONGOING, PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE}),
    PREPARE_COMMIT: frozenset({COMPLETE_COMMIT}),
    PREPARE_ABORT: frozenset({COMPLETE_ABORT}),
    COMPLETE_COMMIT: frozenset({EMPTY, ONGOING, DEAD, PREPARE_EPOCH_FENCE}),
    COMPLETE_ABORT: frozenset({EMPTY, ONGOING, DEAD, PREPARE_EPOCH_FENCE}),
    PREPARE_EPOCH_FENCE: frozenset({PREPARE_ABORT}),
    DEAD: frozenset(),
}
# Kafka's TransactionState ids, as stored in the transaction_status field
STATE_IDS = {EMPTY: 0, ONGOING: 1, PREPARE_COMMIT: 2, PREPARE_ABORT: 3, COMPLETE_COMMIT: 4, COMPLETE_ABORT: 5,
             DEAD: 6, PREPARE_EPOCH_FENCE: 7}
_STATES_BY_ID = {v: k for k, v in STATE_IDS.items()}

MAX_EPOCH = 32767  # Short.MaxValue: a producer id whose epoch would reach it is replaced (epoch exhaustion)
NO_EPOCH = -1

TopicPartition = tuple[str, int]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start


class InvalidTransition(RuntimeError):
    """A transition Kafka's TransactionMetadata does not allow: a coordinator bug."""


@dataclass(frozen=True)
class TxnMetadata:
    """A transactional id's coordinator state. Immutable: a change is a new value, stored before it is used."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH
    """The epoch before the last bump asked for with KIP-360's expected epoch (in memory only, as Kafka 3.9's
    ``lastProducerEpoch``): a retry of that InitProducerId gets the current epoch instead of a fence."""
    previous_producer_id: int = -1
    """The producer id before an epoch exhaustion replaced it on such a request (Kafka's ``lastProducerId``)."""

    def transition(self, state: str, now_ms: int, **changes: object) -> TxnMetadata:
        """This metadata moved to ``state`` (with other fields changed); InvalidTransition if not allowed."""
        if state not in _ALLOWED[self.state]:
            raise InvalidTransition(f"transactional id {self.transactional_id!r}: {self.state} -> {state}")
        return dataclasses.replace(self, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]

    @property
    def completing(self) -> bool:
        """Markers are being written (PrepareCommit/PrepareAbort): requests get CONCURRENT_TRANSACTIONS."""
        return self.state in (PREPARE_COMMIT, PREPARE_ABORT)


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    """Kafka's TransactionLogKey version 0: int16 version, string transactional id."""
    return _I16.pack(0) + _string(transactional_id)


def encode_value(txn: TxnMetadata) -> bytes:
    """Kafka's TransactionLogValue version 0 (partitions grouped by topic)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_VALUE_HEAD.pack(0, txn.producer_id, txn.producer_epoch, txn.timeout_ms, STATE_IDS[txn.state]))
    out += _I32.pack(len(by_topic))
    for topic, parts in by_topic.items():
        out += _string(topic) + _I32.pack(len(parts)) + b"".join(_I32.pack(p) for p in parts)
    out += _TIMES.pack(txn.last_update_ms, txn.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, st: struct.Struct) -> tuple[int, ...]:
        if self.pos + st.size > len(self.data):
            raise CorruptRecordError("truncated __transaction_state record")
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return tuple(values)

    def string(self) -> str:
        (length,) = self.take(_I16)
        if length < 0 or self.pos + length > len(self.data):
            raise CorruptRecordError("bad string in a __transaction_state record")
        value = self.data[self.pos:self.pos + length].decode("utf-8", "replace")
        self.pos += length
        return value


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    (version,) = reader.take(_I16)
    if version != 0:
        raise CorruptRecordError(f"__transaction_state key version {version}")
    return reader.string()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    version, pid, epoch, timeout, status = reader.take(_VALUE_HEAD)
    if version != 0 or status not in _STATES_BY_ID:
        raise CorruptRecordError(f"__transaction_state value version {version}, status {status}")
    partitions: set[TopicPartition] = set()
    (topics,) = reader.take(_I32)
    for _ in range(max(topics, 0)):
        topic = reader.string()
        (count,) = reader.take(_I32)
        for _ in range(max(count, 0)):
            partitions.add((topic, reader.take(_I32)[0]))
    last_update, start = reader.take(_TIMES)
    return TxnMetadata(transactional_id, pid, epoch, timeout, _STATES_BY_ID[status], frozenset(partitions), start,
                       last_update)
