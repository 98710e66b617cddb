"""The Spark source's executor parts against real processes: the range reader against a real broker (retention
holes, failOnDataLoss, leader failover) and the Python interpreter Spark's workers run (pure parts:
tests/spark/test_spark_parts.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from integration_tests.peers import confluent_produce
from metaq.errors import DataLossError
from metaq.spark.fetch import FetchSettings, close_connections, read_range
from metaq.spark.options import ReadOptions
from metaq.spark.planning import OffsetRange
from metaq.spark.schema import source_schema
from metaq.spark.workers import WorkerPythonError, import_error, worker_python
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until

# -- the executor's range reader against a broker --------------------------------------------------------------


def _settings(zk_connect: str, fail: bool) -> FetchSettings:
    return FetchSettings(zk_connect, fetch_max_bytes=1024, fail_on_data_loss=fail)


def test_read_range_returns_exactly_the_range(broker, make_topic, zk_connect) -> None:
    make_topic("exact", 1)
    confluent_produce(broker.bootstrap, "exact", 0, [(b"k", b"v%03d" % i, 1000 + i) for i in range(300)],
                      **{"batch.num.messages": 7})
    r = OffsetRange("exact", 0, 13, 287, "127.0.0.1", broker.port)
    chunks = list(read_range(r, _settings(zk_connect, True)))
    assert len(chunks) > 1  # 1 KiB fetches: many requests, pipelined
    assert [rec[0] for c in chunks for rec in c] == list(range(13, 287))
    assert [rec[3] for c in chunks for rec in c][:2] == [b"v013", b"v014"]
    moved = OffsetRange("exact", 0, 0, 5, "127.0.0.1", 1)  # a stale leader: looked up again in ZooKeeper
    assert [rec[0] for c in read_range(moved, _settings(zk_connect, True)) for rec in c] == list(range(5))
    close_connections()


def test_reader_hands_spark_bounded_arrow_batches(broker, make_topic, zk_connect, monkeypatch) -> None:
    """A Fetch larger than the row bound reaches Spark as several batches with the same rows, in order."""
    from metaq.spark import source

    make_topic("bounded", 1)
    confluent_produce(broker.bootstrap, "bounded", 0, [(None, b"v%03d" % i, 1000 + i) for i in range(100)])
    options = ReadOptions.parse({"zookeeper.connect": zk_connect, "subscribe": "bounded"}, streaming=False)
    reader = source.MetaqBatchReader(options, source_schema(options))
    (task,) = reader.partitions()
    whole = list(reader.read(task))
    monkeypatch.setattr(source, "MAX_BATCH_ROWS", 7)
    bounded = list(reader.read(task))
    assert max(b.num_rows for b in bounded) == 7 and len(bounded) > len(whole)
    rows = [row for b in bounded for row in b.to_pylist()]
    assert rows == [row for b in whole for row in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(100)) and rows[99]["value"] == b"v099"
    close_connections()


def test_retention_hole_follows_fail_on_data_loss(broker_cluster, make_topic, zk_connect) -> None:
    broker = broker_cluster.add(0, **{"log.segment.bytes": 4096, "log.retention.bytes": 16384,
                                      "log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0})
    make_topic("holes", 1)
    now = int(time.time() * 1000)  # not 1970: time retention would delete everything
    confluent_produce(broker.bootstrap, "holes", 0, [(None, b"x" * 100, now + i) for i in range(300)],
                      **{"batch.num.messages": 5})
    wait_until(lambda: _log_start(broker, "holes") > 0, 30, "retention to delete old segments")
    first = _log_start(broker, "holes")
    r = OffsetRange("holes", 0, 0, 300, "127.0.0.1", broker.port)
    with pytest.raises(DataLossError, match=r"offsets \[0, \d+\) of holes-0"):
        list(read_range(r, _settings(zk_connect, True)))
    kept = [rec[0] for c in read_range(r, _settings(zk_connect, False)) for rec in c]
    assert kept[0] >= first and kept == list(range(kept[0], 300))
    new_partition = OffsetRange("holes", 0, 0, 300, "127.0.0.1", broker.port, from_earliest=True)
    assert [rec[0] for c in read_range(new_partition, _settings(zk_connect, True)) for rec in c][-1] == 299
    close_connections()


def test_reader_and_list_offsets_wait_out_a_leader_failover(broker_cluster, zk_layout, zk_connect) -> None:
    """kill -9 the leader of an RF-3 partition: the next leader is elected only once the dead one's ZooKeeper
    session expired (4 s here, the test server's cap; 18 s by default). The executor's range reader, sent to
    the dead leader, and the driver's ListOffsets both wait that out (ListOffsets gave up after ~3 s, the
    reader after ~7 s, both shorter than a default failover) and read exactly the acknowledged records from
    the new leader."""
    import threading

    from integration_tests.test_replication_clients import FAST
    from metaq.broker.topics import create_topic
    from metaq.spark.cluster import Cluster

    brokers = [broker_cluster.add(i, **FAST) for i in range(3)]
    create_topic(zk_layout, "slowfail", 1, assignment={0: [0, 1, 2]}, config={"min.insync.replicas": "2"})
    for b in brokers:
        wait_until(lambda b=b: _leaders(b.bootstrap, "slowfail") == {0: 0}, 30, f"the topic on broker {b.broker_id}")
    bootstrap = ",".join(b.bootstrap for b in brokers)
    acked = confluent_produce(bootstrap, "slowfail", 0, [(b"k", b"v%03d" % i, 1000 + i) for i in range(300)],
                              acks="all", **{"batch.num.messages": 7})
    wait_until(lambda: sorted(zk_layout.partition_state("slowfail", 0).isr) == [0, 1, 2], 30, "a full ISR")
    latest: list[object] = []

    def list_latest() -> None:
        try:
            with Cluster(zk_connect) as cluster:
                cluster.topics(ReadOptions.parse({"zookeeper.connect": zk_connect, "subscribe": "slowfail"},
                                                 streaming=False).subscription)
                latest.append(cluster.log_offsets([("slowfail", 0)], -1)[("slowfail", 0)])
        except Exception as e:  # reported below
            latest.append(e)

    killed_at = time.monotonic()
    brokers[0].kill()
    lister = threading.Thread(target=list_latest, name="test-list-offsets")
    lister.start()
    r = OffsetRange("slowfail", 0, 0, 300, "127.0.0.1", brokers[0].port)
    read = [(rec[0], rec[3]) for c in read_range(r, _settings(zk_connect, True)) for rec in c]
    read_after = time.monotonic() - killed_at
    lister.join(90)
    close_connections()
    assert read == [(m.offset, m.value) for m in acked]
    assert latest == [300]
    assert zk_layout.partition_state("slowfail", 0).leader in (1, 2)
    print(f"\nrange reader done {read_after:.2f}s after the leader was killed")


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    try:
        return topic_leaders(bootstrap, topic)
    except Exception:  # the broker is still starting
        return {}


def _log_start(broker, topic: str) -> int:
    from metaq.spark.cluster import Cluster

    assert topic_leaders(broker.bootstrap, topic)
    with Cluster(broker.zk_connect) as cluster:
        cluster.topics(ReadOptions.parse({"zookeeper.connect": broker.zk_connect, "subscribe": topic},
                                         streaming=False).subscription)
        time.sleep(0.05)
        return cluster.log_offsets([(topic, 0)], -2)[(topic, 0)]


# -- the Python Spark runs workers with ------------------------------------------------------------------------


class _Context:
    """The three SparkContext attributes :func:`worker_python` reads."""

    def __init__(self, python: str, master: str = "local[2]", conf: str | None = None) -> None:
        self.pythonExec, self.master = python, master
        self._conf = {"spark.pyspark.python": conf} if conf else {}

    def getConf(self) -> dict[str, str]:
        return self._conf


class _Session:
    def __init__(self, context: _Context) -> None:
        self.sparkContext = context


@pytest.fixture
def python_without_metaq(tmp_path) -> str:
    """A real interpreter that cannot import metaq: the base Python, isolated from the venv and PYTHONPATH."""
    script = tmp_path / "python3"
    script.write_text(f'#!/bin/sh\nexec {os.path.join(sys.base_prefix, "bin", "python3")} -I "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_worker_python_is_checked_and_defaults_to_the_driver_locally(python_without_metaq, monkeypatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python(_Session(_Context(sys.executable))) is None  # this very interpreter: no probe
    assert import_error(sys.executable) is None
    # nothing chose python3 and the master is local: the source's workers run the driver's Python
    assert worker_python(_Session(_Context(python_without_metaq))) == sys.executable
    for context in (_Context(python_without_metaq, master="spark://127.0.0.1:7077"),
                    _Context(python_without_metaq, conf=python_without_metaq)):
        with pytest.raises(WorkerPythonError, match=rf"{python_without_metaq}.*No module named 'metaq'.*"
                                                    r"PYSPARK_PYTHON.*spark.pyspark.python"):
            worker_python(_Session(context))
    monkeypatch.setenv("PYSPARK_PYTHON", python_without_metaq)  # chosen on purpose: an error, not a fallback
    with pytest.raises(WorkerPythonError, match=f"PYSPARK_PYTHON={sys.executable}"):
        worker_python(_Session(_Context(python_without_metaq)))
    with pytest.raises(WorkerPythonError, match="no-such-python.*no such program"):
        worker_python(_Session(_Context("no-such-python", master="yarn")))


def test_auto_registration_in_a_python_without_metaq_fails_on_use_not_on_import(python_without_metaq) -> None:
    """Spark imports every ``pyspark_*`` module while looking up *any* data source: from the checkout, a
    Python without metaq's dependencies must still import pyspark_metaq, and say what to do once used."""
    from metaq.spark.workers import _spark_python_path

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (f"import sys; sys.path[:0] = {[*_spark_python_path(), repo]!r}\n"
            "import pyspark_metaq\n"
            "from pyspark.sql.datasource import DataSource\n"
            "source = pyspark_metaq.DefaultSource\n"
            "assert issubclass(source, DataSource) and source.name() == 'metaq'\n"
            "source({})\n")
    proc = subprocess.run([python_without_metaq, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the metaq data source cannot run in ") and "PYSPARK_PYTHON" in last
    assert "No module named 'kafka'" in last
