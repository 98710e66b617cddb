"""The Spark source's parts without Spark or a broker: options, offset arithmetic, planning, schemas and Arrow
batches."""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from metaq.errors import ConfigError, DataLossError, DeserializationError
from metaq.protocol.records import RecordColumns
from metaq.spark.arrow import BatchBuilder
from metaq.spark.fetch import _drop_aborted
from metaq.spark.offset_ranges import advance, cap_rows, from_spark, to_spark
from metaq.spark.options import ReadOptions, WriteOptions
from metaq.spark.planning import OffsetRange, pack_ranges, plan_ranges, resolve_end, resolve_start, split_ranges
from metaq.spark.schema import check_schema, source_schema
from metaq.spark.writer import plan_write

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
    (read_options(**{"broker.version.fallback": "0.7"}), "broker.version.fallback"),
    (read_options(**{"group.id": "etl", "group.coordination": "broker"}), "group.coordination"),
    (read_options(**{"group.coordination": "kafka"}), "group.coordination"),  # no group.id: nothing to keep
])
def test_bad_read_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        ReadOptions.parse({k.lower(): v for k, v in options.items()}, streaming=None)


def test_isolation_level() -> None:
    """metaq's options are the consumer's property names: Spark's Kafka source spelling is refused, naming ours."""
    assert ReadOptions.parse(read_options(), streaming=None).isolation == 0
    assert ReadOptions.parse(read_options(**{"isolation.level": "READ_COMMITTED"}), streaming=None).isolation == 1
    with pytest.raises(ConfigError, match="'isolation.level': 'committed' must be one of"):
        ReadOptions.parse(read_options(**{"isolation.level": "committed"}), streaming=None)
    with pytest.raises(ConfigError, match="did you mean 'isolation.level'"):
        ReadOptions.parse(read_options(**{"kafka.isolation.level": "read_committed"}), streaming=None)


def test_group_coordination() -> None:
    """The consumer's property name and values; ZooKeeper unless asked, and kept for the executors' pickles."""
    assert ReadOptions.parse(read_options(**{"group.id": "etl"}), streaming=True).group_coordination == "zookeeper"
    parsed = ReadOptions.parse(read_options(**{"group.id": "etl", "group.coordination": "Kafka"}), streaming=False)
    assert parsed.group_coordination == "kafka"
    assert pickle.loads(pickle.dumps(parsed)).group_coordination == "kafka"


BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092,[::1]:9093", "subscribe": "clicks"}


def test_bootstrap_servers_instead_of_zookeeper() -> None:
    """``bootstrap.servers`` alone names the cluster (Metadata, no ZooKeeper); a group's offsets then need
    group.coordination=kafka; both settings, neither, or ZooKeeper's own options are refused, naming the option."""
    parsed = ReadOptions.parse({**BOOTSTRAP, "group.id": "etl", "group.coordination": "kafka"}, streaming=True)
    assert (parsed.zookeeper_connect, parsed.bootstrap_servers) == (None, "127.0.0.1:9092,[::1]:9093")
    assert pickle.loads(pickle.dumps(parsed)).bootstrap_servers == parsed.bootstrap_servers
    assert ReadOptions.parse(BOOTSTRAP, streaming=False).starting.mode == "earliest"  # no group: nothing stored
    assert ReadOptions.parse(read_options(), streaming=None).bootstrap_servers is None
    refused = [
        ({"subscribe": "clicks", "group.id": "etl"}, "'zookeeper.connect' or 'bootstrap.servers': a value"),
        ({**BOOTSTRAP, "zookeeper.connect": ZK}, "'bootstrap.servers': give it or option 'zookeeper.connect'"),
        ({**BOOTSTRAP, "group.id": "etl"}, r"'group.coordination': 'zookeeper' \(the default\) keeps"),
        ({**BOOTSTRAP, "group.id": "etl", "group.coordination": "zookeeper"},
         "'group.coordination': 'zookeeper' keeps"),
        ({**BOOTSTRAP, "bootstrap.servers": "broker1"}, "'bootstrap.servers': 'broker1': expected HOST:PORT"),
        ({**BOOTSTRAP, "zookeeper.session.timeout.ms": "5000"}, "'zookeeper.session.timeout.ms': only with option"),
        ({**BOOTSTRAP, "zookeeper.auth": "file:/x"}, "'zookeeper.auth': only with option 'zookeeper.connect'"),
        ({**BOOTSTRAP, "kafka.bootstrap.servers": "b:9092"}, "did you mean 'bootstrap.servers'"),
    ]
    for options, message in refused:
        with pytest.raises(ConfigError, match=message):
            ReadOptions.parse({k.lower(): v for k, v in options.items()}, streaming=None)


def test_read_committed_drops_aborted_ranges() -> None:
    columns = RecordColumns.from_records([(o, 0, None, b"v%d" % o, ()) for o in (3, 4, 5, 7, 8, 10, 12)])
    _drop_aborted(columns, [(4, 5), (8, 9), (12, 12)])
    assert columns.offsets == [3, 7, 10]
    assert columns.values == [b"v3", b"v7", b"v10"]


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
