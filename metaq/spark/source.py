"""The ``metaq`` data source: batch and streaming reads that start from a group's ZooKeeper offsets (or, with
``group.coordination=kafka``, its offsets in ``__consumer_offsets``).

    metaq.spark.register(spark)
    df = (spark.readStream.format("metaq")
          .option("zookeeper.connect", "127.0.0.1:2181/metaq").option("subscribe", "clicks")
          .option("group.id", "clicks-etl").load())
    df = (spark.readStream.format("metaq")                  # no ZooKeeper: Metadata, ListOffsets, OffsetCommit
          .option("bootstrap.servers", "broker1:9092").option("subscribe", "clicks")
          .option("group.id", "clicks-etl").option("group.coordination", "kafka").load())

Where each part runs (PySpark 4.3): ``schema``, ``reader`` and ``streamReader`` run in Python workers the
driver starts for planning, so options are checked there; the stream reader's offset methods run in one
long-lived runner process per query, which keeps the ZooKeeper session; ``read`` runs on executors with a
pickled copy of the reader (so the reader holds no connections when it is pickled).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from metaq.errors import ConfigError
from metaq.spark.arrow import BatchBuilder
from metaq.spark.cluster import Cluster
from metaq.spark.fetch import FetchSettings, read_range
from metaq.spark.offset_ranges import (
    EARLIEST,
    LATEST,
    Offsets,
    TopicPartition,
    advance,
    cap_rows,
    from_spark,
    to_spark,
    total_rows,
)
from metaq.spark.options import ReadOptions
from metaq.spark.planning import RangeTask, clamp, pack_ranges, plan_ranges, resolve_end, starting_offsets
from metaq.spark.schema import check_schema, source_schema

log = logging.getLogger(__name__)

FORMAT = "metaq"
MAX_BATCH_ROWS = 65536
"""Rows per Arrow batch handed to Spark at most: a Fetch of small records can hold far more (a JVM
buffer per batch), and Spark's own Arrow batches are no larger (``spark.sql.execution.arrow.maxRecordsPerBatch``
defaults to 10,000)."""
_RUNNER_SCRIPT = "python_streaming_source_runner.py"


class MetaqDataSource(DataSource):
    """``format("metaq")``: reads (batch and streaming) and writes (see :mod:`metaq.spark.writer`).

    ``default_max_partitions`` is the ``maxPartitions`` of reads that set none; :func:`metaq.spark.register`
    sets it to the session's cores in a subclass of its own (pickled by value, so Spark's Python workers
    see it too)."""

    default_max_partitions: ClassVar[int | None] = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType | str:
        return source_schema(self._read_options(None))

    def reader(self, schema: StructType) -> DataSourceReader:
        return MetaqBatchReader(self._read_options(False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MetaqStreamReader(self._read_options(True), schema)

    def _read_options(self, streaming: bool | None) -> ReadOptions:
        return ReadOptions.parse(self.options, streaming=streaming, default_max_partitions=self.default_max_partitions)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from metaq.spark.writer import MetaqBatchWriter, WriteOptions, check_topic_exists

        if overwrite:
            raise ConfigError('metaq sink: mode "overwrite" cannot replace the messages of a topic; '
                              'use .mode("append")')
        options = WriteOptions.parse(self.options)
        writer = MetaqBatchWriter(options, schema)
        check_topic_exists(options)
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``overwrite`` is not refused here: like Kafka's sink, a stream appends its result rows."""
        from metaq.spark.writer import MetaqStreamWriter, WriteOptions, check_topic_exists

        options = WriteOptions.parse(self.options)
        writer = MetaqStreamWriter(options, schema)
        check_topic_exists(options)
        return writer


class _RangeReading:
    """``read()`` shared by both readers: one planned range to Arrow batches, on an executor."""

    options: ReadOptions
    schema: StructType

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangeTask):  # Spark's placeholder when nothing was planned
            return iter(())
        return self._read(partition)

    def _read(self, task: RangeTask) -> Iterator[pa.RecordBatch]:
        o = self.options
        settings = FetchSettings(o.zookeeper_connect, o.client_id, o.fetch_max_bytes, o.request_timeout_ms,
                                 o.fail_on_data_loss, o.zk_session_timeout_ms, o.zk_connection_timeout_ms,
                                 o.zk_security, o.security, broker_version_fallback=o.broker_version_fallback,
                                 isolation_level=o.isolation, bootstrap_servers=o.bootstrap_servers)
        headers = "headers" in self.schema.fieldNames()
        for r in task.ranges:
            builder = BatchBuilder(self.schema, o.value_format, r.topic, r.partition)
            for columns in read_range(r, settings, headers=headers):
                batch = builder.build(columns)
                for start in range(0, batch.num_rows, MAX_BATCH_ROWS):  # slices share the batch's buffers
                    yield batch.slice(start, MAX_BATCH_ROWS)


class MetaqBatchReader(_RangeReading, DataSourceReader):
    """``spark.read.format("metaq")``: from ``startingOffsets`` to ``endingOffsets``, planned once."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        o = self.options
        with Cluster.for_read(o) as cluster:
            start, latest = starting_offsets(cluster, o, cluster.partitions(cluster.topics(o.subscription)))
            end = resolve_end(o.ending, start, latest)
            ranges = plan_ranges(start, end, cluster.leader, min_partitions=o.min_partitions)
        tasks = pack_ranges(ranges, o.max_partitions)
        log.info("metaq: batch read of %d offsets in %d tasks", sum(r.end - r.start for r in ranges), len(tasks))
        return list(tasks)


class MetaqStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("metaq")``; offsets are ``{"topic": {"partition": next offset}}``.

    ZooKeeper offsets: Spark hands ``commit(end)`` over one batch late, but it only asks for the latest
    offset from a start once the batch ending there has completed (its commit log is written). So the
    start of each :meth:`latestOffset` call is committed too: the group's offsets follow the query within
    a trigger, and the last batch is committed at the next poll after it ends (right away with the default
    trigger, also while idle) rather than never.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options
        self.schema = schema
        self._cluster: Cluster | None = None
        self._initial: Offsets | None = None
        self._target: Offsets | None = None
        self._latest: Offsets = {}
        self._truncated: set[TopicPartition] = set()
        _stop_on_sigterm_in_runner()

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the options and schema only; connections stay in the runner."""
        return {"options": self.options, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["schema"])  # type: ignore[misc]

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster.for_read(self.options)
        return self._cluster

    # -- offsets (runner) ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Where a query without a checkpoint starts; Spark may ask twice, so the answer is kept."""
        if self._initial is None:
            cluster = self.cluster
            keys = cluster.partitions(cluster.topics(self.options.subscription))
            self._initial = starting_offsets(cluster, self.options, keys)[0]
            log.info("metaq: stream starts at %s", to_spark(self._initial))
        return to_spark(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        """The end of the next batch: the logs' ends (new partitions included), capped by ``limit``."""
        begin = from_spark(start)
        self._commit(begin)  # the batch that ended at ``start`` has completed: see the class docstring
        lower, end = self._available(begin)
        if isinstance(limit, ReadMaxRows):
            end = cap_rows(lower, end, limit.max_rows)
        elif isinstance(limit, ReadMinRows) and total_rows(lower, end) < limit.min_rows:
            end = dict(begin)
        return to_spark(advance(begin, end))

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return to_spark(self._latest) if self._latest else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the logs' ends as they are now, and no further."""
        cluster = self.cluster
        keys = cluster.partitions(cluster.topics(self.options.subscription, strict=False))
        self._target = cluster.log_offsets(keys, LATEST)
        log.info("metaq: AvailableNow reads up to %s", to_spark(self._target))

    def _available(self, begin: Offsets) -> tuple[Offsets, Offsets]:
        """(where each partition's backlog starts, where it ends). A partition missing from ``begin`` is
        new: its backlog starts at its log start."""
        o, cluster = self.options, self.cluster
        keys = cluster.partitions(cluster.topics(o.subscription, strict=False))
        if self._target is not None:
            keys = [k for k in keys if k in self._target]
        latest = cluster.log_offsets(keys, LATEST)
        if self._target is not None:
            latest = {k: min(v, self._target[k]) for k, v in latest.items()}
        self._latest = latest
        new = [k for k in keys if k not in begin]
        lower = dict(begin)
        if new:
            log.info("metaq: new partitions %s are read from their log start", new)
            lower.update(cluster.log_offsets(new, EARLIEST))
        end = {k: self._checked_end(k, begin.get(k), v) for k, v in latest.items()}
        return lower, end

    def _checked_end(self, key: TopicPartition, begin: int | None, latest: int) -> int:
        """A log end below where the stream already is means the log was truncated or recreated."""
        if begin is None or latest >= begin:
            self._truncated.discard(key)
            return latest
        if key not in self._truncated:  # polled up to a hundred times a second: warn once
            clamp(key, begin, 0, latest, self.options.fail_on_data_loss, what="stream position")
            self._truncated.add(key)
        return begin

    # -- tasks (runner) and commits ------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = from_spark(start), from_spark(end)
        if begin == finish:
            return []
        o = self.options
        self.cluster.topics(o.subscription, strict=False)  # leaders for the plan
        ranges = plan_ranges(begin, finish, self.cluster.leader, min_partitions=o.min_partitions)
        return list(pack_ranges(ranges, o.max_partitions))

    def commit(self, end: dict[str, Any]) -> None:
        self._commit(from_spark(end))

    def _commit(self, offsets: Offsets) -> None:
        group = self.options.group_id
        if group is None or not offsets:
            return
        try:
            self.cluster.commit(group, offsets)
        except Exception as e:  # advisory for tools: a ZooKeeper or coordinator hiccup must not fail the query
            log.warning("metaq: could not commit offsets of group %s (group.coordination=%s; retried with the "
                        "next batch): %s", group, self.options.group_coordination, e)

    def stop(self) -> None:
        """Close the ZooKeeper session and broker connections; idempotent."""
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.close()


def _stop_on_sigterm_in_runner() -> None:
    """``query.stop()`` ends the runner with SIGTERM; without a handler the runner's ``finally:
    reader.stop()`` never runs and the ZooKeeper session lingers until it times out."""
    if not sys.argv or not sys.argv[0].endswith(_RUNNER_SCRIPT):
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SystemExit unwinds through that finally
