"""The log cleaner's memory bound, measured in a process of its own (integration_tests/test_log_cleaner_memory.py,
``python -m bench.compaction --memory``; docs/compaction.md, "Memory").

:func:`write_log` writes a compacted log of ``keys`` distinct keys straight into segment files with metaq's own
log code (no broker, no network), in blocks of ``block`` keys each written ``versions`` times in a row, so that every
key's last version follows its first closely and the log shrinks by ``1 - 1/versions`` once cleaned.
:func:`clean` (run as ``python -m metaq.testing.cleaner_memory <dir> <map bytes>`` so that nothing else shares its
peak) opens that log, reads its peak resident size (``VmHWM``) as the baseline, cleans it pass after pass with an
offset map of ``map_bytes`` until nothing is dirty, and prints the peak again with the figures as one JSON line.
:func:`latest_values` reads a log back, key by key.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from metaq.broker.log.cleaner.cleaner import Cleaner, log_end_offset
from metaq.broker.log.cleaner.offset_map import OffsetMap
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.protocol.batches import iter_valid_batches
from metaq.protocol.builder import CompiledBatchBuilder, PyBatchBuilder
from metaq.protocol.records import decode_records

__all__ = ["TOPIC", "CleanFigures", "clean", "latest_values", "value_of", "vm_kib", "write_log"]

T = TypeVar("T")

TOPIC = "cleaner-memory"
TIMESTAMP = 1_700_000_000_000
"""Every record's timestamp (no ``min.compaction.lag.ms``, no retention: it only has to be fixed)."""


def log_config(segment_bytes: int) -> LogConfig:
    """Compact only, and cleaned segments' predecessors removed at once (this log has no readers) so that the
    disk does not hold a copy per pass."""
    return LogConfig(segment_bytes=segment_bytes, cleanup_policy=("compact",), segment_delete_delay_ms=0)


def value_of(key: int, version: int, size: int) -> bytes:
    """The value of ``key``'s ``version``: says which it is, padded to ``size`` bytes."""
    head = f"{key}:{version}:".encode()
    return head + b"v" * max(0, size - len(head))


def key_of(key: int) -> bytes:
    return f"key-{key:09d}".encode()


def _builder() -> PyBatchBuilder | CompiledBatchBuilder:
    try:
        return CompiledBatchBuilder(1 << 20)
    except AssertionError:  # aiokafka's compiled builder is missing: the pure Python one writes the same bytes
        return PyBatchBuilder(1 << 20)


def write_log(directory: Path, keys: int, *, versions: int = 2, value_size: int = 100, block: int = 100,
              per_batch: int = 100, segment_bytes: int = 64 << 20) -> int:
    """Write the log (see the module doc) into ``directory`` (its partition directory is created there); return
    its size in bytes. The active segment is rolled, so that everything is cleanable."""
    log = PartitionLog.open(directory / f"{TOPIC}-0", TOPIC, 0, log_config(segment_bytes), recover=False)
    try:
        builder = _builder()
        for first in range(0, keys, block):
            for version in range(versions):
                for key in range(first, min(first + block, keys)):
                    builder.append(TIMESTAMP, key_of(key), value_of(key, version, value_size))
                    if builder.count == per_batch:
                        log.append(builder.build())
                        builder = _builder()
        if builder.count:
            log.append(builder.build())
        log.roll("cleaner-memory")
        return log.size_bytes()
    finally:
        log.close()


def vm_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmHWM``: the peak resident size so far; ``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(f"{field} is not in /proc/self/status")


@dataclass(frozen=True)
class CleanFigures:
    """One cleaning to the end: the peak resident KiB before (log open, modules loaded) and after, the map's
    bytes and entries per pass, passes, bytes and records read over all passes, records kept by the last pass,
    wall and CPU seconds."""

    baseline_hwm_kib: int
    peak_hwm_kib: int
    map_bytes: int
    map_entries: int
    passes: int
    log_bytes: int
    bytes_read: int
    records_read: int
    records_kept: int
    wall_s: float
    cpu_s: float

    @property
    def growth_kib(self) -> int:
        return self.peak_hwm_kib - self.baseline_hwm_kib


def clean(directory: Path, map_bytes: int, segment_bytes: int = 64 << 20) -> CleanFigures:
    """Clean the log :func:`write_log` wrote in ``directory`` until its first dirty offset reaches its end."""
    log = PartitionLog.open(directory / f"{TOPIC}-0", TOPIC, 0, log_config(segment_bytes), recover=False)
    try:
        log_bytes = log.size_bytes()
        baseline = vm_kib("VmHWM")
        offset_map = OffsetMap(map_bytes)
        cleaner = Cleaner(offset_map, _direct, log_end_offset)
        wall, cpu = time.perf_counter(), time.process_time()
        first_dirty, passes, bytes_read, records_read, kept = 0, 0, 0, 0, 0
        while first_dirty < log.log_end_offset:
            result = cleaner.clean(log, first_dirty, TIMESTAMP)
            log.delete_old_segments(TIMESTAMP)  # the replaced segments' files go now (segment.delete.delay.ms 0)
            first_dirty, passes = result.end_offset, passes + 1
            bytes_read, records_read, kept = (bytes_read + result.bytes_read, records_read + result.records_read,
                                              result.records_kept)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return CleanFigures(baseline, vm_kib("VmHWM"), map_bytes, offset_map.max_entries, passes, log_bytes,
                            bytes_read, records_read, kept, wall, cpu)
    finally:
        log.close()


def _direct(fn: Callable[[], T]) -> T:
    """The cleaner's ``on_loop`` without an event loop: this process is the only user of the log."""
    return fn()


def _batches(log: PartitionLog) -> Iterator[bytes]:
    """Every whole batch of the log, as a fetch reads them."""
    offset = log.log_start_offset
    while (fetched := log.read(offset, 1 << 20)) is not None:
        data, start = fetched.read_bytes(), offset
        for position, header in iter_valid_batches(data):
            yield data[position:position + header.size]
            offset = header.next_offset
        if offset == start:
            raise AssertionError(f"no whole batch at offset {offset}")


def latest_values(directory: Path, segment_bytes: int = 64 << 20) -> dict[bytes, list[bytes | None]]:
    """Every key of the log with the values it holds for it, in offset order (one each once cleaned)."""
    log = PartitionLog.open(directory / f"{TOPIC}-0", TOPIC, 0, log_config(segment_bytes), recover=False)
    found: dict[bytes, list[bytes | None]] = {}
    try:
        for raw in _batches(log):
            for _, _, key, value, _ in decode_records(raw).records:
                assert key is not None
                found.setdefault(key, []).append(value)
    finally:
        log.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="Clean a log written by write_log; print the figures as JSON.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("map_bytes", type=int)
    parser.add_argument("--segment-bytes", type=int, default=64 << 20)
    args = parser.parse_args()
    figures = clean(args.directory, args.map_bytes, args.segment_bytes)
    print(json.dumps({**asdict(figures), "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    main()
