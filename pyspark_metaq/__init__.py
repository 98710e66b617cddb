"""Automatic registration of the ``metaq`` Spark data source: PySpark looks for top-level ``pyspark_*``
modules that define ``DefaultSource`` (PySpark's data source discovery). ``metaq.spark.register(spark)`` does the
same explicitly."""

from metaq.spark.source import MetaqDataSource as DefaultSource

__all__ = ["DefaultSource"]
