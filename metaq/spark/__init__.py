"""metaq for PySpark 4.3: the ``metaq`` data source (batch and streaming reads from a group's ZooKeeper
offsets, and a writer).

    import metaq.spark
    metaq.spark.register(spark)                       # once per SparkSession
    df = spark.read.format("metaq").option("zookeeper.connect", zk).option("subscribe", "clicks").load()

Requires ``pyspark[sql]`` (pyarrow). The options are listed in :mod:`metaq.spark.options`; where each part
runs is in :mod:`metaq.spark.source`; which Python Spark runs it in, in :mod:`metaq.spark.workers`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from metaq.spark.driver import OffsetBounds, commit_offsets, snapshot_offsets, stop_query
from metaq.spark.source import FORMAT, MetaqDataSource
from metaq.spark.workers import WorkerPythonError, python_for_registration, worker_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "MetaqDataSource", "OffsetBounds", "WorkerPythonError", "commit_offsets", "register",
           "snapshot_offsets", "stop_query"]

log = logging.getLogger(__name__)

_DATA_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"


def register(spark: SparkSession, *, max_partitions: int | str | None = "cores") -> None:
    """Make ``format("metaq")`` known to ``spark`` (a SparkSession), replacing the automatically
    registered source (the ``pyspark_metaq`` module) for this session.

    First checks that the Python Spark runs workers with can import metaq (see :mod:`metaq.spark.workers`):
    if it cannot, this raises :class:`WorkerPythonError` naming that interpreter and ``PYSPARK_PYTHON`` /
    ``spark.pyspark.python`` -- except on a local master where nothing chose it, where the source's workers
    then run this driver's interpreter.

    ``max_partitions``: the ``maxPartitions`` of reads that set none. ``"cores"`` (the default) is the
    session's default parallelism: every Python task costs Spark a fixed tenth of a second or so, so on a
    small cluster a few tasks reading several partitions each beat one task per partition. ``None`` keeps
    one task per partition, as Spark's own Kafka source does."""
    if max_partitions == "cores":
        max_partitions = _cores(spark)
    elif isinstance(max_partitions, str):
        raise ValueError(f"max_partitions must be a number, 'cores' or None, not {max_partitions!r}")
    source: type[MetaqDataSource] = MetaqDataSource
    if max_partitions:
        source = type("MetaqDataSource", (MetaqDataSource,), {
            "default_max_partitions": int(max_partitions), "__doc__": MetaqDataSource.__doc__})
    with python_for_registration(spark, worker_python(spark)):
        _silence_replacement_warnings(spark)
        spark.dataSource.register(source)


def _silence_replacement_warnings(spark: SparkSession) -> None:
    """Replacing the automatically registered source is what :func:`register` is for, yet Spark warns that
    "the data source metaq replaced a statically registered data source" then, and again each time it
    clones the session (every streaming query). Once Spark has looked up the static sources (whose
    failures that logger reports too), it says nothing else, so it is set to ERROR."""
    try:
        spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(FORMAT)  # the lookup, now
        jvm = spark.sparkContext._jvm
        if jvm is None:
            raise RuntimeError("no JVM gateway")  # logged below, as when the lookup fails
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            _DATA_SOURCE_MANAGER, jvm.org.apache.logging.log4j.Level.ERROR)
    except Exception:  # Spark Connect, or another logging backend: the warning stays
        log.debug("metaq: cannot silence Spark's data source replacement warning", exc_info=True)


def _cores(spark: SparkSession) -> int | None:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext: fall back to one task per partition
        return None
