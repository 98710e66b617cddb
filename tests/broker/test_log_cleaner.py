"""The log cleaner over real segment files: latest value per key, offsets kept, tombstones, bounded map passes,
keyless produce refused, swap recovery (docs/compaction.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from metaq.broker.log.cleaner.cleaner import Cleaner, log_end_offset
from metaq.broker.log.cleaner.config import CleanerConfig
from metaq.broker.log.cleaner.log_cleaner import LogCleaner
from metaq.broker.log.cleaner.offset_map import ENTRY_SIZE, OffsetMap
from metaq.broker.log.cleaner.swap import CLEANED_SUFFIX, SWAP_SUFFIX
from metaq.broker.log.cleaner.throttle import IoThrottle
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import InvalidRecordError
from metaq.metrics.broker import BrokerMetrics
from metaq.protocol.batches import read_header
from metaq.protocol.builder import PyBatchBuilder, with_producer
from metaq.protocol.records import decode_records
from tests.broker import make_batch

if TYPE_CHECKING:
    from metaq.broker.log.log_manager import LogManager

BASE_TS = 1_700_000_000_000
Entry = tuple[bytes | None, bytes | None]  # (key, value); value None: a tombstone


def _direct(fn: Callable[[], Any]) -> Any:
    return fn()


def open_log(directory: Path, **config: Any) -> PartitionLog:
    settings_ = {"segment_bytes": 400, "cleanup_policy": ("compact",), "delete_retention_ms": 1000,
                 "index_interval_bytes": 64, **config}
    return PartitionLog.open(directory / "cmp-0", "cmp", 0, LogConfig(**settings_), recover=False)


def batch(entries: Sequence[Entry], ts: int = BASE_TS) -> bytes:
    builder = PyBatchBuilder(1 << 20)
    for key, value in entries:
        builder.append(ts, key, value)
    return builder.build()


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the log start as a consumer reads it: (offset, key, value)."""
    position, out = log.log_start_offset, []
    while position < log.log_end_offset:
        piece = log.read(position, 1 << 20)
        if piece is None:
            break
        result = decode_records(piece.read_bytes(), position)
        out.extend((o, k, v) for o, _, k, v, _ in result.records)
        assert result.next_offset is not None and result.next_offset > position
        position = result.next_offset
    return out


def clean(log: PartitionLog, map_bytes: int = 1 << 16, now_ms: int = BASE_TS, first_dirty: int = 0,
          throttle: IoThrottle | None = None) -> int:
    log.roll("test")  # everything appended so far becomes cleanable
    cleaner = Cleaner(OffsetMap(map_bytes), _direct, log_end_offset, throttle)
    return cleaner.clean(log, first_dirty, now_ms).end_offset


class SteppingClock:
    """A clock that advances 1 ms per reading, for a throttle that must sleep without sleeping."""

    def __init__(self) -> None:
        self.now_ns = 0
        self.slept = 0.0

    def clock(self) -> int:
        self.now_ns += 1_000_000
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now_ns += int(seconds * 1e9)


def txn_batch(entries: Sequence[tuple[bytes, bytes]], producer_id: int, seq: int = 0) -> bytes:
    """A transactional producer's batch of keyed records."""
    return make_batch([v for _, v in entries], keys=[k for k, _ in entries], transactional=True,
                      producer=(producer_id, 0, seq), base_ts=BASE_TS)


def latest(entries: Sequence[tuple[int, Entry]]) -> dict[bytes, tuple[int, bytes | None]]:
    result: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (key, value) in entries:
        assert key is not None
        result[key] = (offset, value)
    return result


def test_latest_value_per_key_survives_with_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    written: list[tuple[int, Entry]] = []
    for i in range(60):
        entry = (f"k{i % 7}".encode(), f"v{i}".encode())
        written.append((log.append(batch([entry])).base_offset, entry))
    end = log.log_end_offset
    clock = SteppingClock()  # throttled to 1 KB/s: the same result, the throttle having slept
    assert clean(log, throttle=IoThrottle(1000.0, check_interval_ms=3, clock_ns=clock.clock,
                                          sleep=clock.sleep)) == end
    assert clock.slept > 1.0
    records = read_all(log)
    assert {k: (o, v) for o, k, v in records if k is not None} == latest(written)
    assert [o for o, _, _ in records] == sorted(o for o, _ in latest(written).values())
    assert log.log_end_offset == end and log.log_start_offset == 0
    assert log.append(batch([(b"k1", b"after")])).base_offset == end  # offsets never reused


def test_nothing_at_or_above_the_high_watermark_is_cleaned(tmp_path: Path) -> None:
    """A leader whose followers have not fetched the second segment yet: the first segment's records that the
    second supersedes stay (docs/compaction.md, Kafka's cleanableOffsets), and are cleaned once the HW passes."""
    log = open_log(tmp_path)
    for i in range(5):
        log.append(batch([(f"k{i}".encode(), b"old")]))
    log.roll("test")
    hw = log.log_end_offset
    for i in range(5):
        log.append(batch([(f"k{i}".encode(), b"new")]))
    log.roll("test")  # both segments inactive; the HW is at the second one's base
    cleaner = Cleaner(OffsetMap(1 << 16), _direct, lambda _: hw)
    assert cleaner.clean(log, 0, BASE_TS).end_offset == hw
    expected = [(i, b"old") for i in range(5)] + [(i, b"new") for i in range(5, 10)]
    assert [(o, v) for o, _, v in read_all(log)] == expected
    assert Cleaner(OffsetMap(1 << 16), _direct, log_end_offset).clean(log, hw, BASE_TS).end_offset == 10
    assert [(o, v) for o, _, v in read_all(log)] == [(i, b"new") for i in range(5, 10)]


def test_nothing_from_the_first_open_transaction_on_is_cleaned(tmp_path: Path) -> None:
    """An open transaction bounds cleaning (the last stable offset): neither its records nor later ones
    supersede older records of their keys, which its abort could still leave as the latest."""
    log = open_log(tmp_path, segment_bytes=100_000)
    log.append(batch([(b"a", b"1"), (b"b", b"1")]))  # 0..1
    log.append(txn_batch([(b"a", b"txn")], producer_id=9))  # 2: open
    log.append(batch([(b"b", b"2")]))  # 3
    log.append(batch([(b"a", b"2"), (b"c", b"1")]))  # 4..5
    assert log.last_stable_offset(log.log_end_offset) == 2
    assert clean(log) == 2
    assert [(o, k, v) for o, k, v in read_all(log)] == [
        (0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"txn"), (3, b"b", b"2"), (4, b"a", b"2"), (5, b"c", b"1")]


def markers(log: PartitionLog) -> list[int]:
    """Offsets of the transaction markers left in the log's inactive segments."""
    return [h.base_offset for s in log.inactive_segments() for _, h in s.batch_positions() if h.is_control]


def test_aborted_records_are_removed_and_supersede_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=100_000)
    log.append(batch([(b"a", b"v1")]))  # 0
    log.append(txn_batch([(b"a", b"aborted")], producer_id=9))  # 1
    log.append_marker(9, 0, commit=False, coordinator_epoch=0, now_ms=BASE_TS)  # 2
    log.append(txn_batch([(b"b", b"committed")], producer_id=9, seq=1))  # 3
    log.append_marker(9, 0, commit=True, coordinator_epoch=0, now_ms=BASE_TS)  # 4
    log.append(batch([(b"c", b"v1")]))  # 5
    assert clean(log) == 6
    assert read_all(log) == [(0, b"a", b"v1"), (3, b"b", b"committed"), (5, b"c", b"v1")]
    assert markers(log) == [2, 4]  # the abort's data was there in this pass: its marker stays
    assert [(t.first_offset, t.last_offset) for t in log.aborted_transactions(0, 6)] == [(1, 2)]
    clean(log, first_dirty=6)  # nothing of the aborted transaction left: its marker gets a delete horizon
    assert markers(log) == [2, 4]
    clean(log, now_ms=BASE_TS + 1001, first_dirty=6)  # past it (delete.retention.ms 1000): gone
    assert markers(log) == [4]  # the commit's data is still there
    assert read_all(log) == [(0, b"a", b"v1"), (3, b"b", b"committed"), (5, b"c", b"v1")]


def test_a_commit_marker_goes_once_its_data_is_superseded(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=100_000)
    log.append(txn_batch([(b"a", b"x")], producer_id=9))  # 0
    log.append_marker(9, 0, commit=True, coordinator_epoch=0, now_ms=BASE_TS)  # 1
    log.append(txn_batch([(b"a", b"y")], producer_id=9, seq=1))  # 2
    log.append_marker(9, 0, commit=True, coordinator_epoch=0, now_ms=BASE_TS)  # 3
    log.append(batch([(b"a", b"z")]))  # 4
    clean(log)
    assert read_all(log) == [(4, b"a", b"z")]
    assert markers(log) == [1, 3]  # their batches were there in this pass (the last one kept empty)
    clean(log, first_dirty=5)
    clean(log, now_ms=BASE_TS + 1001, first_dirty=5)
    assert markers(log) == [3]  # the producer's last batch (kept empty for its sequence) still precedes it
    assert read_all(log) == [(4, b"a", b"z")]


def test_the_aborted_index_follows_the_cleaned_segments(tmp_path: Path) -> None:
    """An abort whose marker is in the second of two segments cleaned into one is still indexed after a
    reopen while its marker stays, and no longer once the marker is gone."""
    log = open_log(tmp_path, segment_bytes=100_000)
    log.append(batch([(b"a", b"v1")]))  # 0
    log.roll("test")
    log.append(txn_batch([(b"a", b"aborted")], producer_id=9))  # 1
    log.append_marker(9, 0, commit=False, coordinator_epoch=0, now_ms=BASE_TS)  # 2: indexed in segment 1's file
    log.append(txn_batch([(b"b", b"ok")], producer_id=9, seq=1))  # 3
    log.append_marker(9, 0, commit=True, coordinator_epoch=0, now_ms=BASE_TS)  # 4
    clean(log)
    assert [s.base_offset for s in log.inactive_segments()] == [0]
    directory, config = log.directory, log.config
    log.close()
    log = PartitionLog.open(directory, "cmp", 0, config, recover=False)
    assert [(t.first_offset, t.last_offset) for t in log.aborted_transactions(0, 5)] == [(1, 2)]
    clean(log, first_dirty=5)
    clean(log, now_ms=BASE_TS + 1001, first_dirty=5)
    assert markers(log) == [4]
    assert log.aborted_transactions(0, 5) == []
    log.close()
    log = PartitionLog.open(directory, "cmp", 0, config, recover=False)
    assert log.aborted_transactions(0, 5) == []
    assert read_all(log) == [(0, b"a", b"v1"), (3, b"b", b"ok")]


def test_tombstones_kept_until_their_horizon_then_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=5000)
    for i in range(20):
        log.append(batch([(f"k{i % 4}".encode(), b"v")]))
    log.append(batch([(b"k0", None)]))
    clean(log, now_ms=BASE_TS)
    assert (b"k0", None) in [(k, v) for _, k, v in read_all(log)]
    clean(log, now_ms=BASE_TS + 4999, first_dirty=log.log_end_offset)
    assert (b"k0", None) in [(k, v) for _, k, v in read_all(log)]
    clean(log, now_ms=BASE_TS + 5001, first_dirty=log.log_end_offset)
    assert sorted(k for _, k, _ in read_all(log) if k is not None) == [b"k1", b"k2", b"k3"]


def test_small_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2000)
    written: list[tuple[int, Entry]] = []
    for i in range(300):
        entry = (f"key-{i % 40}".encode(), f"value-{i}".encode())
        written.append((log.append(batch([entry])).base_offset, entry))
    first_dirty, passes = 0, 0
    map_bytes = 12 * ENTRY_SIZE  # 10 entries at the 0.9 load factor: 40 keys need several passes
    while first_dirty < log.log_end_offset:
        first_dirty = clean(log, map_bytes, first_dirty=first_dirty)
        passes += 1
    assert passes > 3
    clean(log, map_bytes, first_dirty=first_dirty)
    assert {k: (o, v) for o, k, v in read_all(log) if k is not None} == latest(written)


def test_batch_metadata_of_a_producer_is_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(with_producer(batch([(b"a", b"1"), (b"b", b"1")]), 7, 0, 0))
    log.append(with_producer(batch([(b"a", b"2"), (b"b", b"2")]), 7, 0, 2))
    log.append(batch([(b"a", b"3"), (b"b", b"3")]))  # the producer's last batch is now entirely superseded
    clean(log)
    headers = []
    for segment in log.inactive_segments():
        headers.extend(header for _, header in segment.batch_positions())
    producer = [h for h in headers if h.producer_id == 7]
    assert [(h.base_offset, h.last_offset_delta, h.base_sequence, h.record_count) for h in producer] == [(2, 1, 2, 0)]
    assert read_all(log) == [(4, b"a", b"3"), (5, b"b", b"3")]


def test_keyless_produce_to_a_compacted_log_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
        log.append(batch([(b"k", b"v"), (None, b"v")]))
    assert log.log_end_offset == 0
    plain = open_log(tmp_path / "plain", cleanup_policy=("delete",))
    assert plain.append(batch([(None, b"v")])).base_offset == 0


@pytest.mark.parametrize("leftover", [CLEANED_SUFFIX, SWAP_SUFFIX])
def test_interrupted_swap_recovers_every_latest_value(tmp_path: Path, leftover: str) -> None:
    log = open_log(tmp_path)
    written: list[tuple[int, Entry]] = []
    for i in range(40):
        entry = (f"k{i % 5}".encode(), f"v{i}".encode())
        written.append((log.append(batch([entry])).base_offset, entry))
    log.roll("test")
    directory, old = log.directory, log.inactive_segments()
    # a crash after the cleaned copy was written (or swapped): the copy of the first segments' latest records
    cleaner = Cleaner(OffsetMap(1 << 16), _direct, log_end_offset)
    replace = PartitionLog.replace_segments
    try:
        PartitionLog.replace_segments = lambda self, group, base: False  # type: ignore[method-assign]
        cleaner.clean(log, 0, BASE_TS)
    finally:
        PartitionLog.replace_segments = replace  # type: ignore[method-assign]
    log.close()
    # the abandoned swap was removed by the cleaner: recreate what a crash would have left
    assert not list(directory.glob(f"*{SWAP_SUFFIX}"))
    first = old[0]
    data = first.log_path.read_bytes()
    (directory / (first.log_path.name + leftover)).write_bytes(data[: read_header(data).size])
    reopened = PartitionLog.open(directory, "cmp", 0, log.config, recover=True)
    assert not list(directory.glob(f"*{leftover}"))
    values = {k: (o, v) for o, k, v in read_all(reopened) if k is not None}
    assert {k: values[k] for k in latest(written)} == latest(written)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.integers(0, 9), st.booleans(), st.booleans()), min_size=1, max_size=120),
       map_entries=st.integers(2, 30))
def test_any_history_cleaned_any_times_reads_back_the_latest_values(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, bool, bool]], map_entries: int) -> None:
    log = open_log(tmp_path_factory.mktemp("prop"), segment_bytes=300, delete_retention_ms=10**12)
    written: list[tuple[int, Entry]] = []
    first_dirty = 0
    for i, (key, tombstone, clean_now) in enumerate(ops):
        entry = (f"k{key}".encode(), None if tombstone else f"v{i}".encode())
        written.append((log.append(batch([entry])).base_offset, entry))
        if clean_now:
            first_dirty = clean(log, map_entries * ENTRY_SIZE, first_dirty=first_dirty)
    while first_dirty < log.log_end_offset:
        first_dirty = clean(log, map_entries * ENTRY_SIZE, first_dirty=first_dirty)
    records = read_all(log)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert {k: (o, v) for o, k, v in records if k is not None} == latest(written)


class _Logs:
    """What :class:`LogCleaner` asks of the broker's LogManager, over one real log."""

    def __init__(self, log: PartitionLog) -> None:
        self._log = log
        self.log_dirs = [log.directory.parent]

    def logs(self) -> list[PartitionLog]:
        return [self._log]

    def future(self, topic: str, partition: int) -> None:
        return None


def test_max_compaction_delay_is_the_wait_beyond_max_compaction_lag(tmp_path: Path) -> None:
    """Kafka's max-compaction-delay-secs: records written 10 s ago in a log whose max.compaction.lag.ms is 1 s
    have waited at least 9 s beyond it; the gauge reads it from the cleaner's last choice."""
    log = open_log(tmp_path, max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=0.99)
    written_ms = time.time_ns() // 1_000_000 - 10_000
    for i in range(3):
        log.append(batch([(f"k{i}".encode(), b"v")], ts=written_ms))
    log.roll("test")
    registry = CollectorRegistry()
    metrics = BrokerMetrics(registry)
    cleaner = LogCleaner(cast("LogManager", _Logs(log)), CleanerConfig(), _direct, log_end_offset)
    metrics.report_cleaner(cleaner.state)
    assert registry.get_sample_value("metaq_broker_log_cleaner_max_compaction_delay_seconds") == 0
    picked = cleaner.grab_filthiest()
    assert picked is not None and picked[1].needs_now  # overdue: chosen whatever its ratio
    delay = registry.get_sample_value("metaq_broker_log_cleaner_max_compaction_delay_seconds")
    assert delay is not None and 9.0 <= delay < 3600
    metrics.close()
