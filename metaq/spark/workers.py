"""Which Python Spark runs the metaq data source in, checked once when the source is registered.

    python = worker_python(spark)    # None: Spark's choice imports metaq; else the interpreter to use instead

PySpark starts its Python workers (planning, the streaming runner, executor tasks) with ``PYSPARK_PYTHON`` as
it was when the SparkContext started (``spark-submit`` sets it from ``spark.pyspark.python``), else with
``python3`` from PATH: not with the interpreter that runs the driver. A job started as ``.venv/bin/python
job.py`` without activating the venv therefore gets workers that cannot import metaq, and fails deep inside
Spark with a ``ModuleNotFoundError``. So, at registration:

- Spark's interpreter imports ``metaq.spark.source``: nothing changes;
- it cannot, nothing chose it (neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python``) and the master is
  local: the source's workers run the driver's own interpreter (the one that imported metaq), and only
  those, so that a local job started from a venv works as it is;
- otherwise: :class:`WorkerPythonError`, naming the interpreter and the setting that chooses it.

The check runs the interpreter on the driver's host, where Spark plans the query; executors on other hosts
are expected to have the same environment (ship it with ``spark.archives``).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from metaq.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_PROBE = "import metaq.spark.source"  # what unpickling the registered data source imports
_PROBE_TIMEOUT_S = 120  # importing pyarrow and pyspark takes a second or two, longer on a loaded machine


class WorkerPythonError(ConfigError):
    """The Python Spark would run the data source in cannot import metaq."""


def worker_python(spark: SparkSession) -> str | None:
    """The interpreter the data source's workers should use instead of Spark's choice, or None to keep it.
    Raises :class:`WorkerPythonError` when Spark's choice cannot import metaq and was made on purpose."""
    try:
        sc = spark.sparkContext
        chosen = str(sc.pythonExec)
        master = str(sc.master)
        conf = sc.getConf().get("spark.pyspark.python", None)
    except Exception:  # Spark Connect: no SparkContext here, the server runs the workers
        return None
    if _same_file(chosen, sys.executable):
        return None
    error = import_error(chosen)
    if error is None:
        return None
    if not os.environ.get("PYSPARK_PYTHON") and not conf and master.startswith("local"):
        log.info("metaq: Spark's Python for workers (%s) cannot import metaq (%s); the metaq data source runs "
                 "in %s instead (set PYSPARK_PYTHON to choose)", describe(chosen), error, sys.executable)
        return sys.executable
    raise WorkerPythonError(
        f"metaq: Spark runs Python workers with {describe(chosen)}, which cannot import metaq ({error}). "
        f"Point PYSPARK_PYTHON (or spark-submit --conf spark.pyspark.python=...) at the Python where metaq "
        f"is installed, e.g. PYSPARK_PYTHON={sys.executable}, before the SparkSession starts; or activate "
        f"that virtualenv so that python3 on PATH is its interpreter")


def describe(python: str) -> str:
    """``python3 (/usr/bin/python3)``: the setting as given, and what PATH makes of it."""
    found = shutil.which(python)
    return python if found is None or found == python else f"{python} ({found})"


def import_error(python: str) -> str | None:
    """Why ``python`` cannot import the data source (the last line of its traceback), or None if it can.
    It runs with the driver's environment plus the PySpark archives Spark puts on a worker's path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*_spark_python_path(), *filter(None, [env.get("PYTHONPATH")])])
    try:
        proc = subprocess.run([python, "-c", _PROBE], env=env, capture_output=True, text=True,
                              timeout=_PROBE_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return "no such program"
    except OSError as e:
        return str(e)
    except subprocess.TimeoutExpired:
        log.warning("metaq: %s took over %d s to import metaq; not checked", python, _PROBE_TIMEOUT_S)
        return None
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


def _spark_python_path() -> list[str]:
    """The pyspark and py4j archives under SPARK_HOME, which Spark adds to every worker's PYTHONPATH."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        home = _find_spark_home()
    except Exception:  # no SPARK_HOME to be found: the worker then needs pyspark installed
        return []
    return sorted(glob.glob(os.path.join(home, "python", "lib", "*.zip")))


def _same_file(python: str, executable: str) -> bool:
    """True if ``python`` names this very interpreter (symlinks are not followed: a venv's python links
    to the base interpreter but has its own packages)."""
    found = shutil.which(python)
    return found is not None and os.path.abspath(found) == os.path.abspath(executable)


@contextlib.contextmanager
def python_for_registration(spark: SparkSession, python: str | None) -> Iterator[None]:
    """Within the block, functions registered with ``spark`` (a data source) run in ``python``; Spark keeps
    the interpreter in each registered function, so other UDFs and sources keep Spark's choice."""
    if python is None:
        yield
        return
    sc = spark.sparkContext
    saved, sc.pythonExec = sc.pythonExec, python
    try:
        yield
    finally:
        sc.pythonExec = saved
