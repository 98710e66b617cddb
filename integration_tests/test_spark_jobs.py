"""Spark jobs run the way Spark users run them, each in its own processes: ``spark-submit`` to a real Spark
standalone cluster (a Master and a Worker from the installed PySpark, executors in their own JVMs), and
``python job.py`` from outside the checkout, with and without the virtualenv activated.

Heavy (every job starts its own driver JVM): the cluster is kept small (one worker, 2 cores, 1 GiB) and
every JVM is stopped at the end, also when the test process dies (die-with-parent).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from integration_tests.peers import kcat_consume
from metaq.childproc import die_with_parent, stop_process
from metaq.testing.wait import wait_until

pytest.importorskip("pyspark")
psutil = pytest.importorskip("psutil")
pq = pytest.importorskip("pyarrow.parquet")

from metaq.spark.embedded import PAGES, fake_click, produce_clicks  # noqa: E402  (after the skip)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
SPARK_HOME = Path(__import__("pyspark.find_spark_home").find_spark_home._find_spark_home())
JOB_TIMEOUT_S = 600  # a driver JVM, executors and Python workers on a loaded 2-core machine
CONF = ["--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN", "--driver-memory", "512m"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    return {**env, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", **extra}


def run_job(args: list[str], env: dict[str, str], cwd: Path, timeout: float = JOB_TIMEOUT_S) -> tuple[int, str]:
    """Run a driver to the end; (exit status, stdout + stderr). Its whole process group is killed on timeout."""
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_parent())
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        tail = out.decode(errors="replace")[-4000:]
        raise AssertionError(f"{args[0]} still running after {timeout}s:\n{tail}") from None
    return proc.returncode, out.decode(errors="replace")


# -- a standalone cluster ------------------------------------------------------------------------------------


@dataclass
class Standalone:
    master_url: str
    ui: str
    work: Path
    daemons: list[subprocess.Popen[bytes]]

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as answer:
            return int(json.load(answer).get("aliveworkers", 0))

    def jvms(self) -> list[psutil.Process]:
        """The daemons and everything they started (executors)."""
        found = []
        for daemon in self.daemons:
            try:
                parent = psutil.Process(daemon.pid)
                found += [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return found


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    work = tmp_path_factory.mktemp("spark-standalone")
    port, ui_port = free_port(), free_port()
    env = spark_env(SPARK_DAEMON_MEMORY="256m", SPARK_WORKER_DIR=str(work / "work"))
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    daemons: list[subprocess.Popen[bytes]] = []
    seen: list[psutil.Process] = []

    def start(name: str, *args: str) -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115  (closed with the process)
        daemons.append(subprocess.Popen([spark_class, *args], env=env, cwd=work, stdout=log, stderr=log,
                                        preexec_fn=die_with_parent()))
        log.close()

    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", work / "work", daemons)
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui_port))
        start("worker", "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
              "--cores", "2", "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work / "work"))
        try:
            wait_until(lambda: _quietly(cluster.alive_workers) == 1, 180, "the worker to register with the master")
        except AssertionError as e:
            logs = "\n".join(f"--- {name}.log\n{(work / f'{name}.log').read_text(errors='replace')[-3000:]}"
                             for name in ("master", "worker"))
            raise AssertionError(f"{e}\n{logs}") from None
        yield cluster
        seen = cluster.jvms()
    finally:
        for daemon in reversed(daemons):  # the worker first: it stops its executors
            stop_process(daemon, timeout=30)
    wait_until(lambda: not [p for p in seen if _alive(p)], 60, "every Spark JVM to exit")


def _quietly(fn: object) -> int:
    try:
        return fn()  # type: ignore[operator]
    except (OSError, ValueError):  # not listening yet, or an answer that is not JSON yet
        return 0


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def submit(cluster: Standalone, script: str | Path, *args: str, python: str = sys.executable,
           cwd: Path = REPO) -> tuple[int, str]:
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.master_url, *CONF,
               "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2",
               "--conf", f"spark.pyspark.python={python}", "--conf", f"spark.pyspark.driver.python={sys.executable}",
               str(script), *args]
    return run_job(command, spark_env(), cwd)


def test_batch_example_on_a_standalone_cluster(standalone, broker, make_topic, zk_connect, zk_layout,
                                               tmp_path: Path) -> None:
    make_topic("clicks", 4)
    produce_clicks(zk_connect, "clicks", 3000, seed=7)
    code, out = submit(standalone, REPO / "examples" / "spark_batch_job.py", "--zookeeper", zk_connect,
                       "--group", "daily", "--output", str(tmp_path / "out"))
    assert code == 0, out[-4000:]
    assert "run 1: 3,000 new page views" in out

    rng, views, ms = random.Random(7), Counter(), Counter()
    for _ in range(3000):
        _, value = fake_click(rng)
        click = json.loads(value)
        views[click["page"]] += 1
        ms[click["page"]] += click["ms"]
    summary = pq.read_table(tmp_path / "out" / "run-1").to_pylist()
    assert {row["page"]: row["views"] for row in summary} == dict(views)
    assert {row["page"]: row["avg_ms"] for row in summary} == {p: round(ms[p] / views[p], 1) for p in views}
    assert set(views) <= set(PAGES)
    offsets = zk_layout.offsets("daily")
    assert sorted(offsets) == [("clicks", p) for p in range(4)] and sum(offsets.values()) == 3000

    executor_logs = list(standalone.work.glob("app-*/*/stderr"))  # one directory per executor JVM
    assert executor_logs and "CoarseGrainedExecutorBackend" in executor_logs[0].read_text(errors="replace")


STREAM_JOB = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pyspark.sql import SparkSession
    import metaq.spark

    zk, topic, group, stop = sys.argv[1:5]
    spark = SparkSession.builder.appName("metaq-cluster-stream").getOrCreate()
    metaq.spark.register(spark)
    options = {"zookeeper.connect": zk, "subscribe": topic, "group.id": group, "startingOffsets": "earliest"}
    query = (spark.readStream.format("metaq").options(**options).load().selectExpr("partition", "offset")
             .writeStream.format("memory").queryName("seen").trigger(processingTime="2 seconds").start())
    while not Path(stop).exists() and query.isActive:
        time.sleep(0.5)
    query.stop()
    rows = spark.sql("SELECT count(*) AS n, count(DISTINCT partition, offset) AS d FROM seen").collect()[0]
    print(f"ROWS {rows.n} DISTINCT {rows.d} BATCHES {len([p for p in query.recentProgress if p['numInputRows']])}")
""")


def test_stream_commits_zookeeper_offsets_across_triggers_on_a_cluster(standalone, broker, make_topic,
                                                                       zk_connect, zk_layout, tmp_path) -> None:
    make_topic("views", 2)
    produce_clicks(zk_connect, "views", 400, seed=1)
    script, stop = tmp_path / "stream_job.py", tmp_path / "stop"
    script.write_text(STREAM_JOB)
    result: dict[str, tuple[int, str]] = {}
    runner = threading.Thread(target=lambda: result.update(job=submit(
        standalone, script, zk_connect, "views", "views-etl", str(stop), cwd=tmp_path)), name="stream-job")
    runner.start()
    try:
        total = lambda: sum(zk_layout.offsets("views-etl").values())  # noqa: E731
        wait_until(lambda: total() == 400 or not runner.is_alive(), JOB_TIMEOUT_S, "the first trigger's commit")
        assert total() == 400, result.get("job", (None, ""))[1][-4000:]
        produce_clicks(zk_connect, "views", 250, seed=2)
        wait_until(lambda: total() == 650 or not runner.is_alive(), 180, "the next trigger's commit")
        assert total() == 650
    finally:
        stop.touch()
        runner.join(JOB_TIMEOUT_S)
    code, out = result["job"]
    assert code == 0, out[-4000:]
    line = next(x for x in out.splitlines() if x.startswith("ROWS "))
    rows, distinct, batches = (int(v) for v in line.split()[1::2])
    assert rows == distinct == 650 and batches >= 2


def test_register_fails_at_once_when_workers_cannot_import_metaq(standalone, tmp_path) -> None:
    python = tmp_path / "python3"  # a real Python without metaq: the base interpreter, isolated
    python.write_text(f'#!/bin/sh\nexec {os.path.join(sys.base_prefix, "bin", "python3")} -I "$@"\n')
    python.chmod(0o755)
    script = tmp_path / "job.py"
    script.write_text("from pyspark.sql import SparkSession\nimport metaq.spark\n"
                      "metaq.spark.register(SparkSession.builder.getOrCreate())\nprint('REGISTERED')\n")
    code, out = submit(standalone, script, python=str(python), cwd=tmp_path)
    assert code != 0 and "REGISTERED" not in out
    assert "WorkerPythonError" in out and f"{python}, which cannot import metaq (ModuleNotFoundError" in out
    assert "PYSPARK_PYTHON" in out and "spark.pyspark.python" in out


# -- local jobs started from anywhere ------------------------------------------------------------------------

LOCAL_JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    zk, topic, auto = sys.argv[1], sys.argv[2], sys.argv[3] == "auto"
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.log.level", "WARN").getOrCreate())
    df = spark.read.format("metaq").option("zookeeper.connect", zk).option("subscribe", topic)
    if auto:  # the automatically registered source first, then register() replaces it
        print("AUTO", df.load().count(), flush=True)
    import metaq.spark
    metaq.spark.register(spark)
    df = df.load()
    print("ROWS", df.count(), df.selectExpr("count(DISTINCT partition, offset)").first()[0])
    df.select("key", "value").write.format("metaq").option("zookeeper.connect", zk) \\
        .option("topic", topic + ".copy").mode("append").save()
    if auto:  # a streaming query clones the session, which registers the source once more
        stream = (spark.readStream.format("metaq").option("zookeeper.connect", zk).option("subscribe", topic)
                  .option("startingOffsets", "earliest").load().writeStream.format("memory").queryName("seen")
                  .trigger(availableNow=True).start())
        stream.awaitTermination()
        print("STREAM", spark.sql("SELECT count(*) FROM seen").first()[0])
    spark.stop()
""")


@pytest.fixture
def local_job(broker, make_topic, zk_connect, tmp_path) -> Path:
    """A job script outside the checkout, and a topic of 120 page views (and an empty one to copy to)."""
    make_topic("pages", 2)
    make_topic("pages.copy", 1)
    produce_clicks(zk_connect, "pages", 120, seed=3)
    script = tmp_path / "job.py"
    script.write_text(LOCAL_JOB)
    return script


def _copied(broker) -> int:
    return len(kcat_consume(broker.bootstrap, "pages.copy", 0, "beginning"))


def test_venv_python_job_without_activation_runs(local_job, broker, zk_connect, tmp_path) -> None:
    """``.venv/bin/python job.py`` with the venv not on PATH: Spark's python3 cannot import metaq; on a local
    master register() runs the source in the driver's interpreter instead of failing in a worker."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)
    code, out = run_job([sys.executable, str(local_job), zk_connect, "pages", "register"],
                        spark_env(PATH=path), tmp_path)
    assert code == 0, out[-4000:]
    assert "ROWS 120 120" in out and "ModuleNotFoundError" not in out
    assert _copied(broker) == 120


def test_auto_registration_from_outside_the_checkout(local_job, broker, zk_connect, tmp_path) -> None:
    """Without register(): Spark finds the pyspark_metaq module in the venv, from any directory; register()
    then replaces it without Spark's warning about replacing a statically registered data source."""
    assert not (tmp_path / "pyspark_metaq").exists() and REPO not in tmp_path.parents
    code, out = run_job([sys.executable, str(local_job), zk_connect, "pages", "auto"],
                        spark_env(PYSPARK_PYTHON=sys.executable), tmp_path)
    assert code == 0, out[-4000:]
    assert "AUTO 120" in out and "ROWS 120 120" in out and "STREAM 120" in out
    assert "replaced a statically registered data source" not in out
    assert _copied(broker) == 120
