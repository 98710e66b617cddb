"""Opening, filling and checking a PartitionLog in a directory, for the log recovery and full-disk tests."""

from __future__ import annotations

import random
from pathlib import Path

from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.protocol.batches import read_header
from tests.broker import decode, make_batch, make_values


def open_log(directory: Path, *, recover: bool, recovery_point: int = 0, **config: int) -> PartitionLog:
    defaults = {"segment_bytes": 100_000, "index_interval_bytes": 200}
    return PartitionLog.open(
        directory / "t-0", "t", 0, LogConfig(**(defaults | config)), recover=recover, recovery_point=recovery_point
    )


def fill(log: PartitionLog, batches: int, rng: random.Random | None = None) -> list[tuple[int, int]]:
    """Append batches of 1-5 records; return ``(position-independent) [(base, last)]`` per batch."""
    rng = rng or random.Random(1)
    spans = []
    for i in range(batches):
        n = rng.randint(1, 5)
        result = log.append(make_batch(make_values(n, 25, tag=f"{i}-"), base_ts=1000 + 10 * i))
        spans.append((result.base_offset, result.last_offset))
    return spans


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """``(position, base_offset, size)`` of every batch of a .log file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        header = read_header(data, pos)
        out.append((pos, header.base_offset, header.size))
        pos += header.size
    return out


def assert_fully_readable(log: PartitionLog) -> None:
    """Every offset of the log reads back, and every timestamp lookup agrees with brute force."""
    records: list[tuple[int, int]] = []
    for offset in range(log.log_start_offset, log.log_end_offset):
        piece = log.read(offset, 1 << 20)
        assert piece is not None and piece.first_offset <= offset
        decoded = decode(piece.read_bytes())
        assert offset in {o for o, _, _ in decoded}
        records.extend((o, ts) for o, ts, _ in decoded if o == offset)
    for target in {ts for _, ts in records} | {0, 10**15}:
        want = next(((o, ts) for o, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == want
