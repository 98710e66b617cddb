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
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def local_session(app_name: str) -> Iterator[Any]:
    """Spark ``local[2]`` without its UI, UTC session time, 2 shuffle partitions; workers run this venv's Python
    (they must import metaq); stopped when the block ends."""
    from pyspark.sql import SparkSession

    import metaq.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    metaq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
