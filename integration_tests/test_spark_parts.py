"""The Spark source's parts without Spark: options, offset arithmetic, planning, Arrow batches, and the executor's
range reader against a real broker (retention holes and failOnDataLoss)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from integration_tests.peers import confluent_produce
from metaq.errors import ConfigError, DeserializationError
from metaq.spark.arrow import BatchBuilder
from metaq.spark.fetch import FetchSettings, close_connections, read_range
from metaq.spark.offsets import DataLossError, advance, cap_rows, from_spark, to_spark
from metaq.spark.options import ReadOptions, WriteOptions
from metaq.spark.planning import OffsetRange, pack_ranges, plan_ranges, resolve_end, resolve_start, split_ranges
from metaq.spark.schema import check_schema, source_schema
from metaq.spark.workers import WorkerPythonError, import_error, worker_python
from metaq.spark.writer import plan_write
from metaq.testing.broker import topic_leaders, wait_until

ZK = "127.0.0.1:2181/x"


def read_options(**extra: str) -> dict[str, str]:
    return {"zookeeper.connect": ZK, "subscribe": "clicks", **extra}


# -- options ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "clicks"}, "zookeeper.connect"),
    ({"zookeeper.connect": ZK}, "subscribe"),
    (read_options(subscribePattern="c.*"), "subscribePattern"),
    (read_options(startingOffsets="oldest"), "startingOffsets"),
    (read_options(startingOffsets='{"clicks": {"0": -3}}'), "startingOffsets"),
    (read_options(startingOffsets='{"views": {"0": 1}}'), "startingOffsets"),
    (read_options(startingOffsets="committed"), "group.id"),
    (read_options(**{"group.id": "bad/group"}), "group.id"),
    (read_options(maxOffsetsPerTrigger="0"), "maxOffsetsPerTrigger"),
    (read_options(minPartitions="many"), "minPartitions"),
    (read_options(failOnDataLoss="maybe"), "failOnDataLoss"),
    (read_options(valueFormat="avro"), "valueFormat"),
    (read_options(valueSchema="a INT"), "valueSchema"),
    (read_options(maxOffsetsPerTriger="10"), "maxOffsetsPerTrigger"),  # the suggestion names the right one
    (read_options(subscribe="bad topic"), "subscribe"),
])
def test_bad_read_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        ReadOptions.parse({k.lower(): v for k, v in options.items()}, streaming=None)


def test_streaming_and_batch_only_options() -> None:
    with pytest.raises(ConfigError, match="endingOffsets"):
        ReadOptions.parse(read_options(endingOffsets="latest"), streaming=True)
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        ReadOptions.parse(read_options(maxOffsetsPerTrigger="10"), streaming=False)


def test_defaults_follow_group_and_mode() -> None:
    assert ReadOptions.parse(read_options(), streaming=True).starting.mode == "latest"
    assert ReadOptions.parse(read_options(), streaming=False).starting.mode == "earliest"
    grouped = ReadOptions.parse(read_options(**{"group.id": "etl"}), streaming=True)
    assert (grouped.starting.mode, grouped.reset) == ("committed", "latest")
    spec = ReadOptions.parse(read_options(startingOffsets='{"clicks": {"1": 5, "0": -2}}'), streaming=True).starting
    assert spec.offsets == {("clicks", 1): 5, ("clicks", 0): -2}


def test_write_options_accept_producer_properties() -> None:
    opts = WriteOptions.parse({"zookeeper.connect": ZK, "topic": "out", "acks": "all", "linger.ms": "20",
                               "checkpointlocation": "/tmp/x"})
    assert opts.producer == {"acks": "all", "linger.ms": "20"}
    with pytest.raises(ConfigError, match="linger.ms"):
        WriteOptions.parse({"zookeeper.connect": ZK, "linger.ms": "-1"})
    with pytest.raises(ConfigError, match="did you mean 'valueFormat'"):
        WriteOptions.parse({"zookeeper.connect": ZK, "valueformats": "json"})


# -- offsets and planning ----------------------------------------------------------------------------------------


def test_spark_offsets_are_sorted_text() -> None:
    offsets = {("b", 10): 1, ("a", 2): 3, ("b", 2): 5}
    assert json.dumps(to_spark(offsets)) == '{"a": {"2": 3}, "b": {"2": 5, "10": 1}}'
    assert from_spark(json.loads(json.dumps(to_spark(offsets)))) == offsets
    assert advance({("a", 0): 5}, {("a", 0): 3, ("a", 1): 0}) == {("a", 0): 5, ("a", 1): 0}


def test_cap_rows_is_proportional_exact_and_deterministic() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    end = {("t", 0): 90, ("t", 1): 110, ("t", 2): 7}
    capped = cap_rows(start, end, 50)
    assert capped == {("t", 0): 45, ("t", 1): 105, ("t", 2): 7}
    assert cap_rows(start, end, 1000) == end
    for limit in range(1, 100):
        got = cap_rows(start, end, limit)
        assert sum(got[k] - start[k] for k in end) == limit
        assert all(start[k] <= got[k] <= end[k] for k in end)


def test_split_ranges_reaches_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 50, 60)]
    pieces = split_ranges(ranges, 7)
    assert len(pieces) >= 7
    covered = sorted((r.partition, o) for r in pieces for o in range(r.start, r.end))
    assert covered == [(0, o) for o in range(1000)] + [(1, o) for o in range(50, 60)]
    assert split_ranges(ranges, 2) == ranges


def test_pack_ranges_balances_tasks_deterministically() -> None:
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate([90, 10, 40, 40, 30, 5])]
    tasks = pack_ranges(ranges, 3)
    assert [[(r.partition, r.end) for r in t.ranges] for t in tasks] == [[(0, 90)], [(1, 10), (3, 40), (5, 5)],
                                                                         [(2, 40), (4, 30)]]
    assert pack_ranges(ranges, 3) == tasks
    assert [t.ranges for t in pack_ranges(ranges, None)] == [(r,) for r in ranges]
    with pytest.raises(ConfigError, match="maxPartitions"):
        ReadOptions.parse(read_options(minPartitions="8", maxPartitions="4"), streaming=False)
    defaulted = ReadOptions.parse(read_options(), streaming=False, default_max_partitions=2)
    assert defaulted.max_partitions == 2
    assert ReadOptions.parse(read_options(minPartitions="8"), streaming=False, default_max_partitions=2) \
        .max_partitions is None  # an explicit minPartitions wins over the registered default


def test_plan_ranges_reads_new_partitions_from_their_log_start() -> None:
    plan = plan_ranges({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, lambda key: None)
    assert [(r.partition, r.start, r.end, r.from_earliest) for r in plan] == [(0, 5, 9, False), (1, 0, 4, True)]
    assert plan_ranges({("t", 0): 5}, {("t", 0): 5}, lambda key: None) == []


def test_resolve_start_clamps_by_fail_on_data_loss() -> None:
    opts = ReadOptions.parse(read_options(**{"group.id": "g"}), streaming=True)
    keys = [("clicks", 0), ("clicks", 1), ("clicks", 2)]
    committed = {("clicks", 0): 3, ("clicks", 1): None, ("clicks", 2): 50}
    earliest, latest = dict.fromkeys(keys, 10), dict.fromkeys(keys, 40)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        resolve_start(opts.starting, keys, committed=committed, earliest=earliest, latest=latest, reset="latest",
                      fail_on_data_loss=True)
    start = resolve_start(opts.starting, keys, committed=committed, earliest=earliest, latest=latest,
                          reset="latest", fail_on_data_loss=False)
    assert start == {("clicks", 0): 10, ("clicks", 1): 40, ("clicks", 2): 40}
    batch = ReadOptions.parse(read_options(endingOffsets='{"clicks": {"0": 20}}'), streaming=False)
    assert resolve_end(batch.ending, {("clicks", 0): 10, ("clicks", 1): 10}, latest) == {
        ("clicks", 0): 20, ("clicks", 1): 40}
    with pytest.raises(ConfigError, match="endingOffsets"):
        resolve_end(batch.ending, {("clicks", 0): 30}, latest)


# -- schema and Arrow --------------------------------------------------------------------------------------------


def test_schema_follows_value_format() -> None:
    default = source_schema(ReadOptions.parse(read_options(), streaming=None))
    assert isinstance(default, StructType)
    assert default.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                      "timestamp:timestamp>")
    ddl = source_schema(ReadOptions.parse(read_options(valueFormat="json", valueSchema="a INT, b STRING"),
                                          streaming=None))
    assert "`value` STRUCT<a INT, b STRING>" in str(ddl)
    with pytest.raises(ConfigError, match="valueFormat"):
        check_schema(StructType([StructField("value", StringType())]),
                     ReadOptions.parse(read_options(), streaming=None))
    with pytest.raises(ConfigError, match="column 'headers' needs option 'includeHeaders'"):
        check_schema(StructType([StructField("headers", StringType())]),
                     ReadOptions.parse(read_options(), streaming=None))
    with pytest.raises(ConfigError, match="unknown column 'header'"):
        check_schema(StructType([StructField("header", StringType())]),
                     ReadOptions.parse(read_options(), streaming=None))


def test_key_format_and_headers_columns() -> None:
    opts = ReadOptions.parse(read_options(keyFormat="string", includeHeaders="true"), streaming=None)
    schema = source_schema(opts)
    assert isinstance(schema, StructType)
    assert schema.simpleString() == ("struct<key:string,value:binary,topic:string,partition:int,offset:bigint,"
                                     "timestamp:timestamp,headers:array<struct<key:string,value:binary>>>")
    ddl = source_schema(ReadOptions.parse(read_options(includeHeaders="true", valueFormat="json",
                                                       valueSchema="a INT"), streaming=None))
    assert str(ddl).startswith("`key` BINARY, `value` STRUCT<a INT>,")
    assert str(ddl).endswith("`headers` ARRAY<STRUCT<key: STRING, value: BINARY>>")
    check_schema(schema, opts)
    with pytest.raises(ConfigError, match="column 'key' must be string .option 'keyFormat'"):
        check_schema(StructType([StructField("key", BinaryType())]), opts)
    with pytest.raises(ConfigError, match="keyFormat"):
        ReadOptions.parse(read_options(keyFormat="json"), streaming=None)
    with pytest.raises(ConfigError, match="includeHeaders"):
        ReadOptions.parse(read_options(includeHeaders="yes"), streaming=None)

    records = [(5, 1000, "ключ".encode(), b"v", (("trace", b"\x01"), ("empty", None))), (6, 1001, None, b"w", ())]
    batch = BatchBuilder(schema, "binary", "t", 3).build(records)
    assert batch.column("key").to_pylist() == ["ключ", None]
    assert batch.column("headers").to_pylist() == [[{"key": "trace", "value": b"\x01"},
                                                    {"key": "empty", "value": None}], []]
    with pytest.raises(DeserializationError, match="key of t/3 at offset 7"):
        BatchBuilder(schema, "binary", "t", 3).build([(7, 0, b"\xff", b"v", ())])


def test_writer_checks_the_headers_column() -> None:
    options = WriteOptions.parse({"zookeeper.connect": ZK, "topic": "out"})
    headers = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    plan = plan_write(options, StructType([StructField("value", BinaryType()), StructField("headers", headers)]))
    assert plan.has_headers
    wrong = ArrayType(StructType([StructField("key", StringType()), StructField("value", StringType())]))
    with pytest.raises(ConfigError, match="column 'headers' must be array<struct<key:string,value:binary>>"):
        plan_write(options, StructType([StructField("value", BinaryType()), StructField("headers", wrong)]))


def test_batch_builder_types_and_errors() -> None:
    schema = StructType.fromJson(json.loads(json.dumps({"type": "struct", "fields": [
        {"name": "offset", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": {"type": "struct", "fields": [
            {"name": "n", "type": "integer", "nullable": True, "metadata": {}}]}, "nullable": True, "metadata": {}},
        {"name": "timestamp", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "topic", "type": "string", "nullable": True, "metadata": {}},
    ]})))
    records = [(7, 1700000000123, None, b'{"n": 1}', ()), (8, 1700000000124, b"k", None, ())]
    batch = BatchBuilder(schema, "json", "t", 0).build(records)
    assert batch.to_pydict()["value"] == [{"n": 1}, None]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1700000000123000, 1700000000124000]
    with pytest.raises(DeserializationError, match="t/0 at offset 9"):
        BatchBuilder(schema, "json", "t", 0).build([(9, 0, None, b"{nope", ())])
    with pytest.raises(DeserializationError, match="offset 10"):
        BatchBuilder(schema, "json", "t", 0).build([(10, 0, None, b'{"n": "x"}', ())])
    text = StructType([StructField("value", StringType())])
    with pytest.raises(DeserializationError, match="t/0 at offset 11"):
        BatchBuilder(text, "string", "t", 0).build([(11, 0, None, b"\xff", ())])


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
