"""Offset and time indexes: file format, in-memory lookups, sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

from metaq.broker.log.index import OffsetIndex, TimeIndex


def test_offset_index_format_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1 << 20)
    index.append(110, 4000)
    index.append(125, 9000)
    index.append(125, 9500)  # not beyond the last entry: ignored
    index.append(120, 9600)  # going backwards: ignored
    assert path.read_bytes() == struct.pack(">iiii", 10, 4000, 25, 9000)
    assert len(index) == 2
    assert index.lookup(99) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4000)
    assert index.lookup(124) == (110, 4000)
    assert index.lookup(10_000) == (125, 9000)
    assert index.last_entry == (125, 9000)
    index.close_file()

    reloaded = OffsetIndex(path, 100, 1 << 20)
    assert reloaded.load(log_size=10_000) is None
    assert reloaded.lookup(130) == (125, 9000)
    reloaded.append(140, 9999)  # reopens the descriptor lazily
    assert len(path.read_bytes()) == 24
    reloaded.reset()
    assert path.read_bytes() == b"" and len(reloaded) == 0 and reloaded.lookup(140) == (100, 0)
    reloaded.close_file()


def test_offset_index_full(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 20)  # room for 2 entries
    for i in range(1, 5):
        index.append(i, i * 100)
    assert len(index) == 2 and index.is_full
    assert (tmp_path / "0.index").stat().st_size == 16
    index.close_file()


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def test_offset_index_sanity_checks(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0, 1 << 20)
    assert index.load(100) == "missing"
    _write(path, struct.pack(">ii", 1, 10) + b"\x00\x01")
    assert "multiple of 8" in (index.load(100) or "")
    _write(path, struct.pack(">iiii", 5, 10, 3, 20))
    assert "offset 3 does not follow 5" in (index.load(100) or "")
    _write(path, struct.pack(">iiii", 1, 50, 3, 20))
    assert "position 20 does not follow 50" in (index.load(100) or "")
    _write(path, struct.pack(">ii", 1, 500))
    assert "outside the log" in (index.load(100) or "")
    _write(path, struct.pack(">ii", -1, 5))
    assert "negative" in (index.load(100) or "")
    assert len(index) == 0  # a failed load leaves nothing half-loaded
    _write(path, b"")
    assert index.load(0) is None


def test_time_index_format_lookup_and_monotonicity(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 1 << 20)
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 57)  # same timestamp: ignored
    index.maybe_append(900, 58)  # smaller: ignored
    index.maybe_append(-1, 59)  # no timestamp: ignored
    index.maybe_append(2000, 60)
    assert path.read_bytes() == struct.pack(">qiqi", 1000, 5, 2000, 10)
    assert index.lookup(999) == 50
    assert index.lookup(1000) == 55
    assert index.lookup(1999) == 55
    assert index.lookup(5000) == 60
    assert index.last_entry == (2000, 60)
    index.close_file()
    reloaded = TimeIndex(path, 50, 1 << 20)
    assert reloaded.load() is None and reloaded.lookup(2000) == 60
    assert TimeIndex(tmp_path / "none", 0, 100).last_entry is None


def test_time_index_sanity_checks(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    index = TimeIndex(path, 0, 1 << 20)
    assert index.load() == "missing"
    _write(path, struct.pack(">qi", 5, 1) + b"\x00")
    assert "multiple of 12" in (index.load() or "")
    _write(path, struct.pack(">qiqi", 5, 1, 4, 2))
    assert "timestamp 4 does not follow 5" in (index.load() or "")
    _write(path, struct.pack(">qiqi", 5, 3, 6, 2))
    assert "offset 2 does not follow 3" in (index.load() or "")


def test_time_index_full(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t", 0, 30)  # 2 entries of 12 bytes
    for i in range(5):
        index.maybe_append(100 + i, i)
    assert len(index) == 2 and index.is_full
    index.close_file()
