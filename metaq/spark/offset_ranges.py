"""Offsets as Spark sees them, and the arithmetic on them that must be deterministic.

In memory an offset map is ``{(topic, partition): next offset}``. Spark stores it in the checkpoint as JSON
and compares offsets *as JSON text*, so :func:`to_spark` always writes topics sorted by name and
partitions sorted by number, the shape of Spark's own Kafka source::

    to_spark({("clicks", 1): 7, ("clicks", 0): 5})     # {"clicks": {"0": 5, "1": 7}}
    from_spark({"clicks": {"0": 5, "1": 7}})             # {("clicks", 0): 5, ("clicks", 1): 7}
    cap_rows({("t", 0): 0, ("t", 1): 0}, {("t", 0): 90, ("t", 1): 10}, 50)   # {("t", 0): 45, ("t", 1): 5}
"""

from __future__ import annotations

from collections.abc import Mapping

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1


def to_spark(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-ready form, in a fixed key order (Spark compares offsets as text)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_spark(obj: object) -> Offsets:
    """Parse an offset Spark hands back (from our own :func:`to_spark`, via the checkpoint)."""
    if not isinstance(obj, dict):
        raise ValueError(f"a metaq offset must be a JSON object, got {obj!r}")
    result: Offsets = {}
    for topic, partitions in obj.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"metaq offset for topic {topic!r} must be an object, got {partitions!r}")
        for partition, offset in partitions.items():
            result[(str(topic), int(partition))] = int(offset)
    return result


def advance(base: Mapping[TopicPartition, int], update: Mapping[TopicPartition, int]) -> Offsets:
    """``base`` with ``update`` applied where it moves forward; partitions only in ``update`` are added.
    Offsets handed to Spark never move backwards, even when a log was truncated under us."""
    result = dict(base)
    for key, offset in update.items():
        if key not in result or offset > result[key]:
            result[key] = offset
    return result


def cap_rows(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], max_rows: int) -> Offsets:
    """``end`` limited to ``max_rows`` offsets past ``start`` in total (``maxOffsetsPerTrigger``).

    Each partition gets a share proportional to its backlog, so a busy partition cannot starve the others;
    the rounding remainder goes to the largest fractions (ties by topic-partition), so the sum is exactly
    ``max_rows`` and the result depends on nothing but the arguments."""
    lags = {key: end[key] - start.get(key, end[key]) for key in end}
    total = sum(lag for lag in lags.values() if lag > 0)
    if total <= max_rows:
        return dict(end)
    shares = {key: (lag * max_rows // total if lag > 0 else 0) for key, lag in lags.items()}
    remainder = max_rows - sum(shares.values())
    by_fraction = sorted((key for key, lag in lags.items() if lag > 0),
                         key=lambda key: (-(lags[key] * max_rows % total), key))
    for key in by_fraction[:remainder]:
        shares[key] += 1
    return {key: start.get(key, end[key]) + shares[key] if lags[key] > 0 else end[key] for key in end}


def total_rows(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Offsets between ``start`` and ``end`` (partitions missing from ``start`` count from ``end``)."""
    return sum(max(0, offset - start.get(key, offset)) for key, offset in end.items())
