"""A local SparkSession for the Spark tests, with the metaq data source registered.

Starting one costs ~15 s (a JVM and Spark's own start), so test modules share one (a module-scoped fixture)::

    @pytest.fixture(scope="module")
    def spark():
        with local_session("metaq-spark-tests") as session:
            yield session
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@contextlib.contextmanager
def local_session(app_name: str, jars: Sequence[Path] = ()) -> Iterator[SparkSession]:
    """Spark ``local[2]`` without its UI, UTC session time, 2 shuffle partitions; workers run this venv's Python
    (they must import metaq); stopped when the block ends. ``jars``: ``spark.jars`` (e.g. Spark's Kafka source,
    metaq.testing.java_peers.spark_kafka_jars)."""
    from pyspark.sql import SparkSession

    import metaq.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    if jars:
        _stop_idle_gateway()
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    metaq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


def _stop_idle_gateway() -> None:
    """spark.jars reaches the driver's class path only when the JVM starts: a JVM left by an earlier Spark module
    of this worker process (its session stopped) is shut down, so the next session launches one with the jars."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None or SparkContext._active_spark_context is not None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)  # the JVM exits when its stdin closes (PythonGatewayServer)
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()
        proc.wait(timeout=30)
    SparkContext._gateway = None
    SparkContext._jvm = None
