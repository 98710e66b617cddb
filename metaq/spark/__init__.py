"""metaq for PySpark 4.3: the ``metaq`` data source (batch and streaming reads from a group's ZooKeeper
offsets, and a writer).

    import metaq.spark
    metaq.spark.register(spark)                       # once per SparkSession
    df = spark.read.format("metaq").option("zookeeper.connect", zk).option("subscribe", "clicks").load()

Requires ``pyspark[sql]`` (pyarrow). The options are listed in :mod:`metaq.spark.options`; where each part
runs is in :mod:`metaq.spark.source`.
"""

from __future__ import annotations

from typing import Any

from metaq.spark.driver import OffsetBounds, commit_offsets, snapshot_offsets, stop_query
from metaq.spark.source import FORMAT, MetaqDataSource

__all__ = ["FORMAT", "MetaqDataSource", "OffsetBounds", "commit_offsets", "register", "snapshot_offsets",
           "stop_query"]


def register(spark: Any, *, max_partitions: int | str | None = "cores") -> None:
    """Make ``format("metaq")`` known to ``spark`` (a SparkSession).

    ``max_partitions``: the ``maxPartitions`` of reads that set none. ``"cores"`` (the default) is the
    session's default parallelism: every Python task costs Spark a fixed tenth of a second or so, so on a
    small cluster a few tasks reading several partitions each beat one task per partition. ``None`` keeps
    one task per partition, as Spark's own Kafka source does."""
    if max_partitions == "cores":
        max_partitions = _cores(spark)
    elif isinstance(max_partitions, str):
        raise ValueError(f"max_partitions must be a number, 'cores' or None, not {max_partitions!r}")
    if not max_partitions:
        spark.dataSource.register(MetaqDataSource)
        return
    source = type("MetaqDataSource", (MetaqDataSource,), {
        "default_max_partitions": int(max_partitions), "__doc__": MetaqDataSource.__doc__})
    spark.dataSource.register(source)


def _cores(spark: Any) -> int | None:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext: fall back to one task per partition
        return None
