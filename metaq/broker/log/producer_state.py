"""Idempotent producers' state of one partition: per producer id, its epoch and its last five batches.

This is Kafka's ``ProducerStateManager``/``ProducerAppendInfo``/``ProducerStateEntry`` (KIP-98; see
docs/delivery-guarantees.md, "Idempotent producers", for the rules and the Kafka sources they follow).

Usage, as :class:`metaq.broker.log.partition_log.PartitionLog` does it::

    duplicate, updates = state.check_client_append(headers, first_offset)   # raises on a bad sequence/epoch
    if duplicate is None:
        ... write the batches ...
        state.apply(updates)
    state.replicated(headers)          # a follower: the leader's batches, not checked, only recorded

The state is rebuilt from the log: a ``<offset>.snapshot`` file (Kafka's format, version 1) holds the state as of
``offset`` (taken when a segment rolls and at a clean shutdown); the batches after it are replayed. Only the last
batch of each producer is in a snapshot (as in Kafka), so after a crash the load starts from the second newest
snapshot and replays from there (see :meth:`ProducerStateManager.load_snapshot`).
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from metaq.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    StorageError,
    TransactionCoordinatorFencedError,
)
from metaq.fileio import atomic_write
from metaq.protocol.batches import INT32_MAX, BatchHeader, increment_sequence

__all__ = [
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerEntry",
    "ProducerStateManager",
    "ProducerUpdate",
]

logger = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (a producer has at most 5 in flight)
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hI")  # version, crc32c of everything after it
_COUNT = struct.Struct(">i")
# producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, txn first offset
_ENTRY = struct.Struct(">qhiqiqiq")


def _decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    """One appended batch of a producer: its sequence range, where it landed and its max timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    """What a partition remembers of one producer id."""

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    """The first offset of the producer's ongoing transaction in this partition, -1 if none (Kafka's
    ``currentTxnFirstOffset``): the last stable offset cannot pass it until its marker is written."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range (Kafka's findDuplicateBatch)."""
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        """Record an appended batch; a new epoch forgets the old epoch's batches (maybeUpdateProducerEpoch)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


@dataclass(frozen=True)
class ProducerUpdate:
    """A batch checked but not yet applied: applied only once its bytes are in the log."""

    producer_id: int
    epoch: int
    batch: BatchMetadata
    transactional: bool = False


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction ended in this partition by a control batch (its marker at ``last_offset``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def _batch_metadata(header: BatchHeader, first_offset: int) -> BatchMetadata:
    delta = header.last_offset_delta
    return BatchMetadata(
        first_seq=header.base_sequence,
        last_seq=increment_sequence(header.base_sequence, delta),
        first_offset=first_offset,
        last_offset=first_offset + delta,
        timestamp=header.max_timestamp,
    )


def _has_producer(header: BatchHeader) -> bool:
    return header.producer_id > NO_PRODUCER_ID and not header.is_control


class ProducerStateManager:
    """The producer ids of one partition and their snapshots in the partition's directory.

    ``map_end_offset``: the log offset the state reflects (everything below it has been applied). Runs on the
    thread that appends to the log (the broker's event loop)."""

    def __init__(self, directory: Path, name: str, expiration_ms: int) -> None:
        self.directory = directory
        self.name = name
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction

    # ------------------------------------------------------------------------------------------ appends

    def check_client_append(
        self, headers: Sequence[BatchHeader], first_offset: int, *, from_coordinator: bool = False
    ) -> tuple[BatchMetadata | None, list[ProducerUpdate]]:
        """Check a client's batches as Kafka's ``analyzeAndValidateProducerState`` does (origin CLIENT).

        Returns ``(duplicate, [])`` when a batch repeats one of the producer's last five (the caller appends
        nothing and answers the original offsets), else ``(None, updates)`` to :meth:`apply` after the write.
        InvalidProducerEpochError for an epoch older than the producer's, OutOfOrderSequenceError for a
        sequence that does not follow the producer's last one (a gap). ``from_coordinator``: a batch the group
        coordinator writes for a transaction (Kafka's origin COORDINATOR): only the epoch is checked, neither
        duplicates nor sequences (it numbers none)."""
        staged: dict[int, ProducerEntry] = {}
        updates: list[ProducerUpdate] = []
        offset = first_offset
        for header in headers:
            batch_first = offset
            offset += header.last_offset_delta + 1
            if not _has_producer(header):
                continue
            pid = header.producer_id
            current = self.producers.get(pid)
            if current is not None and not from_coordinator:
                duplicate = current.find_duplicate(header.producer_epoch, header.base_sequence,
                                                   increment_sequence(header.base_sequence, header.last_offset_delta))
                if duplicate is not None:
                    return duplicate, []
            self._check(header, current, staged.get(pid), batch_first, check_sequence=not from_coordinator)
            batch = _batch_metadata(header, batch_first)
            entry = staged.setdefault(pid, ProducerEntry(pid, current.epoch if current else NO_PRODUCER_EPOCH))
            entry.add(header.producer_epoch, batch)
            updates.append(ProducerUpdate(pid, header.producer_epoch, batch, header.is_transactional))
        return None, updates

    def _check(self, header: BatchHeader, current: ProducerEntry | None, staged: ProducerEntry | None,
               offset: int, *, check_sequence: bool = True) -> None:
        """Kafka's ProducerAppendInfo.checkProducerEpoch and checkSequence."""
        epoch, first_seq = header.producer_epoch, header.base_sequence
        current_epoch = current.epoch if current is not None else NO_PRODUCER_EPOCH
        known_epoch = staged.epoch if staged is not None else current_epoch
        where = f"producer {header.producer_id} at offset {offset} in {self.name}"
        if epoch < known_epoch:
            raise InvalidProducerEpochError(f"epoch of {where} is {epoch}, older than the last seen epoch "
                                            f"{known_epoch}")
        if not check_sequence:
            return
        if epoch != known_epoch:
            if first_seq != 0 and known_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(f"invalid sequence {first_seq} for new epoch {epoch} of {where} "
                                              f"(current epoch {known_epoch}): a new epoch starts at 0")
            return
        if staged is not None and staged.batches:
            last_seq = staged.last_seq
        else:
            last_seq = current.last_seq if current is not None else NO_SEQUENCE
        # a producer whose state is gone (expired, or its records deleted) may continue at any sequence
        if current_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(f"out of order sequence {first_seq} of {where}: the last sequence "
                                          f"written is {last_seq}")

    def apply(self, updates: Iterable[ProducerUpdate], end_offset: int) -> None:
        """Record batches now in the log; the state then reflects the log up to ``end_offset``."""
        for update in updates:
            entry = self.producers.get(update.producer_id)
            if entry is None:
                entry = self.producers[update.producer_id] = ProducerEntry(update.producer_id)
            entry.add(update.epoch, update.batch)
            if update.transactional:
                self._begin_txn(entry, update.batch.first_offset)
        self.map_end_offset = end_offset

    def _begin_txn(self, entry: ProducerEntry, offset: int) -> None:
        if entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = offset
            self.ongoing[entry.producer_id] = offset

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Kafka's ``ProducerAppendInfo.appendEndTxnMarker`` checks: InvalidProducerEpochError for a marker older
        than the producer's epoch, TransactionCoordinatorFencedError for one from an older coordinator."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(f"{self.name}: a transaction marker of producer {producer_id} has "
                                            f"epoch {epoch}, older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self.name}: a transaction marker of producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}")

    def end_txn(self, producer_id: int, epoch: int, coordinator_epoch: int, marker_offset: int, aborted: bool,
                timestamp: int) -> CompletedTxn | None:
        """A commit or abort marker at ``marker_offset``: the producer's transaction here is over (None if it
        had none in this partition: a marker is written to every partition of the transaction)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        if epoch != entry.epoch:  # a fencing abort bumps the epoch: the old epoch's batches no longer matter
            entry.batches.clear()
            entry.epoch = epoch
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        first, entry.current_txn_first_offset = entry.current_txn_first_offset, -1
        self.ongoing.pop(producer_id, None)
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        return None if first < 0 else CompletedTxn(producer_id, first, marker_offset, aborted)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction, None if there is none."""
        return min(self.ongoing.values(), default=None)

    def replicated(self, headers: Iterable[BatchHeader],
                   marker_aborts: Callable[[BatchHeader], bool | None] | None = None) -> list[CompletedTxn]:
        """Record batches as stored in the log (a follower's fetch, or replay at load): not checked, as Kafka's
        origin REPLICATION; an older epoch is logged. ``marker_aborts`` tells whether a control batch is an
        abort (True), a commit (False) or unreadable (None); the transactions the markers end are returned."""
        end = self.map_end_offset
        completed: list[CompletedTxn] = []
        for header in headers:
            end = header.next_offset
            if header.is_control and header.producer_id > NO_PRODUCER_ID and marker_aborts is not None:
                aborted = marker_aborts(header)
                if aborted is not None:
                    done = self.end_txn(header.producer_id, header.producer_epoch, -1, header.base_offset, aborted,
                                        header.max_timestamp)
                    if done is not None:
                        completed.append(done)
                continue
            if not _has_producer(header):
                continue
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerEntry(header.producer_id)
            elif header.producer_epoch < entry.epoch:
                logger.warning("%s: producer %d wrote epoch %d at offset %d after epoch %d", self.name,
                               header.producer_id, header.producer_epoch, header.base_offset, entry.epoch)
            entry.add(header.producer_epoch, _batch_metadata(header, header.base_offset))
            if header.is_transactional:
                self._begin_txn(entry, header.base_offset)
        self.map_end_offset = max(self.map_end_offset, end)
        return completed

    # ------------------------------------------------------------------------------------------ expiry

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle (by their last batch's max timestamp) for ``producer.id.expiration.ms``."""
        expired = [pid for pid, entry in self.producers.items() if now_ms - entry.last_timestamp >= self.expiration_ms]
        for pid in expired:
            if pid in self.ongoing:  # an open transaction keeps its producer (Kafka's isProducerExpired)
                continue
            del self.producers[pid]
        return len(expired)

    def clear(self, offset: int) -> None:
        """Forget every producer; the state now reflects an empty log ending at ``offset``."""
        self.producers.clear()
        self.ongoing.clear()
        self.map_end_offset = offset

    # ------------------------------------------------------------------------------------------ snapshots

    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files in the directory, ascending."""
        found = []
        try:
            for entry in os.scandir(self.directory):
                match = _SNAPSHOT_FILE.match(entry.name)
                if match:
                    found.append(int(match.group(1)))
        except FileNotFoundError:
            return []
        return sorted(found)

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def take_snapshot(self) -> None:
        """Write the state as ``<map_end_offset>.snapshot`` (atomically, fsynced)."""
        path = self.snapshot_path(self.map_end_offset)
        try:
            atomic_write(path, encode_snapshot(self.producers.values()))
        except OSError as e:
            raise StorageError(f"cannot write producer snapshot {path}: {e}") from e

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        """Remove snapshot files with an offset < ``below`` or > ``above``."""
        for offset in self.snapshot_offsets():
            if (below is not None and offset < below) or (above is not None and offset > above):
                self.snapshot_path(offset).unlink(missing_ok=True)

    def load_snapshot(self, log_start: int, log_end: int, now_ms: int) -> int:
        """Reset the state to a snapshot within ``log_start..log_end`` and return its offset (``log_start`` with
        an empty state if there is none), for the caller to replay the log from there. Snapshots past
        ``log_end`` are deleted, unreadable ones too; expired producers are not loaded.

        A snapshot at ``log_end`` (a clean shutdown's) is used as it is, as Kafka does: no replay. Otherwise (a
        crash) the second newest snapshot is preferred to the newest: a snapshot keeps each producer's last batch
        only (Kafka's format), so replaying from the one before gives back up to five batches per producer even
        for those whose last five straddle the newest (the last roll's). The replay reads batch headers only,
        at most two segments' worth."""
        self.delete_snapshots(above=log_end)
        candidates = [offset for offset in self.snapshot_offsets() if offset >= log_start]
        if candidates and candidates[-1] == log_end:
            order = candidates[::-1]
        else:
            order = candidates[-2:-1] + candidates[-1:] + candidates[-3::-1]
        for offset in order:
            path = self.snapshot_path(offset)
            try:
                entries = decode_snapshot(path.read_bytes())
            except (OSError, ValueError) as e:
                logger.warning("%s: deleting unreadable producer snapshot %s: %s", self.name, path, e)
                path.unlink(missing_ok=True)
                continue
            self.producers = {e.producer_id: e for e in entries
                              if now_ms - e.last_timestamp < self.expiration_ms or e.current_txn_first_offset >= 0}
            self.ongoing = {e.producer_id: e.current_txn_first_offset for e in self.producers.values()
                            if e.current_txn_first_offset >= 0}
            self.map_end_offset = offset
            return offset
        self.clear(log_start)
        return log_start


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """Kafka's producer snapshot, version 1: int16 version, uint32 CRC-32C of the rest, then an array of
    (producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, first offset of
    the ongoing transaction); each producer's last batch only (a producer whose epoch a marker bumped has none:
    last sequence and offset -1, as Kafka writes it)."""
    body = bytearray()
    kept = [entry for entry in entries if entry.batches or entry.epoch != NO_PRODUCER_EPOCH]
    body += _COUNT.pack(len(kept))
    for entry in kept:
        if entry.batches:
            last = entry.batches[-1]
            seq, offset, delta = last.last_seq, last.last_offset, last.last_offset - last.first_offset
        else:
            seq, offset, delta = NO_SEQUENCE, -1, 0
        body += _ENTRY.pack(entry.producer_id, entry.epoch, seq, offset, delta, entry.last_timestamp,
                            entry.coordinator_epoch, entry.current_txn_first_offset)
    return _HEAD.pack(_SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    """The entries of a version 1 snapshot; ValueError if it is truncated, corrupt or of another version."""
    if len(data) < _HEAD.size + _COUNT.size:
        raise ValueError(f"{len(data)} bytes is too short for a producer snapshot")
    version, crc = _HEAD.unpack_from(data)
    if version != _SNAPSHOT_VERSION:
        raise ValueError(f"snapshot version {version}, expected {_SNAPSHOT_VERSION}")
    if crc32c(data[_HEAD.size:]) != crc:
        raise ValueError("snapshot CRC mismatch")
    (count,) = _COUNT.unpack_from(data, _HEAD.size)
    if count < 0 or len(data) != _HEAD.size + _COUNT.size + count * _ENTRY.size:
        raise ValueError(f"snapshot of {len(data)} bytes does not hold {count} entries")
    entries = []
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first = _ENTRY.unpack_from(
            data, _HEAD.size + _COUNT.size + i * _ENTRY.size)
        entry = ProducerEntry(pid, epoch, coordinator_epoch=coordinator_epoch, current_txn_first_offset=txn_first,
                              last_timestamp=timestamp)
        if last_offset >= 0:
            entry.add(epoch, BatchMetadata(_decrement_sequence(last_seq, delta), last_seq, last_offset - delta,
                                           last_offset, timestamp))
        entries.append(entry)
    return entries
