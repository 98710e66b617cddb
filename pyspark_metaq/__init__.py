"""Automatic registration of the ``metaq`` Spark data source: PySpark looks for top-level ``pyspark_*``
modules that define ``DefaultSource`` (PySpark's data source discovery). ``metaq.spark.register(spark)``
does the same explicitly.

Spark imports this module in a Python worker while it looks up data sources for *any* format. If that
Python cannot import metaq (it is not the interpreter metaq is installed in), the import must not fail:
that would break the lookup for every data source with a ``ModuleNotFoundError`` deep inside Spark. The
``metaq`` format then fails when it is used, with a message that says which Python to point Spark at."""

from __future__ import annotations

import sys
from typing import Any

try:
    from metaq.spark.source import MetaqDataSource as DefaultSource
except ImportError as _error:
    from pyspark.sql.datasource import DataSource

    _MESSAGE = (f"the metaq data source cannot run in {sys.executable}: {_error}. Spark runs Python workers "
                f"with PYSPARK_PYTHON (spark-submit: --conf spark.pyspark.python=...), else with python3 from "
                f"PATH: point it at the Python where metaq is installed")

    class DefaultSource(DataSource):  # type: ignore[no-redef]
        """``format("metaq")`` in a Python without metaq: fails on use, saying why."""

        def __init__(self, options: Any) -> None:
            raise ImportError(_MESSAGE)

        @classmethod
        def name(cls) -> str:
            return "metaq"

__all__ = ["DefaultSource"]
