"""Driver-side helpers for batch jobs that move a group's ZooKeeper offsets themselves.

A batch read has no commit hook in Spark, so a job that wants "process what is new since last time" pins the
range first, reads exactly it, and commits its end once the output is safely written::

    bounds = snapshot_offsets(options)                 # committed (or earliest) -> latest, per partition
    df = spark.read.format("metaq").options(**{**options, **bounds.read_options()}).load()
    ... write the results ...
    commit_offsets(options, bounds.ending)             # only now: a failed job is simply run again

Both take the same option mapping as the reader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metaq.errors import ConfigError
from metaq.spark.cluster import Cluster
from metaq.spark.offset_ranges import Offsets, from_spark, to_spark
from metaq.spark.options import ReadOptions
from metaq.spark.planning import resolve_end, starting_offsets


@dataclass(frozen=True)
class OffsetBounds:
    """A pinned batch range: ``startingOffsets`` and ``endingOffsets`` for one read."""

    starting: Offsets
    ending: Offsets

    def read_options(self) -> dict[str, str]:
        """The two options that make a read cover exactly this range."""
        return {"startingOffsets": json.dumps(to_spark(self.starting)),
                "endingOffsets": json.dumps(to_spark(self.ending))}

    @property
    def rows(self) -> int:
        return sum(self.ending[k] - self.starting[k] for k in self.ending)


def snapshot_offsets(options: Mapping[str, object]) -> OffsetBounds:
    """The range a batch read with ``options`` would cover now (startingOffsets and endingOffsets as given).
    A streaming query's options may be passed as they are: ``maxOffsetsPerTrigger`` is ignored."""
    o = ReadOptions.parse({k: v for k, v in options.items() if k.lower() != "maxoffsetspertrigger"},
                          streaming=False)
    with Cluster.for_read(o) as cluster:
        start, latest = starting_offsets(cluster, o, cluster.partitions(cluster.topics(o.subscription)))
        return OffsetBounds(start, resolve_end(o.ending, start, latest))


def commit_offsets(options: Mapping[str, object],
                   offsets: Mapping[tuple[str, int], int] | Mapping[str, Mapping[str, int]] | str) -> Offsets:
    """Write ``offsets`` (an offset map, Spark's JSON form, or its text) to the offsets of ``group.id`` (in
    ZooKeeper, or ``__consumer_offsets`` with ``group.coordination=kafka``); an offset already at or past the
    given one is left alone. Returns what was written. A broker-coordinated group with active members
    refuses the commit: :class:`metaq.errors.GroupActiveError`."""
    o = ReadOptions.parse(options, streaming=None)
    if o.group_id is None:
        raise ConfigError("option 'group.id': committing offsets needs a group")
    with Cluster.for_read(o) as cluster:
        return cluster.commit(o.group_id, _offsets(offsets))


def _offsets(offsets: Mapping[Any, Any] | str) -> Offsets:
    if isinstance(offsets, str):
        return from_spark(json.loads(offsets))
    if all(isinstance(k, tuple) for k in offsets):
        return {(str(t), int(p)): int(v) for (t, p), v in offsets.items()}
    return from_spark(dict(offsets))


def stop_query(query: Any, options: Mapping[str, object], timeout_s: float | None = None) -> Offsets:
    """Stop a streaming query and commit the end of its last completed micro-batch.

    The source commits each batch's end when Spark next polls it, which never happens after a stop that
    comes right after a batch (a long processing-time trigger). The query's last progress report names
    that end, so it is committed here. Sources whose topics are not all in the subscription of
    ``options`` are left alone (a query may read several sources)."""
    if timeout_s is not None:
        query.awaitTermination(timeout_s)
    query.stop()
    progress = query.lastProgress
    if not progress:
        return {}
    o = ReadOptions.parse(options, streaming=True)
    ends: Offsets = {}
    for source in progress.get("sources", []):
        end = _source_end(source.get("endOffset"))
        topics = sorted({t for t, _ in end})
        if end and o.subscription.select(topics) == topics:
            ends.update(end)
    return commit_offsets(options, ends) if ends and o.group_id else {}


def _source_end(text: object) -> Offsets:
    try:
        return from_spark(json.loads(text)) if isinstance(text, str) else {}
    except (ValueError, TypeError):
        return {}  # another source's offset format
