"""The committed offsets of the groups that map to one ``__consumer_offsets`` partition this broker leads.

States (only ``_set_state`` changes them)::

    LOADING --replay done--> LOADED        (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS)
    LOADING --replay failed--> FAILED      (COORDINATOR_NOT_AVAILABLE; a new instance retries)

A commit is appended to the partition's log first and only then applied to the in-memory cache, so an
acknowledged commit is on disk (and, with the broker's flush policy, fsynced). The log does not grow
without bound: when enough records were appended since the last rewrite, the live offsets are written
again at the head of a fresh segment and every older segment is deleted (snapshot compaction).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from metaq.broker.coordinator.schema import (
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
from metaq.protocol.batches import BATCH_HEADER_SIZE, read_header
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.records import DecodeResult, Record, decode_records

log = logging.getLogger(__name__)

LOADING = "LOADING"
LOADED = "LOADED"
FAILED = "FAILED"

REPLAY_READ_BYTES = 1 << 20
COMPACT_MIN_RECORDS = 10000  # rewrite once this many records (and at least 2x the live offsets) were appended

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


class OffsetsPartition:
    """One ``__consumer_offsets`` partition this broker leads (module docstring): owns its load state, the
    cache of committed offsets and last stored membership of each group mapped to it, and the count of records
    appended since the last rewrite (compaction); appends go to its :class:`PartitionLog`, which it does not
    own (the LogManager does)."""

    def __init__(self, log_: PartitionLog) -> None:
        self.log = log_
        self.partition = log_.partition
        self.state = LOADING
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.memberships: dict[str, GroupValue] = {}  # each group's last stored membership
        self._appended_since_rewrite = 0
        self.leader_epoch: int | None = None  # stamped on appends when the partition is replicated (KIP-101)
        self._lock = threading.Lock()  # replay runs on a worker thread; everything else on the event loop

    def _set_state(self, state: str) -> None:
        log.info("%s-%d offsets: %s -> %s", OFFSETS_TOPIC, self.partition, self.state, state)
        self.state = state

    # -- loading -----------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay the log into the cache (blocking; run on a worker thread)."""
        started = time.monotonic()
        try:
            offsets, memberships, count = self._replay()
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, self.partition)
            self._set_state(FAILED)
            return
        with self._lock:
            self.offsets = offsets
            self.memberships = memberships
            self._appended_since_rewrite = count
        self._set_state(LOADED)
        log.info("loaded %d offsets of %d groups from %s-%d in %.3fs", sum(map(len, offsets.values())),
                 len(offsets), OFFSETS_TOPIC, self.partition, time.monotonic() - started)

    def _replay(self) -> tuple[dict[str, dict[TopicPartition, CommittedOffset]], dict[str, GroupValue], int]:
        offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        memberships: dict[str, GroupValue] = {}
        count = 0
        for key, value in replay_records(self.log):
            count += 1
            self._apply(offsets, memberships, key, value)
        return offsets, memberships, count

    @staticmethod
    def _apply(offsets: dict[str, dict[TopicPartition, CommittedOffset]], memberships: dict[str, GroupValue],
               key: bytes | None, value: bytes | None) -> None:
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
            v.offset, v.metadata, v.commit_timestamp, v.expire_timestamp)

    # -- commits and fetches -----------------------------------------------------------------------

    def append_commits(self, group: str, commits: dict[TopicPartition, CommittedOffset]) -> None:
        """Append, then update the cache. Raises (and changes nothing in the cache) if the append fails."""
        records: list[tuple[bytes, bytes | None]] = [(encode_offset_key(OffsetKey(group, t, p)), encode_offset_value(
            OffsetValue(c.offset, c.metadata, c.commit_timestamp, c.expire_timestamp)))
            for (t, p), c in commits.items()]
        self._append(records)
        with self._lock:
            self.offsets.setdefault(group, {}).update(commits)

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

    def _append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        now = int(time.time() * 1000)
        builder = BatchBuilder(1 << 30)
        for key, value in records:
            builder.append(now, key, value)
        self.log.append(builder.build(), leader_epoch=self.leader_epoch)
        self._appended_since_rewrite += len(records)

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

    def expire(self, now_ms: int, retention_ms: int, active_groups: set[str]) -> int:
        """Drop offsets older than ``retention_ms`` (or past their explicit expiry) of groups with no active
        member, writing tombstones. Returns how many were removed."""
        doomed: list[tuple[str, TopicPartition]] = []
        with self._lock:
            for group, entries in self.offsets.items():
                if group in active_groups:
                    continue
                for tp, c in entries.items():
                    expired = (0 <= c.expire_timestamp <= now_ms) or now_ms - c.commit_timestamp > retention_ms
                    if expired:
                        doomed.append((group, tp))
        if not doomed:
            return 0
        self._tombstone(doomed)
        log.info("expired %d offsets in %s-%d", len(doomed), OFFSETS_TOPIC, self.partition)
        return len(doomed)

    def compact_if_needed(self, now_ms: int) -> bool:
        """Snapshot compaction: rewrite the live offsets in a fresh segment, delete everything older."""
        with self._lock:
            live = [(g, tp, c) for g, entries in self.offsets.items() for tp, c in entries.items()]
            memberships = list(self.memberships.items())
        if self._appended_since_rewrite < max(COMPACT_MIN_RECORDS, 2 * (len(live) + len(memberships))):
            return False
        self.log.roll("offsets compaction")
        start = self.log.log_end_offset
        self._appended_since_rewrite = 0
        for i in range(0, len(live), 1000):
            chunk = live[i:i + 1000]
            self._append([(encode_offset_key(OffsetKey(g, t, p)), encode_offset_value(
                OffsetValue(c.offset, c.metadata, c.commit_timestamp, c.expire_timestamp)))
                for g, (t, p), c in chunk])
        for i in range(0, len(memberships), 1000):
            self._append([(encode_group_key(g), encode_group_value(v)) for g, v in memberships[i:i + 1000]])
        self._appended_since_rewrite = len(live) + len(memberships)
        deleted = self.log.delete_segments_before(start, now_ms)
        log.info("compacted %s-%d: %d live offsets rewritten at %d, %d old segments deleted",
                 OFFSETS_TOPIC, self.partition, len(live), start, deleted)
        return True


def replay_records(log_: PartitionLog) -> Iterator[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of an internal topic's partition, oldest first: what a coordinator
    replays when it takes the partition over (``__consumer_offsets``, ``__transaction_state``)."""
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
        for _, _, key, value, _ in result.records:
            yield key, value
        position = max(result.next_offset, position + 1)


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
