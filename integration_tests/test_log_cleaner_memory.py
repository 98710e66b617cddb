"""The log cleaner's memory stays within its dedupe buffer whatever the number of keys (docs/compaction.md,
"Memory").

The claim is for 10M distinct keys and a 16 MiB ``log.cleaner.dedupe.buffer.size``: 16 passes of 629,145 keys each
(24-byte slots, 90% load). Writing and cleaning 10M keys takes minutes in Python, so this test keeps the ratio and
scales both down by 400: 25,000 keys, a 41,943-byte map, the same 16 passes (the 10M-key run itself is
``python -m bench.compaction --memory``; its figures are in docs/compaction.md). A map that held every key (a dict)
would need about 3 MiB for 25,000 keys (tracemalloc: 16-byte digests to ints), well above the bound asserted here.

The log is written straight into segment files with metaq's own log code (no broker); the cleaning runs in a
process of its own (``python -m metaq.testing.cleaner_memory``), which reads its peak resident size (``VmHWM``)
after opening the log and again after the last pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from metaq.broker.log.cleaner.offset_map import ENTRY_SIZE
from metaq.testing.cleaner_memory import key_of, latest_values, value_of, write_log

FULL_KEYS = 10_000_000
FULL_BUFFER = 16 << 20
SCALE = 400
KEYS = FULL_KEYS // SCALE
MAP_BYTES = FULL_BUFFER // SCALE
VERSIONS = 2
VALUE_SIZE = 100
OVERHEAD_KIB = 1024
"""What cleaning may take beyond the map: a batch being filtered and rewritten, the cleaned segment's in-memory
index, the allocator's slack (measured: under 100 KiB)."""


def test_cleaning_many_keys_stays_within_the_dedupe_buffer(tmp_path: Path) -> None:
    log_bytes = write_log(tmp_path, KEYS, versions=VERSIONS, value_size=VALUE_SIZE)

    done = subprocess.run([sys.executable, "-m", "metaq.testing.cleaner_memory", str(tmp_path), str(MAP_BYTES)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)

    map_entries = figures["map_entries"]
    assert map_entries == int(MAP_BYTES // ENTRY_SIZE * 0.9)
    assert figures["passes"] >= KEYS // map_entries  # the map never held more than its share of the keys
    assert figures["log_bytes"] == log_bytes
    growth_kib = figures["peak_hwm_kib"] - figures["baseline_hwm_kib"]
    assert growth_kib <= MAP_BYTES // 1024 + OVERHEAD_KIB, figures
    print(f"peak resident size grew by {growth_kib} KiB over {figures['passes']} passes")

    found = latest_values(tmp_path)
    assert len(found) == KEYS
    assert figures["records_kept"] == KEYS
    for key in range(0, KEYS, 97):
        assert found[key_of(key)] == [value_of(key, VERSIONS - 1, VALUE_SIZE)], key
    assert all(len(values) == 1 for values in found.values())
