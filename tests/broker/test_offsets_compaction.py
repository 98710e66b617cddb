"""``__consumer_offsets`` compacted by the log cleaner over real segment files (docs/compaction.md, "Internal
topics"): a partition committed to many times per key, cleaned, then replayed by a new coordinator gives the same
offsets, memberships and open transactions; deleted offsets and groups leave tombstones that the cleaner removes
after ``delete.retention.ms``."""

from __future__ import annotations

from pathlib import Path

from metaq.broker.coordinator.offsets_partition import LOADED, CommittedOffset, OffsetsPartition
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC, GroupValue, StoredMember, decode_key
from metaq.broker.log.cleaner.cleaner import Cleaner, log_end_offset
from metaq.broker.log.cleaner.offset_map import ENTRY_SIZE, OffsetMap
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from tests.broker.test_log_cleaner import BASE_TS, _direct, read_all

RETENTION_MS = 1000
PID, EPOCH = 7000, 0


def _open(directory: Path) -> OffsetsPartition:
    """A partition as the broker creates it (compacted), with small segments so that cleaning has work."""
    config = LogConfig(segment_bytes=2048, cleanup_policy=("compact",), delete_retention_ms=RETENTION_MS)
    part = OffsetsPartition(PartitionLog.open(directory / f"{OFFSETS_TOPIC}-0", OFFSETS_TOPIC, 0, config,
                                              recover=False))
    part.load()
    assert part.state == LOADED
    return part


def _clean(part: OffsetsPartition, now_ms: int = BASE_TS, map_entries: int = 1000) -> None:
    """Clean every segment but a fresh active one up to the first open transaction, in as many passes as the
    map needs."""
    part.log.roll("test")
    first_dirty = part.log.log_start_offset
    while True:
        cleaner = Cleaner(OffsetMap(map_entries * ENTRY_SIZE), _direct, log_end_offset)
        end = cleaner.clean(part.log, first_dirty, now_ms).end_offset
        if end <= first_dirty:
            return
        first_dirty = end


def _reloaded(part: OffsetsPartition, directory: Path) -> OffsetsPartition:
    part.log.close()
    return _open(directory)


def _membership(generation: int, members: int) -> GroupValue:
    return GroupValue("consumer", generation, "range", "m-0" if members else None, tuple(
        StoredMember(f"m-{i}", None, "client", "/127.0.0.1", 30000, 10000, b"sub", b"assigned")
        for i in range(members)), BASE_TS)


def _keys_on_disk(part: OffsetsPartition) -> list[str]:
    """The group of every record the log still holds (tombstones included)."""
    return [decode_key(key).group for _, key, _ in read_all(part.log) if key is not None]


def test_many_commits_per_key_cleaned_and_replayed_give_the_same_state(tmp_path: Path) -> None:
    part = _open(tmp_path)
    for version in range(40):
        for group in ("g0", "g1", "g2"):
            part.append_commits(group, {("t", p): CommittedOffset(version * 10 + p, f"m{version}", BASE_TS + version)
                                        for p in range(5)})
        if version % 10 == 0:
            part.store_membership("g0", _membership(version, 2))
    appended = len(read_all(part.log))
    before = (part.offsets, part.memberships)

    _clean(part, map_entries=8)  # a map of 8 keys: several passes for the 16 live ones
    kept = read_all(part.log)
    assert len(kept) == 3 * 5 + 1 < appended
    replayed = _reloaded(part, tmp_path)
    assert (replayed.offsets, replayed.memberships) == before
    assert replayed.fetch("g1", [("t", 3)])[("t", 3)].offset == 393


def test_deleted_groups_and_offsets_leave_tombstones_the_cleaner_removes(tmp_path: Path) -> None:
    """DeleteGroups (offsets and membership), OffsetDelete (one partition) and expiry (offsets, then the empty
    group's membership) write tombstones; after delete.retention.ms a cleaning removes them and every record of
    the deleted keys, and a replay agrees with the coordinator's cache at each step."""
    part = _open(tmp_path)
    for version in range(10):
        for group in ("deleted", "kept", "expired"):
            part.append_commits(group, {("t", p): CommittedOffset(version, "", BASE_TS) for p in range(3)})
    for group in ("deleted", "expired"):
        part.store_membership(group, _membership(1, 0))  # the members left: an Empty group
    part.delete_offsets("deleted")
    part.store_membership("deleted", None)
    assert part.delete_offsets("kept", [("t", 2)]) == [("t", 2)]
    expire_at = BASE_TS + 10 * RETENTION_MS  # "expired"'s commits are older than the offsets retention
    assert part.expire(expire_at, retention_ms=RETENTION_MS, active_groups={"kept"}) == ["expired"]
    expected = {"kept": {("t", p): CommittedOffset(9, "", BASE_TS) for p in range(2)}}
    assert (part.offsets, part.memberships) == (expected, {})

    _clean(part, now_ms=BASE_TS)  # the tombstones get their delete horizon and stay
    assert set(_keys_on_disk(part)) == {"deleted", "kept", "expired"}
    part = _reloaded(part, tmp_path)
    assert (part.offsets, part.memberships) == (expected, {})

    part.append_commits("kept", {("t", 0): CommittedOffset(10, "", BASE_TS)})  # dirties the log again
    _clean(part, now_ms=BASE_TS + 2 * RETENTION_MS)  # past the horizon: the tombstones go
    assert sorted(_keys_on_disk(part)) == ["kept", "kept"]
    part = _reloaded(part, tmp_path)
    expected["kept"][("t", 0)] = CommittedOffset(10, "", BASE_TS)
    assert (part.offsets, part.memberships) == (expected, {})


def test_transactional_commits_survive_cleaning(tmp_path: Path) -> None:
    """A committed transaction's offsets, an aborted one's (which must not replace the older plain commit) and an
    open one's (pending, nothing cleaned from it on) read back the same after cleaning and a replay."""
    part = _open(tmp_path)
    for version in range(20):
        part.append_commits("g", {("t", p): CommittedOffset(version, "", BASE_TS) for p in range(3)})
    part.append_txn_commits(PID, EPOCH, "g", {("t", 0): CommittedOffset(100, "", BASE_TS)})
    part.log.append_marker(PID, EPOCH, True, 0)
    part.end_txn(PID, True)
    part.append_txn_commits(PID + 1, EPOCH, "g", {("t", 1): CommittedOffset(200, "", BASE_TS)})
    part.log.append_marker(PID + 1, EPOCH, False, 0)
    part.end_txn(PID + 1, False)
    for version in range(20, 30):
        part.append_commits("g", {("t", 2): CommittedOffset(version, "", BASE_TS)})
    part.append_txn_commits(PID + 2, EPOCH, "g", {("t", 2): CommittedOffset(300, "", BASE_TS)})
    part.append_commits("g", {("t", 2): CommittedOffset(30, "", BASE_TS)})  # after the open transaction: kept
    before = (part.offsets, part.pending)
    assert [part.offsets["g"][("t", p)].offset for p in range(3)] == [100, 19, 30]

    appended = len(read_all(part.log))
    _clean(part)
    assert len(read_all(part.log)) < appended
    part = _reloaded(part, tmp_path)
    assert (part.offsets, part.pending) == before
    part.log.append_marker(PID + 2, EPOCH, True, 0)
    part.end_txn(PID + 2, True)
    assert part.offsets["g"][("t", 2)].offset == 30  # the plain commit was appended after the transaction's
    _clean(part)
    assert (_reloaded(part, tmp_path).offsets, part.offsets["g"][("t", 1)].offset) == (part.offsets, 19)
