"""offset_for_timestamp: Kafka's ListOffsets-by-time lookup."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from tests.broker import make_batch, make_values


def open_log(directory: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(directory / "t-0", "t", 0, LogConfig(**config), recover=False)


def expected(records: list[tuple[int, int]], target: int) -> tuple[int, int] | None:
    """Brute force: the first record (in offset order) with timestamp >= target."""
    return next(((o, ts) for o, ts in records if ts >= target), None)


def append_all(log: PartitionLog, batches: list[list[int]], compression: int = 0) -> list[tuple[int, int]]:
    records: list[tuple[int, int]] = []
    for timestamps in batches:
        result = log.append(
            make_batch(make_values(len(timestamps), 60), timestamps=timestamps, compression=compression)
        )
        records.extend(zip(range(result.base_offset, result.last_offset + 1), timestamps, strict=True))
    return records


def test_monotonic_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=200)
    records = append_all(log, [[1000 + 10 * (3 * i + j) for j in range(3)] for i in range(50)])
    assert log.segment_count() > 3
    for target in range(900, 2600, 7):
        assert log.offset_for_timestamp(target) == expected(records, target), target
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1005) == (1, 1010)
    assert log.offset_for_timestamp(10**12) is None
    log.close()


def test_non_monotonic_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=150)
    rng = random.Random(11)
    batches = [[rng.randint(0, 5000) for _ in range(rng.randint(1, 6))] for _ in range(80)]
    records = append_all(log, batches)
    for target in [*range(-5, 5100, 37), *(ts for _, ts in records[::5])]:
        assert log.offset_for_timestamp(target) == expected(records, target), target
    log.close()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])  # gzip, snappy, lz4, zstd: the exact record, not the batch start
def test_compressed_batches(tmp_path: Path, codec: int) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    records = append_all(log, [[500, 100, 300, 700, 200] * 10, [50, 900, 800]], compression=codec)
    for target in (0, 100, 101, 450, 700, 701, 850, 900, 901):
        assert log.offset_for_timestamp(target) == expected(records, target), target
    assert log.max_timestamp_offset() == (51, 900)
    log.close()


def test_max_timestamp_offset_is_the_first_record_with_the_largest_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=150)
    assert log.max_timestamp_offset() is None
    rng = random.Random(5)
    records = append_all(log, [[rng.randint(0, 900) for _ in range(3)] for _ in range(60)], compression=3)
    assert log.segment_count() > 2
    largest = max(ts for _, ts in records)
    assert log.max_timestamp_offset() == next((o, ts) for o, ts in records if ts == largest)
    log.close()


def test_empty_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.offset_for_timestamp(0) is None
    log.close()


def test_lookups_after_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=150)
    rng = random.Random(3)
    records = append_all(log, [[rng.randint(0, 900) for _ in range(3)] for _ in range(60)])
    log.close()
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=150)
    for target in range(0, 1000, 13):
        assert log.offset_for_timestamp(target) == expected(records, target)
    log.close()


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=5), min_size=1, max_size=30
    ),
    targets=st.lists(st.integers(min_value=-1, max_value=10_001), min_size=1, max_size=10),
)
def test_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[int]], targets: list[int]
) -> None:
    log = open_log(tmp_path_factory.mktemp("ts"), segment_bytes=1200, index_interval_bytes=120)
    records = append_all(log, batches)
    for target in targets:
        assert log.offset_for_timestamp(target) == expected(records, target)
    log.close()
