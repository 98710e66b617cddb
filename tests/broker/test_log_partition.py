"""PartitionLog: append, offsets, rolling, indexes, reads and flushing."""

from __future__ import annotations

import os
import random
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metaq.broker.handlers.produce import _rejection_code
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.errors import (
    CorruptRecordError,
    ErrorCode,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    StorageError,
)
from metaq.protocol.batches import read_header
from tests.broker import BASE_TS, decode, make_batch, make_values


def open_log(directory: Path, *, recover: bool = False, recovery_point: int = 0, **config: int) -> PartitionLog:
    return PartitionLog.open(
        directory / "topic.name-with-dashes-3",
        "topic.name-with-dashes",
        3,
        LogConfig(**config),
        recover=recover,
        recovery_point=recovery_point,
    )


def fill(log: PartitionLog, batches: int, per_batch: int = 3, size: int = 30) -> list[bytes]:
    """Append ``batches`` batches; return every value in offset order."""
    values: list[bytes] = []
    for i in range(batches):
        chunk = make_values(per_batch, size, tag=f"b{i}-")
        log.append(make_batch(chunk, base_ts=BASE_TS + 10 * i))
        values.extend(chunk)
    return values


def read_all(log: PartitionLog, max_bytes: int = 1 << 20) -> list[bytes | None]:
    """Consume the whole log as a consumer would: fetch, decode, skip below the position."""
    position, values = log.log_start_offset, []
    while position < log.log_end_offset:
        piece = log.read(position, max_bytes)
        assert piece is not None
        records = [(o, v) for o, _, v in decode(piece.read_bytes()) if o >= position]
        assert records, f"no progress at {position}"
        assert records[0][0] == position
        values.extend(v for _, v in records)
        position = records[-1][0] + 1
    return values


def test_new_log_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
    assert log.topic == "topic.name-with-dashes" and log.partition == 3
    assert sorted(p.name for p in log.directory.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    assert log.read(0, 100) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    log.close()


def test_append_assigns_contiguous_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(make_batch(make_values(3)))
    assert (first.base_offset, first.last_offset, first.record_count, first.log_start_offset) == (0, 2, 3, 0)
    two = make_batch(make_values(2)) + make_batch(make_values(4), base_offset=77)
    second = log.append(memoryview(two))
    assert (second.base_offset, second.last_offset, second.record_count) == (3, 8, 6)
    assert log.log_end_offset == 9
    piece = log.read(0, 1 << 20)
    assert piece is not None
    assert [o for o, _, _ in decode(piece.read_bytes())] == list(range(9))
    log.close()


def test_invalid_append_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=2000, segment_bytes=5000)
    log.append(make_batch([b"ok"]))
    size = log.size_bytes()
    good = make_batch([b"x"])
    bad = bytearray(good)
    bad[-1] ^= 1
    for records in (good + bytes(bad), good[:-3], b"", good + b"\x00"):
        with pytest.raises(CorruptRecordError):
            log.append(records)
    with pytest.raises(MessageSizeTooLargeError, match="message.max.bytes"):
        log.append(make_batch([b"y" * 3000]))
    with pytest.raises(RecordListTooLargeError, match="log.segment.bytes") as refused:  # Kafka's code, 18
        log.append(b"".join(make_batch([b"z" * 1500]) for _ in range(4)))
    assert _rejection_code(refused.value) == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 1 and log.size_bytes() == size
    assert (log.directory / "00000000000000000000.log").stat().st_size == size
    log.close()


def test_round_trip_across_many_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2048, index_interval_bytes=300)
    values = fill(log, 120, per_batch=3)
    assert log.segment_count() > 10
    assert log.log_end_offset == len(values)
    for base, nxt in zip(log.segment_base_offsets(), log.segment_base_offsets()[1:], strict=False):
        assert base < nxt
    for path in log.directory.glob("*.log"):
        assert path.stat().st_size <= 2048
    # Every offset is readable, starts at the batch holding it, and decodes.
    for offset in range(log.log_end_offset):
        piece = log.read(offset, 1 << 20)
        assert piece is not None and piece.first_offset <= offset
        records = decode(piece.read_bytes())
        assert records[0][0] == piece.first_offset
        by_offset = {o: v for o, _, v in records}
        assert by_offset[offset] == values[offset]
    assert read_all(log) == values
    assert read_all(log, max_bytes=200) == values
    log.close()


def test_slice_stays_within_one_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1024)
    fill(log, 30)
    piece = log.read(0, 1 << 20)
    assert piece is not None
    assert piece.size == (log.directory / "00000000000000000000.log").stat().st_size


def test_index_entries_point_at_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=200)
    fill(log, 60)
    data = (log.directory / "00000000000000000000.log").read_bytes()
    index = (log.directory / "00000000000000000000.index").read_bytes()
    entries = list(struct.iter_unpack(">ii", index))
    assert len(entries) > 10
    for relative, position in entries:
        assert read_header(data, position).last_offset == relative  # one batch per append here
    times = list(struct.iter_unpack(">qi", (log.directory / "00000000000000000000.timeindex").read_bytes()))
    assert times and all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(times, times[1:], strict=False))
    log.close()


def test_read_out_of_range_and_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    assert log.read(9, 100) is None
    with pytest.raises(OffsetOutOfRangeError, match="log end 9"):
        log.read(10, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_read_max_bytes_cuts_last_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    batch_size = read_header((log.directory / "00000000000000000000.log").read_bytes()).size
    piece = log.read(0, batch_size * 2 + 10)
    assert piece is not None and piece.size == batch_size * 2 + 10
    assert [o for o, _, _ in decode(piece.read_bytes())] == list(range(6))  # the partial third is skipped
    log.close()


def test_read_oversized_first_batch_kip74(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(make_values(50, 100)))
    log.append(make_batch([b"small"]))
    piece = log.read(10, 100)
    assert piece is not None and piece.position == 0 and piece.first_offset == 0
    assert piece.size == read_header(piece.read_bytes()).size
    assert len(decode(piece.read_bytes())) == 50
    zero = log.read(0, 0)
    assert zero is not None and zero.size == piece.size
    log.close()


def test_read_mid_batch_offset_starts_at_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 4, per_batch=5)
    piece = log.read(12, 1 << 20)
    assert piece is not None and piece.first_offset == 10
    log.close()


def test_fetch_slice_file_is_usable_for_sendfile(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    piece = log.read(3, 1 << 20)
    assert piece is not None
    piece.file.seek(piece.position)
    assert piece.file.read(piece.size) == piece.read_bytes()
    assert os.pread(piece.file.fileno(), piece.size, piece.position) == piece.read_bytes()
    assert piece.file.mode == "rb"
    log.close()


def test_slice_covers_only_tracked_size(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    tracked = log.size_bytes()
    with open(log.directory / "00000000000000000000.log", "ab") as f:
        f.write(b"half-written batch bytes")
    piece = log.read(0, 1 << 20)
    assert piece is not None and piece.position + piece.size == tracked
    log.close()


def test_roll_by_age(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append(make_batch([b"a"]), now_ms=10_000)
    log.append(make_batch([b"b"]), now_ms=10_900)
    assert log.segment_count() == 1
    log.append(make_batch([b"c"]), now_ms=11_001)
    assert log.segment_base_offsets() == [0, 2]
    log.append(make_batch([b"d"]), now_ms=11_500)
    log.append(make_batch([b"e"]), now_ms=12_002)
    assert log.segment_base_offsets() == [0, 2, 4]
    log.close()


def test_roll_when_index_full(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0, index_max_bytes=24)  # 3 offset / 2 time entries
    fill(log, 10)
    assert log.segment_count() > 2
    for path in log.directory.glob("*.index"):
        assert path.stat().st_size <= 24
    assert read_all(log) == [v for i in range(10) for v in make_values(3, 30, tag=f"b{i}-")]
    log.close()


def test_flush_advances_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.unflushed_messages() == 0 and log.oldest_unflushed_ms() is None
    log.append(make_batch(make_values(4)), now_ms=5000)
    log.append(make_batch(make_values(2)), now_ms=6000)
    assert log.unflushed_messages() == 6 and log.oldest_unflushed_ms() == 5000
    assert log.flush() == 6
    assert log.recovery_point == 6 and log.unflushed_messages() == 0 and log.oldest_unflushed_ms() is None
    assert log.flush() == 6
    log.close()


def test_rolled_segment_needs_flush(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    fill(log, 10)
    assert log.has_unflushed_rolled_segments()
    log.flush()
    assert not log.has_unflushed_rolled_segments()
    log.close()


def test_flush_concurrent_with_appends_and_reads(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4096, index_interval_bytes=256)
    stop = threading.Event()
    points: list[int] = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                points.append(log.flush())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        values = []
        rng = random.Random(5)
        for i in range(400):
            chunk = make_values(rng.randint(1, 5), 40, tag=f"c{i}-")
            log.append(make_batch(chunk))
            values.extend(chunk)
            if i % 7 == 0:
                log.read(rng.randrange(log.log_end_offset), 2000)
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert points == sorted(points) and all(p <= log.log_end_offset for p in points)
    assert log.flush() == log.log_end_offset
    assert read_all(log) == values
    log.close()


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 1)
    log.close()
    log.close()
    with pytest.raises(StorageError, match="closed"):
        log.append(make_batch([b"x"]))
    with pytest.raises(StorageError, match="closed"):
        log.read(0, 10)


def test_reopen_continues_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    values = fill(log, 20)
    end = log.log_end_offset
    log.close()
    reopened = open_log(tmp_path, segment_bytes=1000)
    assert reopened.log_end_offset == end and reopened.recovery_point == end
    assert reopened.append(make_batch([b"next"])).base_offset == end
    assert read_all(reopened) == [*values, b"next"]
    reopened.close()


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    log.delete()
    assert not any(tmp_path.iterdir())


@settings(max_examples=30, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(
                st.just("append"), st.integers(min_value=1, max_value=6), st.integers(min_value=1, max_value=300)
            ),
            st.tuples(st.just("reopen"), st.booleans(), st.integers(min_value=0, max_value=50)),
            st.tuples(st.just("flush"), st.just(0), st.just(0)),
        ),
        min_size=1,
        max_size=25,
    ),
    segment_bytes=st.integers(min_value=300, max_value=3000),
    interval=st.integers(min_value=0, max_value=500),
)
def test_model_based_append_reopen_read(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]], segment_bytes: int, interval: int
) -> None:
    """Whatever the sequence of appends, flushes and (clean or recovering) reopens, the log reads back exactly
    what was appended, from any offset and with any fetch size."""
    directory = tmp_path_factory.mktemp("model")
    config = {"segment_bytes": segment_bytes, "index_interval_bytes": interval}
    log = open_log(directory, **config)
    values: list[bytes | None] = []
    for i, (kind, a, b) in enumerate(steps):
        if kind == "append":
            chunk = make_values(a, min(b, max(1, (segment_bytes - 61) // a - 30)), tag=f"{i}-")
            batch = make_batch(chunk)
            if len(batch) > segment_bytes:
                continue
            assert log.append(batch).base_offset == len(values)
            values.extend(chunk)
        elif kind == "reopen":
            log.close()
            log = open_log(directory, recover=bool(a), recovery_point=min(b, len(values)), **config)
        else:
            assert log.flush() == len(values)
    assert log.log_end_offset == len(values)
    assert read_all(log) == values
    assert read_all(log, max_bytes=1) == values
    for offset in range(0, len(values), 7):
        piece = log.read(offset, 500)
        assert piece is not None and piece.first_offset <= offset
    log.close()


def test_flush_concurrent_with_rolls_and_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2048, retention_bytes=8192, retention_ms=-1, segment_delete_delay_ms=0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=flusher)
    thread.start()
    values: list[bytes] = []
    try:
        for i in range(300):
            chunk = make_values(3, 40, tag=f"r{i}-")
            log.append(make_batch(chunk), now_ms=i)
            values.extend(chunk)
            if i % 10 == 0:
                log.delete_old_segments(now_ms=i)
    finally:
        stop.set()
        thread.join()
    assert not errors
    log.delete_old_segments(now_ms=10_000)
    log.delete_old_segments(now_ms=10_001)
    assert log.log_start_offset > 0
    assert read_all(log) == values[log.log_start_offset :]
    assert not list(log.directory.glob("*.deleted"))
    assert log.flush() == log.log_end_offset
    log.close()
