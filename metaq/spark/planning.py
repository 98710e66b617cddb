"""From offsets to Spark tasks: where reading starts and ends, and the ranges each task reads.

    start = resolve_start(options.starting, keys, committed=..., earliest=..., latest=..., ...)
    ranges = plan_ranges(start, end, leader_of, min_partitions=8)   # [OffsetRange(...), ...]
    tasks = pack_ranges(ranges, max_partitions=4)                     # [RangeTask(ranges=(...)), ...]

Everything here is a pure function of its arguments, so the same (start, end) always gives the same tasks:
Spark re-plans a micro-batch after a restart and expects the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from pyspark.sql.datasource import InputPartition

from metaq.client.cluster import Leader
from metaq.errors import ConfigError, DataLossError
from metaq.spark.cluster import Cluster
from metaq.spark.offset_ranges import EARLIEST, LATEST, Offsets, TopicPartition
from metaq.spark.options import OffsetSpec, ReadOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one partition, read from the leader known at planning
    (an executor looks the leader up again in ZooKeeper only if that one refuses).

    ``from_earliest``: the partition appeared after the stream started, so ``start`` is 0 and whatever
    retention deleted below the log start is skipped without counting as data loss."""

    topic: str
    partition: int
    start: int
    end: int
    leader_host: str | None = None
    leader_port: int = -1
    from_earliest: bool = False

    @property
    def key(self) -> TopicPartition:
        return self.topic, self.partition

    def describe(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


@dataclass(frozen=True)
class RangeTask(InputPartition):
    """The ranges one Spark task reads, one after the other. Several ranges share a task when
    ``maxPartitions`` asks for fewer tasks than there are ranges: each Python task costs Spark a tenth of
    a second or more, far more than reading a small range."""

    ranges: tuple[OffsetRange, ...]

    def describe(self) -> str:
        return ", ".join(r.describe() for r in self.ranges)


def starting_offsets(cluster: Cluster, options: ReadOptions, keys: list[TopicPartition]) -> tuple[Offsets, Offsets]:
    """(where reading starts, the logs' ends) for ``keys``, from ZooKeeper and the leaders."""
    earliest, latest = cluster.log_offsets(keys, EARLIEST), cluster.log_offsets(keys, LATEST)
    group = options.group_id
    committed = cluster.committed(group, keys) if options.starting.mode == "committed" and group else {}
    start = resolve_start(options.starting, keys, committed=committed, earliest=earliest, latest=latest,
                          reset=options.reset, fail_on_data_loss=options.fail_on_data_loss)
    return start, latest


def resolve_start(spec: OffsetSpec, keys: Iterable[TopicPartition], *, committed: Mapping[TopicPartition, int | None],
                  earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], reset: str,
                  fail_on_data_loss: bool) -> Offsets:
    """The first offset to read per partition, clamped into the log (see :func:`clamp`)."""
    result: Offsets = {}
    for key in keys:
        requested = _requested_start(spec, key, committed.get(key), reset)
        low, high = earliest[key], latest[key]
        wanted = low if requested == EARLIEST else high if requested == LATEST else requested
        result[key] = clamp(key, wanted, low, high, fail_on_data_loss, what=f"starting offset ({spec.mode})")
    return result


def _requested_start(spec: OffsetSpec, key: TopicPartition, committed: int | None, reset: str) -> int:
    if spec.mode == "committed":
        if committed is not None:
            return committed
        return EARLIEST if reset == "earliest" else LATEST
    if spec.mode == "earliest":
        return EARLIEST
    if spec.mode == "latest":
        return LATEST
    return spec.offsets.get(key, EARLIEST)


def clamp(key: TopicPartition, offset: int, low: int, high: int, fail_on_data_loss: bool, *, what: str) -> int:
    """``offset`` moved into ``[low, high]``. Outside it, data was lost (retention below, a truncated or
    recreated log above): :class:`DataLossError` with ``failOnDataLoss``, else a warning."""
    if low <= offset <= high:
        return offset
    topic, partition = key
    where = "below the log start" if offset < low else "beyond the log end"
    message = (f"{what} {offset} of {topic}-{partition} is {where} (the log holds [{low}, {high})); "
               f"data may have been lost")
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set option failOnDataLoss=false to continue from offset "
                            f"{low if offset < low else high} instead")
    log.warning("metaq: %s; continuing from %d (failOnDataLoss=false)", message, low if offset < low else high)
    return low if offset < low else high


def resolve_end(spec: OffsetSpec, start: Offsets, latest: Mapping[TopicPartition, int]) -> Offsets:
    """The batch read's end per partition: the log end, or what ``endingOffsets`` names."""
    result: Offsets = {}
    for key, first in start.items():
        wanted = spec.offsets.get(key, LATEST) if spec.mode == "json" else LATEST
        end = latest[key] if wanted == LATEST else wanted
        if end > latest[key]:
            raise ConfigError(f"option 'endingOffsets': {key[0]}/{key[1]}: {end} is beyond the log end {latest[key]}")
        if end < first:
            raise ConfigError(f"option 'endingOffsets': {key[0]}/{key[1]}: {end} is before the starting offset "
                              f"{first} (option 'startingOffsets')")
        result[key] = end
    return result


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                leader_of: Callable[[TopicPartition], Leader | None], *,
                min_partitions: int | None = None) -> list[OffsetRange]:
    """One range per partition with something to read; partitions in ``end`` but not in ``start`` are new and
    read from their log start. Split further when ``min_partitions`` asks for more tasks."""
    ranges = []
    for key in sorted(end):
        first = start.get(key)
        new = first is None
        first = 0 if first is None else first
        if end[key] > first:
            leader = leader_of(key)
            ranges.append(OffsetRange(key[0], key[1], first, end[key], leader.host if leader else None,
                                      leader.port if leader else -1, from_earliest=new))
    return split_ranges(ranges, min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """With fewer ranges than ``min_partitions``, cut each into pieces in proportion to its share of all
    offsets, rounding up so that there are at least ``min_partitions`` tasks (unless there are fewer offsets
    than that); pieces of one range are contiguous."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    result: list[OffsetRange] = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(-(-size * min_partitions // total), size))
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        result.extend(replace(r, start=a, end=b) for a, b in zip(bounds, bounds[1:], strict=False))
    return result


def pack_ranges(ranges: list[OffsetRange], max_partitions: int | None) -> list[RangeTask]:
    """One task per range, or at most ``max_partitions`` tasks: the largest range goes to the least loaded
    task first (ties to the lower task), which keeps tasks even and the result deterministic."""
    if not max_partitions or len(ranges) <= max_partitions:
        return [RangeTask((r,)) for r in ranges]
    loads = [0] * max_partitions
    groups: list[list[OffsetRange]] = [[] for _ in range(max_partitions)]
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition, r.start)):
        target = loads.index(min(loads))
        groups[target].append(r)
        loads[target] += r.end - r.start
    tasks = [RangeTask(tuple(sorted(g, key=lambda r: (r.topic, r.partition, r.start)))) for g in groups if g]
    return sorted(tasks, key=lambda t: (t.ranges[0].topic, t.ranges[0].partition, t.ranges[0].start))
