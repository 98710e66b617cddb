"""bench.scale's ZooKeeper offsets rows: fence and commit at scale."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.scale_settings import (
    TOPIC_PARTITIONS,
)
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.errors import MetaqError
from zk_layout import ZkLayout

# -- offsets: fence and commit ----------------------------------------------------------------------------------


@dataclass
class OffsetRow:
    what: str
    partitions: int
    seconds: float
    cpu_s: float
    error: str = ""

    def cells(self) -> list[str]:
        if self.error:
            return [self.what, f"{self.partitions:,}", f"failed: {self.error}", "", ""]
        return [self.what, f"{self.partitions:,}", f"{self.seconds * 1000:.0f}",
                f"{self.seconds / self.partitions * 1000:.3f}", f"{self.cpu_s * 1000:.0f}"]


OFFSET_HEADER = ["ZooKeeper offsets", "partitions", "ms", "ms/partition", "CPU ms"]


def measure_offsets(layout: ZkLayout, partitions: int, rep: int) -> list[OffsetRow]:
    """Fence (take_ownership, nodes missing: a new group) and re-fence (nodes present: the next owner),
    then commit every offset changed; the first store must then be fenced out. A step that fails is
    reported as such and ends the measurement."""
    group = f"scale-offsets-{partitions}-{rep}-{os.getpid()}"
    keys = [(f"scale-offsets-{i // TOPIC_PARTITIONS}", i % TOPIC_PARTITIONS) for i in range(partitions)]
    rows: list[OffsetRow] = []

    def timed(what: str, fn: Callable[[], object]) -> None:
        cpu0, t0 = time.process_time(), time.perf_counter()
        fn()
        rows.append(OffsetRow(what, partitions, time.perf_counter() - t0, time.process_time() - cpu0))

    first = ZooKeeperOffsetStore(layout, group)
    second = ZooKeeperOffsetStore(layout, group)
    steps: list[tuple[str, Callable[[], object]]] = [
        ("fence at claim (new group: nodes created)", lambda: first.take_ownership(keys)),
        ("commit, all changed", lambda: first.commit({key: 1000 + i for i, key in enumerate(keys)})),
        ("fence at claim (taking over: nodes exist)", lambda: second.take_ownership(keys)),
        ("commit, all changed", lambda: second.commit({key: 2000 + i for i, key in enumerate(keys)})),
    ]
    for what, step in steps:
        try:
            timed(what, step)
        except MetaqError as e:
            rows.append(OffsetRow(what, partitions, 0.0, 0.0, type(e.__cause__ or e).__name__))
            return rows
    quiet = logging.getLogger("metaq.consumer.offset_store")
    level, quiet.level = quiet.level, logging.ERROR  # one "fenced" warning per partition is expected here
    try:
        fenced_out = first.commit(dict.fromkeys(keys, 10**9)).lost  # an offset neither store committed
    finally:
        quiet.setLevel(level)
    if fenced_out != set(keys):
        raise RuntimeError(f"the fenced-out store could still commit: {len(fenced_out)} of {len(keys)} refused")
    if layout.read_offset(group, *keys[-1]) != 2000 + partitions - 1:
        raise RuntimeError("the offsets read back differ from the last commit")
    return rows
