"""Decoded records of one partition as Arrow record batches of the read's schema (on executors).

    builder = BatchBuilder(schema, "json", "clicks", 0)
    batch = builder.build(columns)      # pyarrow.RecordBatch; Spark checks its schema against the read's

Columns are built with numpy and pyarrow from the decoder's own lists (:class:`RecordColumns`), never row
by row: in Python, a tuple per record would cost about as much as decoding it. A value that does not decode
in the chosen ``valueFormat`` raises :class:`DeserializationError` naming its topic, partition and offset.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructType

from metaq.errors import DeserializationError
from metaq.protocol.record_types import Record
from metaq.protocol.records import RecordColumns

Column = Callable[[RecordColumns], pa.Array]


class BatchBuilder:
    """Builds record batches for one partition; see the module docstring."""

    def __init__(self, schema: StructType, value_format: str, topic: str, partition: int) -> None:
        self.schema = to_arrow_schema(schema, timezone="UTC")
        self.topic = topic
        self.partition = partition
        self.value_format = value_format
        types = {f.name: f.dataType for f in schema.fields}
        self._value_is_text = isinstance(types.get("value", StringType()), StringType)
        self._key_is_text = isinstance(types.get("key"), StringType)
        self._columns: list[Column] = [self._column(name) for name in schema.fieldNames()]

    def build(self, records: RecordColumns | Iterable[Record]) -> pa.RecordBatch:
        """One batch of ``records`` (tuples are taken too: tests, and callers that have them)."""
        columns = records if isinstance(records, RecordColumns) else RecordColumns.from_records(records)
        return pa.RecordBatch.from_arrays([column(columns) for column in self._columns], schema=self.schema)

    def _column(self, name: str) -> Column:
        return {
            "key": self._key,
            "value": self._value,
            "topic": self._topic,
            "partition": lambda c: pa.array(np.full(len(c), self.partition, dtype=np.int32)),
            "offset": lambda c: pa.array(np.array(c.offsets, dtype=np.int64)),
            "timestamp": self._timestamp,
            "headers": self._headers,
        }[name]

    def _key(self, c: RecordColumns) -> pa.Array:
        return self._utf8(c.keys, c.offsets, "key") if self._key_is_text else pa.array(c.keys, pa.binary())

    def _headers(self, c: RecordColumns) -> pa.Array:
        assert c.headers is not None, "the reader decodes headers when the schema has them"
        rows = [[{"key": k, "value": v} for k, v in headers] for headers in c.headers]
        return pa.array(rows, self.schema.field("headers").type)

    def _topic(self, c: RecordColumns) -> pa.Array:
        indices = pa.array(np.zeros(len(c), dtype=np.int32))
        return pa.DictionaryArray.from_arrays(indices, pa.array([self.topic])).cast(pa.string())

    def _timestamp(self, c: RecordColumns) -> pa.Array:
        micros = np.array(c.timestamps, dtype=np.int64) * 1000  # Kafka stores milliseconds, Spark microseconds
        return pa.array(micros).cast(self.schema.field("timestamp").type)

    # -- value --------------------------------------------------------------------------------------------

    def _value(self, c: RecordColumns) -> pa.Array:
        raw, offsets = c.values, c.offsets
        fmt = self.value_format
        if fmt == "binary":
            return pa.array(raw, pa.binary())
        if fmt == "string" or (fmt == "json" and self._value_is_text):
            return self._utf8(raw, offsets, "value")
        objects = self._decode_all(raw, offsets)
        if fmt == "msgpack" and self._value_is_text:
            return pa.array([None if o is None else json.dumps(o, default=_json_default) for o in objects],
                            pa.string())
        return self._structured(objects, offsets)

    def _utf8(self, raw: list[bytes | None], offsets: list[int], part: str) -> pa.Array:
        try:
            return pa.array(raw, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:
            for offset, data in zip(offsets, raw, strict=True):
                if data is not None:
                    self._decode_one("str", data, offset, part)
            raise

    def _decode_all(self, raw: list[bytes | None], offsets: list[int]) -> list[Any]:
        from metaq.consumer.serde import get_deserializer

        fn = get_deserializer(self.value_format)
        try:
            return [fn(data) for data in raw]
        except DeserializationError:
            for offset, data in zip(offsets, raw, strict=True):
                self._decode_one(self.value_format, data, offset)
            raise

    def _decode_one(self, fmt: str, data: bytes | None, offset: int, part: str = "value") -> Any:
        from metaq.consumer.serde import describe_position, deserialize, get_deserializer

        where = describe_position(self.topic, self.partition, offset, part)
        return deserialize(get_deserializer(fmt), data, where)

    def _structured(self, objects: list[Any], offsets: list[int]) -> pa.Array:
        value_type = self.schema.field("value").type
        try:
            return pa.array(objects, value_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            for offset, obj in zip(offsets, objects, strict=True):
                try:
                    pa.array([obj], value_type)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                    raise DeserializationError(
                        f"value of {self.topic}/{self.partition} at offset {offset} does not fit "
                        f"the value schema {value_type}: {e}") from e
            raise


def _json_default(obj: object) -> str:
    """msgpack binaries have no JSON form: they become base64 text."""
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(obj)).decode("ascii")
    raise TypeError(f"{type(obj).__name__} has no JSON form")
