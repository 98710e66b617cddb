"""Log cleaner speed on real segment files: ``keys`` keys written ``versions`` times (values of ``--size`` bytes,
``--per-batch`` records a batch, uncompressed), then cleaned in one pass with a map big enough for every key, or in
several with ``--map-bytes``. Reports MB/s and records/s of wall and CPU time and CPU seconds per GB cleaned, with the
peak RSS (the machine may be shared: CPU time is the figure to compare). No Kafka comparison yet (docs/compaction.md).

    python -m bench.compaction [--keys 20000] [--versions 10] [--size 100] [--per-batch 10] [--map-bytes N]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from metaq.broker.log.cleaner.cleaner import Cleaner, log_end_offset
from metaq.broker.log.cleaner.offset_map import OffsetMap
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.protocol.builder import PyBatchBuilder


def _direct(fn: Any) -> Any:
    return fn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=20000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--per-batch", type=int, default=10)
    parser.add_argument("--map-bytes", type=int, default=None)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
