"""Log cleaner speed on real segment files: ``keys`` keys written ``versions`` times (values of ``--size`` bytes,
``--per-batch`` records a batch, uncompressed), then cleaned in one pass with a map big enough for every key, or in
several with ``--map-bytes``. Reports MB/s and records/s of wall and CPU time and CPU seconds per GB cleaned, with the
peak RSS (the machine may be shared: CPU time is the figure to compare). The comparison with Apache Kafka's cleaner
is ``python -m bench --only cleaner`` (bench/cleaner.py).

    python -m bench.compaction [--keys 20000] [--versions 10] [--size 100] [--per-batch 10] [--map-bytes N]

``--memory``: the memory bound (docs/compaction.md, "Memory"): ``--keys`` (default 10,000,000) distinct keys written
``--versions`` times (default 1) straight into segment files, then cleaned with a ``--map-bytes`` (default 16 MiB)
offset map in a process of its own that reports its peak resident size before and after
(metaq/testing/cleaner_memory.py; integration_tests/test_log_cleaner_memory.py runs it scaled down by 400).

    python -m bench.compaction --memory [--keys 10000000] [--map-bytes 16777216]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from metaq.broker.log.cleaner.cleaner import Cleaner, log_end_offset
from metaq.broker.log.cleaner.offset_map import OffsetMap
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.protocol.builder import PyBatchBuilder
from metaq.testing.cleaner_memory import write_log


def _direct(fn: Any) -> Any:
    return fn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=None, help="default 20,000; --memory 10,000,000")
    parser.add_argument("--versions", type=int, default=None, help="default 10; --memory 1")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--per-batch", type=int, default=10)
    parser.add_argument("--map-bytes", type=int, default=None)
    parser.add_argument("--memory", action="store_true", help="the memory bound instead (module doc)")
    args = parser.parse_args()
    if args.memory:
        memory(args.keys or 10_000_000, args.versions or 1, args.size, args.map_bytes or 16 << 20)
        return
    args.keys, args.versions = args.keys or 20000, args.versions or 10
    with tempfile.TemporaryDirectory() as directory:
        config = LogConfig(segment_bytes=64 << 20, cleanup_policy=("compact",))
        log = PartitionLog.open(Path(directory) / "bench-0", "bench", 0, config, recover=False)
        value = b"v" * args.size
        records = args.keys * args.versions
        builder = PyBatchBuilder(1 << 20)
        for i in range(records):
            builder.append(1_700_000_000_000, f"key-{i % args.keys:08d}".encode(), value)
            if builder.count == args.per_batch:
                log.append(builder.build())
                builder = PyBatchBuilder(1 << 20)
        if builder.count:
            log.append(builder.build())
        log.roll("bench")
        size = log.size_bytes()
        map_bytes = args.map_bytes or max(1 << 20, args.keys * 24 * 2)
        cleaner = Cleaner(OffsetMap(map_bytes), _direct, log_end_offset)
        wall, cpu = time.perf_counter(), time.process_time()
        first_dirty, passes, kept = 0, 0, 0
        while first_dirty < log.log_end_offset:
            result = cleaner.clean(log, first_dirty, 1_700_000_000_000)
            first_dirty, passes, kept = result.end_offset, passes + 1, result.records_kept
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        log.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{records} records ({size / 1e6:.1f} MB) -> {kept} kept, {passes} pass(es), map {map_bytes} bytes")
    print(f"wall {wall:.2f} s: {size / 1e6 / wall:.1f} MB/s, {records / wall:,.0f} records/s")
    print(f"cpu  {cpu:.2f} s: {size / 1e6 / cpu:.1f} MB/s, {records / cpu:,.0f} records/s, "
          f"{cpu / (size / 1e9):.0f} CPU s per GB; peak RSS {rss_mb:.0f} MB")


def memory(keys: int, versions: int, size: int, map_bytes: int) -> None:
    """Write the log here, clean it in a child process, print its figures (module doc)."""
    with tempfile.TemporaryDirectory() as directory:
        wall = time.perf_counter()
        log_bytes = write_log(Path(directory), keys, versions=versions, value_size=size, block=1000)
        print(f"wrote {keys:,} keys x {versions} ({log_bytes / 1e6:,.1f} MB) in {time.perf_counter() - wall:,.0f} s; "
              f"cleaning with a {map_bytes:,}-byte map (load average {os.getloadavg()[0]:.1f})", flush=True)
        done = subprocess.run([sys.executable, "-m", "metaq.testing.cleaner_memory", directory, str(map_bytes)],
                              capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout)
    growth = figures["peak_hwm_kib"] - figures["baseline_hwm_kib"]
    print(f"{figures['passes']} passes of at most {figures['map_entries']:,} keys; {figures['records_read']:,} records "
          f"({figures['bytes_read'] / 1e6:,.0f} MB) read over all passes, {figures['records_kept']:,} kept; "
          f"wall {figures['wall_s']:,.0f} s, CPU {figures['cpu_s']:,.0f} s")
    print(f"peak resident size: {figures['baseline_hwm_kib']:,} KiB after opening the log, "
          f"{figures['peak_hwm_kib']:,} KiB after cleaning: +{growth:,} KiB for a {map_bytes // 1024:,} KiB map "
          f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
