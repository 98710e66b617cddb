"""The committed offsets of the groups that map to one ``__consumer_offsets`` partition this broker leads.

States (only ``_set_state`` changes them)::

    LOADING --replay done--> LOADED        (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS)
    LOADING --replay failed--> FAILED      (COORDINATOR_NOT_AVAILABLE; a new instance retries)

A commit is appended to the partition's log first and only then applied to the in-memory cache, so an
acknowledged commit is on disk (and, with the broker's flush policy, fsynced). The log does not grow
without bound: ``__consumer_offsets`` is a compacted topic (``cleanup.policy=compact``, as Kafka creates it)
and the broker's log cleaner keeps the latest record of each key, an offset's (group, topic, partition) or a
group's membership (group). Deleted offsets and groups are written as tombstones, which the cleaner removes
after ``delete.retention.ms``; a replay of a cleaned log gives the same cache (docs/compaction.md, "Internal
topics").

Offsets committed inside a transaction (TxnOffsetCommit) are appended at once as a transactional batch carrying
the producer id and epoch, kept pending per producer id, and become the group's offsets when the producer's
commit marker is written to this partition (dropped at its abort marker); a replay does the same with the
markers it meets, so a coordinator that takes the partition over mid-transaction has the pending offsets
(Kafka's GroupMetadataManager; docs/transactions.md section 2). The cleaner never cleans at or beyond the
first offset of an open transaction, and removes an aborted one's records without letting them supersede
older commits.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from metaq.broker.coordinator.offsets_schema import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import CorruptRecordError
from metaq.protocol.batches import BATCH_HEADER_SIZE, BatchHeader, read_header
from metaq.protocol.builder import BatchBuilder, as_transactional
from metaq.protocol.control import marker_is_abort
from metaq.protocol.record_types import Record
from metaq.protocol.records import DecodeResult, decode_records

log = logging.getLogger(__name__)

LOADING = "LOADING"
LOADED = "LOADED"
FAILED = "FAILED"

REPLAY_READ_BYTES = 1 << 20

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1
    log_offset: int = field(default=-1, compare=False)
    """Where the batch that wrote it starts in the partition's log (-1: unknown): a transaction's offset
    replaces the group's at its commit marker only if it was appended later (Kafka's olderThan)."""


GroupOffsets = dict[str, dict[TopicPartition, CommittedOffset]]
"""Offsets by group, then by topic-partition."""


@dataclass(frozen=True, slots=True)
class ReplayedBatch:
    """One batch of an internal topic's partition as a coordinator replays it."""

    producer_id: int
    """The producer of a transactional batch (data or marker); NO_PRODUCER_ID for any other."""
    base_offset: int
    commit: bool | None
    """A transaction marker: True commit, False abort; None for a data batch."""
    records: list[tuple[bytes | None, bytes | None]]
    """(key, value) of its records; none for a marker."""


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay of an offsets partition found."""

    offsets: GroupOffsets
    memberships: dict[str, GroupValue]
    pending: dict[int, GroupOffsets]
    records: int


class OffsetsPartition:
    """One ``__consumer_offsets`` partition this broker leads (module docstring): owns its load state and the
    cache of committed offsets and last stored membership of each group mapped to it; appends go to its
    :class:`PartitionLog`, which it does not own (the LogManager does, and its cleaner compacts it)."""

    def __init__(self, log_: PartitionLog) -> None:
        self.log = log_
        self.partition = log_.partition
        self.state = LOADING
        self.offsets: GroupOffsets = {}
        self.memberships: dict[str, GroupValue] = {}  # each group's last stored membership
        self.pending: dict[int, GroupOffsets] = {}  # producer id -> offsets of its open transaction
        self.leader_epoch: int | None = None  # stamped on appends when the partition is replicated (KIP-101)
        self._lock = threading.Lock()  # replay runs on a worker thread; everything else on the event loop

    def _set_state(self, state: str) -> None:
        log.info("%s-%d offsets: %s -> %s", OFFSETS_TOPIC, self.partition, self.state, state)
        self.state = state

    # -- loading -----------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay the log into the cache (blocking; run on a worker thread)."""
        started = time.monotonic()
        warn_if_not_compacted(self.log)
        try:
            replayed = self._replay()
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, self.partition)
            self._set_state(FAILED)
            return
        with self._lock:
            self.offsets = replayed.offsets
            self.memberships = replayed.memberships
            self.pending = replayed.pending
        self._set_state(LOADED)
        log.info("loaded %d offsets of %d groups (%d open transactions) from %d records of %s-%d in %.3fs",
                 sum(map(len, replayed.offsets.values())), len(replayed.offsets), len(replayed.pending),
                 replayed.records, OFFSETS_TOPIC, self.partition, time.monotonic() - started)

    def _replay(self) -> Replayed:
        """Kafka's loadGroupsAndOffsets: a transactional batch's offsets wait for the producer's marker."""
        offsets: GroupOffsets = {}
        memberships: dict[str, GroupValue] = {}
        pending: dict[int, GroupOffsets] = {}
        count = 0
        for batch in replay_batches(self.log):
            if batch.commit is not None:
                _end_txn(offsets, pending, batch.producer_id, batch.commit)
                continue
            target = offsets if batch.producer_id == NO_PRODUCER_ID else pending.setdefault(batch.producer_id, {})
            for key, value in batch.records:
                count += 1
                self._apply(target, memberships, key, value, batch.base_offset)
        return Replayed(offsets, memberships, pending, count)

    @staticmethod
    def _apply(offsets: GroupOffsets, memberships: dict[str, GroupValue],
               key: bytes | None, value: bytes | None, log_offset: int = -1) -> None:
        if key is None:
            return
        try:
            decoded = decode_key(key)
            if isinstance(decoded, GroupKey):
                if value is None:
                    memberships.pop(decoded.group, None)
                else:
                    memberships[decoded.group] = decode_group_value(value)
                return
            tp = (decoded.topic, decoded.partition)
            if value is None:
                group = offsets.get(decoded.group)
                if group is not None:
                    group.pop(tp, None)
                    if not group:
                        del offsets[decoded.group]
                return
            v = decode_offset_value(value)
        except CorruptRecordError as e:
            log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, e)
            return
        offsets.setdefault(decoded.group, {})[tp] = CommittedOffset(
            v.offset, v.metadata, v.commit_timestamp, v.expire_timestamp, log_offset)

    # -- commits and fetches -----------------------------------------------------------------------

    def append_commits(self, group: str, commits: dict[TopicPartition, CommittedOffset]) -> None:
        """Append, then update the cache. Raises (and changes nothing in the cache) if the append fails."""
        records: list[tuple[bytes, bytes | None]] = [(encode_offset_key(OffsetKey(group, t, p)), encode_offset_value(
            OffsetValue(c.offset, c.metadata, c.commit_timestamp, c.expire_timestamp)))
            for (t, p), c in commits.items()]
        at = self._append(records)
        with self._lock:
            self.offsets.setdefault(group, {}).update(_at(commits, at))

    def append_txn_commits(self, producer_id: int, producer_epoch: int, group: str,
                           commits: dict[TopicPartition, CommittedOffset]) -> None:
        """TxnOffsetCommit: append the offsets as a transactional batch of the producer (Kafka's storeOffsets
        with a producer id), then hold them pending until its marker (:meth:`end_txn`). Raises, changing
        nothing, if the append fails (InvalidProducerEpochError for a producer fenced here by a marker)."""
        if not commits:
            return
        now = int(time.time() * 1000)
        builder = BatchBuilder(1 << 30)
        for (t, p), c in commits.items():
            builder.append(now, encode_offset_key(OffsetKey(group, t, p)), encode_offset_value(
                OffsetValue(c.offset, c.metadata, c.commit_timestamp, c.expire_timestamp)))
        batch = as_transactional(builder.build(), producer_id, producer_epoch, 0)
        at = self.log.append(batch, leader_epoch=self.leader_epoch, from_coordinator=True).base_offset
        with self._lock:
            self.pending.setdefault(producer_id, {}).setdefault(group, {}).update(_at(commits, at))

    def end_txn(self, producer_id: int, commit: bool) -> list[str]:
        """The producer's marker is in this partition's log: its pending offsets become the groups' (commit)
        or are dropped (abort), as Kafka's handleTxnCompletion. Returns the groups whose offsets it held."""
        with self._lock:
            groups = list(self.pending.get(producer_id, {}))
            _end_txn(self.offsets, self.pending, producer_id, commit)
        return groups

    def store_membership(self, group: str, value: GroupValue | None) -> None:
        """Append the group's membership (None: a tombstone), then update the cache."""
        self._append([(encode_group_key(group), None if value is None else encode_group_value(value))])
        with self._lock:
            if value is None:
                self.memberships.pop(group, None)
            else:
                self.memberships[group] = value

    def membership(self, group: str) -> GroupValue | None:
        with self._lock:
            return self.memberships.get(group)

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append the records as one batch; where it starts (-1 for none)."""
        if not records:
            return -1
        now = int(time.time() * 1000)
        builder = BatchBuilder(1 << 30)
        for key, value in records:
            builder.append(now, key, value)
        return self.log.append(builder.build(), leader_epoch=self.leader_epoch).base_offset

    def fetch(self, group: str, partitions: list[TopicPartition] | None) -> dict[TopicPartition, CommittedOffset]:
        with self._lock:
            stored = dict(self.offsets.get(group, {}))
        if partitions is None:
            return stored
        return {tp: stored[tp] for tp in partitions if tp in stored}

    def groups(self) -> list[str]:
        with self._lock:
            return list(self.offsets)

    def delete_offsets(self, group: str, partitions: list[TopicPartition] | None = None) -> list[TopicPartition]:
        """Tombstone the offsets of ``group`` (only ``partitions``, when given) so that the deletion survives a
        restart (DeleteGroups, OffsetDelete). Raises, changing nothing in the cache, if the append fails.
        Returns the partitions that had an offset."""
        with self._lock:
            stored = self.offsets.get(group, {})
            doomed = sorted(stored) if partitions is None else sorted(tp for tp in set(partitions) if tp in stored)
        self._tombstone([(group, tp) for tp in doomed])
        return doomed

    def _tombstone(self, doomed: list[tuple[str, TopicPartition]]) -> None:
        """Append tombstones, then drop the offsets from the cache."""
        self._append([(encode_offset_key(OffsetKey(g, t, p)), None) for g, (t, p) in doomed])
        with self._lock:
            for group, tp in doomed:
                entries = self.offsets.get(group, {})
                entries.pop(tp, None)
                if not entries:
                    self.offsets.pop(group, None)

    # -- housekeeping ------------------------------------------------------------------------------

    def expire(self, now_ms: int, retention_ms: int, active_groups: set[str]) -> list[str]:
        """Drop offsets older than ``retention_ms`` (or past their explicit expiry) of groups with no active
        member, writing tombstones; then tombstone the stored membership of each such group left with no
        member and no offset (Kafka's cleanupGroupMetadata: the group is Dead). Returns the groups removed
        whole."""
        doomed: list[tuple[str, TopicPartition]] = []
        with self._lock:
            for group, entries in self.offsets.items():
                if group in active_groups:
                    continue
                for tp, c in entries.items():
                    expired = (0 <= c.expire_timestamp <= now_ms) or now_ms - c.commit_timestamp > retention_ms
                    if expired:
                        doomed.append((group, tp))
        if doomed:
            self._tombstone(doomed)
            log.info("expired %d offsets in %s-%d", len(doomed), OFFSETS_TOPIC, self.partition)
        with self._lock:
            dead = sorted(group for group, value in self.memberships.items()
                          if not value.members and group not in active_groups and group not in self.offsets)
        for group in dead:
            self.store_membership(group, None)
        if dead:
            log.info("removed %d empty groups without offsets from %s-%d", len(dead), OFFSETS_TOPIC, self.partition)
        return dead


def _end_txn(offsets: GroupOffsets, pending: dict[int, GroupOffsets], producer_id: int, commit: bool) -> None:
    """A marker of ``producer_id``: its pending offsets into ``offsets`` (commit) or gone (abort)."""
    txn = pending.pop(producer_id, None)
    if txn is None or not commit:
        return
    for group, entries in txn.items():
        stored = offsets.setdefault(group, {})
        for tp, entry in entries.items():
            current = stored.get(tp)
            if current is None or current.log_offset < entry.log_offset:
                stored[tp] = entry


def _at(commits: dict[TopicPartition, CommittedOffset], log_offset: int) -> dict[TopicPartition, CommittedOffset]:
    return {tp: dataclasses.replace(c, log_offset=log_offset) for tp, c in commits.items()}


def warn_if_not_compacted(log_: PartitionLog) -> None:
    """An internal topic created by a metaq older than its compaction (no ``cleanup.policy`` override) is
    never cleaned, and ``delete`` retention would remove live records: say how to fix it."""
    if not log_.config.compact:
        log.warning("%s-%d is not compacted (cleanup.policy %s): its log grows and retention may delete live "
                    "state; set it as Kafka creates it: metaq topics alter-config %s --set cleanup.policy=compact",
                    log_.topic, log_.partition, ",".join(log_.config.cleanup_policy), log_.topic)


def replay_records(log_: PartitionLog) -> Iterator[tuple[bytes | None, bytes | None]]:
    """(key, value) of every data record of an internal topic's partition, oldest first: what a coordinator
    replays when it takes the partition over (``__transaction_state``; ``__consumer_offsets`` needs the
    batches, :func:`replay_batches`)."""
    for batch in replay_batches(log_):
        if batch.commit is None:
            yield from batch.records


def replay_batches(log_: PartitionLog) -> Iterator[ReplayedBatch]:
    """Every batch of an internal topic's partition, oldest first, with its transaction (producer id,
    marker) and its records; unreadable batches are skipped (logged)."""
    position = log_.log_start_offset
    end = log_.log_end_offset
    max_bytes = REPLAY_READ_BYTES
    name = f"{log_.topic}-{log_.partition}"
    while position < end:
        piece = log_.read(position, max_bytes)
        if piece is None:
            break
        data = piece.read_bytes()
        try:
            result = decode_records(data, position)
        except CorruptRecordError as e:
            log.debug("undecodable batch in %s at or after offset %d (%s): decoding batch by batch", name,
                      position, e)
            result = _decode_batch_by_batch(data, position, name)
        if result.next_offset is None:
            max_bytes *= 2  # a batch larger than the read: read more
            continue
        yield from _batches(data, position, result.records)
        position = max(result.next_offset, position + 1)


def _batches(data: bytes, position: int, records: list[Record]) -> Iterator[ReplayedBatch]:
    """The complete batches of ``data`` (read from offset ``position``) with their share of ``records``,
    the decoded records of ``data`` in offset order (those of undecodable batches missing)."""
    index = 0
    for pos, header in _headers(data):
        if header.next_offset <= position:
            continue
        transactional = header.is_transactional and header.producer_id != NO_PRODUCER_ID
        producer_id = header.producer_id if transactional else NO_PRODUCER_ID
        if header.is_control:
            aborted = marker_is_abort(data[pos:pos + header.size]) if transactional else None
            if aborted is not None:
                yield ReplayedBatch(producer_id, header.base_offset, not aborted, [])
            continue
        mine: list[tuple[bytes | None, bytes | None]] = []
        while index < len(records) and records[index][0] <= header.last_offset:
            if records[index][0] >= header.base_offset:
                mine.append((records[index][2], records[index][3]))
            index += 1
        yield ReplayedBatch(producer_id, header.base_offset, None, mine)


def _headers(data: bytes) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch at the start of ``data``."""
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        try:
            header = read_header(data, pos)
        except CorruptRecordError:
            return
        if pos + header.size > len(data):
            return
        yield pos, header
        pos += header.size


def _decode_batch_by_batch(data: bytes, position: int, name: str) -> DecodeResult:
    """The records of the complete batches of ``data``, skipping (and logging) those that do not decode:
    one bad batch, written by a broker bug or before produces to internal topics were refused, must not
    fail the partition, and with it every group it coordinates, forever."""
    records: list[Record] = []
    next_offset: int | None = None
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        header = read_header(data, pos)
        if pos + header.size > len(data):
            break  # cut off by the read size: read again from here
        try:
            records += decode_records(data[pos:pos + header.size], position).records
        except CorruptRecordError as e:
            log.warning("skipping unreadable batch at offsets %d..%d of %s: %s", header.base_offset,
                        header.last_offset, name, e)
        next_offset = header.next_offset
        pos += header.size
    return DecodeResult(records, next_offset, pos, None)
