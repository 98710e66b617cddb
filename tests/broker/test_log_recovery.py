"""Loading and recovering logs after clean and unclean shutdowns (after Kafka's LogSegmentTest and
LogLoaderTest)."""

from __future__ import annotations

import logging
import os
import random
import struct
from pathlib import Path

import pytest

from metaq.broker.log import segment as segment_module
from metaq.broker.log import segment_recovery as segment_recovery_module
from tests.broker import decode, make_batch, make_values
from tests.broker.log_helpers import assert_fully_readable, batch_positions, fill, open_log

SEG0 = "00000000000000000000"


def test_recovery_with_corrupt_message(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryWithCorruptMessage: garbage from a random point in a random batch;
    recovery keeps exactly the valid prefix."""
    rng = random.Random(42)
    for round_ in range(10):
        directory = tmp_path / f"round{round_}"
        log = open_log(directory, recover=False)
        fill(log, 100, rng)
        log.close()
        path = directory / "t-0" / f"{SEG0}.log"
        batches = batch_positions(path)
        position, base_offset, size = rng.choice(batches)
        garbage_from = position + rng.randrange(size)
        with open(path, "r+b") as f:
            f.seek(garbage_from)
            f.write(rng.randbytes(path.stat().st_size - garbage_from))
        recovered = open_log(directory, recover=True)
        assert recovered.log_end_offset == base_offset
        assert recovered.size_bytes() == position == path.stat().st_size
        assert_fully_readable(recovered)
        assert recovered.append(make_batch([b"after"])).base_offset == base_offset
        recovered.close()


def test_recovery_logs_the_byte_offset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(tmp_path, recover=False)
    fill(log, 5)
    log.close()
    path = tmp_path / "t-0" / f"{SEG0}.log"
    valid = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)
    with caplog.at_level(logging.WARNING):
        open_log(tmp_path, recover=True).close()
    assert f"Found invalid messages in {path} at byte offset {valid}" in caplog.text


@pytest.mark.parametrize("recover", [True, False])
def test_corrupt_log_tail_and_index(tmp_path: Path, recover: bool) -> None:
    """LogLoaderTest.testCorruptLog: 1-1024 random bytes after the log and its index; the log end offset is
    unchanged after loading (with recovery, or with trusted files whose sanity check fails)."""
    rng = random.Random(7)
    for round_ in range(8):
        directory = tmp_path / f"r{round_}"
        log = open_log(directory, recover=False, segment_bytes=3000)
        fill(log, 60, rng)
        end = log.log_end_offset
        last_base = log.segment_base_offsets()[-1]
        log.close()
        stem = directory / "t-0" / f"{last_base:020d}"
        for suffix in (".log", ".index"):
            with open(f"{stem}{suffix}", "ab") as f:
                f.write(rng.randbytes(rng.randint(1, 1024)))
        reopened = open_log(directory, recover=recover, segment_bytes=3000)
        assert reopened.log_end_offset == end
        assert os.path.getsize(f"{stem}.index") % 8 == 0
        assert_fully_readable(reopened)
        reopened.close()


@pytest.mark.parametrize("recover", [True, False])
def test_corrupt_index_rebuilt(tmp_path: Path, recover: bool) -> None:
    """testCorruptIndexRebuild: junk over both indexes; every offset and timestamp lookup still works."""
    log = open_log(tmp_path, recover=False, segment_bytes=4000)
    fill(log, 80)
    end = log.log_end_offset
    log.close()
    rng = random.Random(9)
    for path in (tmp_path / "t-0").glob("*index"):
        path.write_bytes(rng.randbytes(path.stat().st_size or 24))
    reopened = open_log(tmp_path, recover=recover, segment_bytes=4000)
    assert reopened.log_end_offset == end
    assert_fully_readable(reopened)
    for path in (tmp_path / "t-0").glob("*.index"):
        entries = list(struct.iter_unpack(">ii", path.read_bytes()))
        assert entries == sorted(entries)
    reopened.close()


def test_plausible_but_wrong_index_entries_rebuilt(tmp_path: Path) -> None:
    """An index that is well-formed but points past the log end (e.g. the log lost its tail)."""
    log = open_log(tmp_path, recover=False)
    fill(log, 50)
    log.close()
    path = tmp_path / "t-0" / f"{SEG0}.index"
    path.write_bytes(path.read_bytes() + struct.pack(">ii", 10_000, 10**6))
    reopened = open_log(tmp_path, recover=False)
    assert_fully_readable(reopened)
    reopened.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_missing_or_truncated_index_rebuilt(tmp_path: Path, suffix: str) -> None:
    log = open_log(tmp_path, recover=False)
    fill(log, 60)
    log.close()
    path = tmp_path / "t-0" / f"{SEG0}{suffix}"
    original = path.read_bytes()
    assert len(original) > 24
    path.unlink()
    reopened = open_log(tmp_path, recover=False)
    assert path.read_bytes() == original
    assert_fully_readable(reopened)
    reopened.close()
    path.write_bytes(original[:-5])
    reopened = open_log(tmp_path, recover=False)
    assert path.read_bytes() == original
    reopened.close()
    path.write_bytes(b"")
    reopened = open_log(tmp_path, recover=False)
    if suffix == ".index":
        assert path.read_bytes() == original  # an empty offset index for a big log is rebuilt
    assert_fully_readable(reopened)
    reopened.close()


def test_housekeeping(tmp_path: Path) -> None:
    """Orphan indexes and leftover .deleted/.cleaned files are removed; unrelated files are kept (a .swap file
    is completed, not removed: tests/broker/test_log_cleaner.py)."""
    log = open_log(tmp_path, recover=False)
    fill(log, 3)
    end = log.log_end_offset
    log.close()
    directory = tmp_path / "t-0"
    names = [
        "00000000000000000500.index",
        "00000000000000000500.timeindex",
        "00000000000000000100.log.deleted",
        "00000000000000000100.index.deleted",
        "00000000000000000200.log.cleaned",
    ]
    for name in names:
        (directory / name).write_bytes(b"\x00" * 16)
    (directory / "leader-epoch-checkpoint").write_text("0\n0\n")
    (directory / "notes.log").write_text("not a segment")
    reopened = open_log(tmp_path, recover=True)
    assert sorted(p.name for p in directory.iterdir()) == [
        f"{SEG0}.index",
        f"{SEG0}.log",
        f"{SEG0}.timeindex",
        f"{end:020d}.snapshot",  # producer state written at the clean close
        "leader-epoch-checkpoint",
        "notes.log",
    ]
    assert reopened.log_end_offset == end
    reopened.close()


def test_corrupt_batch_in_middle_segment_keeps_later_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Acknowledged data of an earlier segment is corrupt (as after a power failure): the earlier segment is
    cut there, the lost offsets are reported, and the later segments (valid, acknowledged) are kept, so no
    offset is ever handed out twice (see segment_loading.load_segments)."""
    log = open_log(tmp_path, recover=False, segment_bytes=2000)
    fill(log, 60)
    bases = log.segment_base_offsets()
    end = log.log_end_offset
    assert len(bases) >= 4
    log.close()
    victim = tmp_path / "t-0" / f"{bases[1]:020d}.log"
    position, base_offset, _ = batch_positions(victim)[3]
    with open(victim, "r+b") as f:
        f.seek(position + 20)
        f.write(b"\xff" * 8)
    with caplog.at_level(logging.WARNING):
        reopened = open_log(tmp_path, recover=True)
    assert reopened.segment_base_offsets() == bases
    assert reopened.log_end_offset == end
    assert victim.stat().st_size == position
    assert f"Offsets {base_offset}..{bases[2] - 1} of {tmp_path / 't-0'} are lost" in caplog.text
    piece = reopened.read(base_offset, 1 << 20)  # a read in the gap is answered from the next segment
    assert piece is not None and piece.first_offset == bases[2]
    for offset in [*range(bases[0], base_offset), *range(bases[2], end)]:
        piece = reopened.read(offset, 1 << 20)
        assert piece is not None and offset in {o for o, _, _ in decode(piece.read_bytes())}
    assert reopened.append(make_batch([b"after"])).base_offset == end
    reopened.close()


def test_out_of_order_offsets_are_invalid(tmp_path: Path) -> None:
    log = open_log(tmp_path, recover=False)
    fill(log, 5)
    log.close()
    path = tmp_path / "t-0" / f"{SEG0}.log"
    data = path.read_bytes()
    first = batch_positions(path)[0]
    path.write_bytes(data + data[: first[2]])  # a copy of batch 0 (offsets already used) at the end
    reopened = open_log(tmp_path, recover=True)
    assert reopened.size_bytes() == len(data)
    reopened.close()


def test_only_segments_from_recovery_point_are_recovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path, recover=False, segment_bytes=2000)
    fill(log, 60)
    bases = log.segment_base_offsets()
    log.close()
    recovered: list[int] = []
    original = segment_module.LogSegment.recover

    def spy(self: segment_module.LogSegment, end_limit: int | None = None) -> int:
        recovered.append(self.base_offset)
        return original(self, end_limit)

    monkeypatch.setattr(segment_module.LogSegment, "recover", spy)
    reopened = open_log(tmp_path, recover=True, recovery_point=bases[2] + 1)
    assert recovered == bases[2:]
    assert reopened.recovery_point == bases[2] + 1
    reopened.close()
    recovered.clear()
    open_log(tmp_path, recover=False).close()
    assert recovered == []


def test_empty_directory_with_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, recover=True, recovery_point=42)
    assert log.log_start_offset == log.log_end_offset == 42
    assert log.append(make_batch([b"x"])).base_offset == 42
    log.close()


def test_large_batches_recovered_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches larger than the scan chunk, and chunk boundaries inside batches, are handled."""
    monkeypatch.setattr(segment_recovery_module, "_SCAN_CHUNK", 1000)
    log = open_log(tmp_path, recover=False)
    spans = []
    for i in range(20):
        n = 1 + (i * 7) % 40
        spans.append(log.append(make_batch(make_values(n, 100, tag=f"{i}-"))).last_offset)
    log.close()
    path = tmp_path / "t-0" / f"{SEG0}.log"
    with open(path, "ab") as f:
        f.write(make_batch([b"cut"])[:-2])
    reopened = open_log(tmp_path, recover=True)
    assert reopened.log_end_offset == spans[-1] + 1
    assert_fully_readable(reopened)
    reopened.close()


def test_few_large_batches_load_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A segment of one large batch legitimately has an empty offset index: no warning, same answers."""
    log = open_log(tmp_path, recover=False)
    log.append(make_batch(make_values(100, 100)))
    end = log.log_end_offset
    log.close()
    assert (tmp_path / "t-0" / f"{SEG0}.index").read_bytes() == b""
    with caplog.at_level(logging.WARNING):
        reopened = open_log(tmp_path, recover=False)
    assert not caplog.records
    assert reopened.log_end_offset == end
    assert_fully_readable(reopened)
    reopened.close()


def test_stray_index_file_is_reset_on_segment_creation(tmp_path: Path) -> None:
    log = open_log(tmp_path, recover=False, segment_bytes=500)
    log.append(make_batch(make_values(3, 100)))
    stray = tmp_path / "t-0" / "00000000000000000003.index"
    stray.write_bytes(struct.pack(">ii", 50, 9999))
    log.append(make_batch(make_values(3, 100)))  # rolls: creates segment 3
    assert log.segment_base_offsets() == [0, 3]
    assert stray.read_bytes() == b""
    log.close()
