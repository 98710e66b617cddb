"""The ``metaq`` sink: ``df.write.format("metaq")`` and ``df.writeStream.format("metaq")``.

    (df.selectExpr("CAST(user AS STRING) AS key", "struct(*) AS value")
       .write.format("metaq").option("zookeeper.connect", zk).option("topic", "clicks-out")
       .option("valueFormat", "json").mode("append").save())

Columns (those of Spark's Kafka sink): ``value`` (required), ``key`` (binary or string, optional),
``topic`` (string, when option ``topic`` is not set), ``partition`` (integer, optional: otherwise the
producer's partitioner decides) and ``headers`` (``array<struct<key: string, value: binary>>``,
optional); other columns are ignored, so a frame read from metaq can be written back as it is.
``valueFormat``: ``auto`` (binary as is, string as UTF-8, anything else as JSON), ``binary``, ``string``,
``json`` or ``msgpack``. Each task runs its own :class:`metaq.Producer` and fails if any record is not
acknowledged; Spark then retries the task, so delivery is at least once. The producer is idempotent by
default (``acks=all``), so within a task attempt a resend after a lost answer or a broker failover is stored
once, in order; a task *retry* is a new producer and writes every row of the task again (what the failed
attempt had written stays: duplicates are possible then, and only then; docs/delivery-guarantees.md §7).

Batch writes take ``.mode("append")`` (Spark refuses ``.save()``'s default mode, ``errorifexists``, for
Python data sources; ``overwrite`` cannot replace a topic's messages and is refused). Option ``topic``
must name an existing topic: that is checked when the query is planned, not in a task.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from metaq.errors import ConfigError, MetaqError, UnknownTopicError
from metaq.spark.options import WriteOptions

if TYPE_CHECKING:
    from metaq.producer.accumulator import RecordMetadata
    from metaq.producer.producer import Producer

log = logging.getLogger(__name__)

__all__ = ["MetaqBatchWriter", "MetaqCommitMessage", "MetaqStreamWriter", "WriteOptions"]

_SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")
_HEADERS = "array<struct<key:string,value:binary>>"
_CHECK_EVERY = 10000  # records between looks at finished sends, so failures surface early and memory stays flat


@dataclass
class MetaqCommitMessage(WriterCommitMessage):
    """What one task wrote, for the driver's log."""

    records: int


@dataclass(frozen=True)
class _Plan:
    """How each column is turned into producer arguments; decided on the driver from the schema."""

    options: WriteOptions
    value_format: str
    has_key: bool
    key_is_string: bool
    has_topic_column: bool
    has_partition: bool
    has_headers: bool = False


def plan_write(options: WriteOptions, schema: StructType) -> _Plan:
    """Check the frame's columns against the options; errors name the column or option to change."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigError(f"metaq sink: the frame needs a 'value' column (it has {', '.join(types) or 'none'})")
    value_format = _value_format(options.value_format, types["value"])
    key_type = types.get("key")
    if key_type is not None and not isinstance(key_type, BinaryType | StringType):
        raise ConfigError(f"metaq sink: column 'key' must be binary or string, not {key_type.simpleString()}")
    if options.topic is None and not isinstance(types.get("topic"), StringType):
        raise ConfigError("metaq sink: option 'topic' is required unless the frame has a string column 'topic'")
    partition_type = types.get("partition")
    if partition_type is not None and not isinstance(partition_type, IntegerType | LongType | ShortType):
        raise ConfigError(f"metaq sink: column 'partition' must be an integer, not {partition_type.simpleString()}")
    headers_type = types.get("headers")
    if headers_type is not None and not _is_headers(headers_type):
        raise ConfigError(f"metaq sink: column 'headers' must be {_HEADERS}, not {headers_type.simpleString()}")
    ignored = [name for name in types if name not in _SINK_COLUMNS]
    if ignored:
        log.info("metaq sink: ignoring columns %s", ", ".join(ignored))
    return _Plan(options, value_format, key_type is not None, isinstance(key_type, StringType),
                 options.topic is None, partition_type is not None, headers_type is not None)


def _is_headers(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (set(fields) == {"key", "value"} and isinstance(fields["key"], StringType)
            and isinstance(fields["value"], BinaryType))


def check_topic_exists(options: WriteOptions) -> None:
    """Option ``topic`` must exist: checked when the write is planned, so that a typo fails the query at
    once with the topic's name rather than later in every task."""
    if options.topic is None:
        return
    from metaq.zkclient import session
    from metaq.zksecurity import security_from_properties
    from zk_layout import ZkLayout

    with session(options.zookeeper_connect, security=security_from_properties(options.producer)) as client:
        exists = ZkLayout(client).topic_assignment(options.topic) is not None
    if not exists:
        raise UnknownTopicError(f"metaq sink: topic {options.topic!r} (option 'topic') does not exist in "
                                f"{options.zookeeper_connect}; create it first (metaq topics create)")


def _value_format(requested: str, value_type: DataType) -> str:
    if requested == "auto":
        if isinstance(value_type, BinaryType):
            return "binary"
        return "string" if isinstance(value_type, StringType) else "json"
    needed = {"binary": BinaryType, "string": StringType}.get(requested)
    if needed is not None and not isinstance(value_type, needed):
        raise ConfigError(f"option 'valueFormat': {requested} needs a {requested} 'value' column, "
                          f"not {value_type.simpleString()}")
    return requested


def write_batches(plan: _Plan, batches: Iterator[pa.RecordBatch]) -> MetaqCommitMessage:
    """One task: produce every row, wait for every acknowledgement (on an executor)."""
    from metaq import Producer

    encode_value = _value_encoder(plan.value_format)
    sent = 0
    with Producer({"zookeeper.connect": plan.options.zookeeper_connect, **plan.options.producer}) as producer:
        pending: deque[Future[RecordMetadata]] = deque()
        for batch in batches:
            sent += _send_batch(producer, plan, batch, encode_value, pending)
            _check_done(pending)
        producer.flush()
        while pending:
            _raise_if_failed(pending.popleft())
    return MetaqCommitMessage(sent)


def _send_batch(producer: Producer, plan: _Plan, batch: pa.RecordBatch, encode_value: Callable[[Any], bytes | None],
                pending: deque[Future[RecordMetadata]]) -> int:
    values = batch.column("value").to_pylist()
    keys = _bytes_column(batch, "key", plan.key_is_string) if plan.has_key else None
    topics = batch.column("topic").to_pylist() if plan.has_topic_column else None
    partitions = batch.column("partition").to_pylist() if plan.has_partition else None
    headers = batch.column("headers").to_pylist() if plan.has_headers else None
    for i, value in enumerate(values):
        topic = plan.options.topic or (topics[i] if topics is not None else None)
        if not topic:
            raise MetaqError(f"metaq sink: row {i} of a batch has no topic (null 'topic' and no option 'topic')")
        try:
            payload = encode_value(value)
        except (TypeError, ValueError, OverflowError) as e:
            raise MetaqError(f"metaq sink: the value of a row for topic {topic!r} cannot be written as "
                             f"{plan.value_format}: {e}") from e
        row_headers = _row_headers(headers[i], topic) if headers is not None else None
        pending.append(producer.send(topic, payload, key=keys[i] if keys is not None else None,
                                     partition=partitions[i] if partitions is not None else None,
                                     headers=row_headers))
        if i % _CHECK_EVERY == _CHECK_EVERY - 1:
            _check_done(pending)
    return len(values)


def _row_headers(items: list[dict[str, Any]] | None, topic: str) -> list[tuple[str, bytes | None]]:
    """One row's ``headers`` as producer headers; Kafka headers need a key."""
    if not items:
        return []
    result = []
    for item in items:
        if item is None or item["key"] is None:
            raise MetaqError(f"metaq sink: a row for topic {topic!r} has a header without a key")
        result.append((item["key"], item["value"]))
    return result


def _bytes_column(batch: pa.RecordBatch, name: str, is_string: bool) -> list[bytes | None]:
    column = batch.column(name)
    values: list[bytes | None] = (column.cast(pa.binary()) if is_string else column).to_pylist()
    return values


def _value_encoder(value_format: str) -> Callable[[Any], bytes | None]:
    if value_format == "binary":
        return lambda value: value
    if value_format == "string":
        return lambda value: None if value is None else value.encode("utf-8")
    from metaq.consumer.serde import get_serializer

    return get_serializer(value_format)


def _check_done(pending: deque[Future[RecordMetadata]]) -> None:
    while pending and pending[0].done():
        _raise_if_failed(pending.popleft())


def _raise_if_failed(future: Future[RecordMetadata]) -> None:
    error = future.exception()
    if error is not None:
        raise MetaqError(f"metaq sink: a record was not acknowledged: {error}") from error


class MetaqBatchWriter(DataSourceArrowWriter):
    """``df.write.format("metaq")``; see the module docstring."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.plan = plan_write(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MetaqCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("metaq sink: wrote %d records", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("metaq sink: write failed after %d records were acknowledged (they stay in the topic)",
                    _total(messages))


class MetaqStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("metaq")``: each micro-batch as a batch write (at least once)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.plan = plan_write(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MetaqCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("metaq sink: micro-batch %d wrote %d records", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("metaq sink: micro-batch %d failed after %d records were acknowledged", batchId,
                    _total(messages))


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, MetaqCommitMessage))
