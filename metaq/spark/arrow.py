"""Decoded records of one partition as Arrow record batches of the read's schema (on executors).

    builder = BatchBuilder(schema, "json", "clicks", 0)
    batch = builder.build(records)      # pyarrow.RecordBatch; Spark checks its schema against the read's

Columns are built with numpy and pyarrow from whole chunks rather than row by row: in Python, row tuples
would cost more than decoding the records did. A value that does not decode in the chosen ``valueFormat``
raises :class:`DeserializationError` naming its topic, partition and offset.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructType

from metaq.errors import DeserializationError

Record = tuple[int, int, bytes | None, bytes | None, Any]
Column = Callable[[Sequence[Record]], pa.Array]

_OFFSET, _TIMESTAMP, _KEY, _VALUE, _HEADERS = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3), itemgetter(4)


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

    def build(self, records: Sequence[Record]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([column(records) for column in self._columns], schema=self.schema)

    def _column(self, name: str) -> Column:
        return {
            "key": self._key,
            "value": self._value,
            "topic": self._topic,
            "partition": lambda records: pa.array(np.full(len(records), self.partition, dtype=np.int32)),
            "offset": lambda records: pa.array(_int64(records, _OFFSET)),
            "timestamp": self._timestamp,
            "headers": self._headers,
        }[name]

    def _key(self, records: Sequence[Record]) -> pa.Array:
        raw = list(map(_KEY, records))
        return self._utf8(raw, records, "key") if self._key_is_text else pa.array(raw, pa.binary())

    def _headers(self, records: Sequence[Record]) -> pa.Array:
        rows = [[{"key": k, "value": v} for k, v in headers] for headers in map(_HEADERS, records)]
        return pa.array(rows, self.schema.field("headers").type)

    def _topic(self, records: Sequence[Record]) -> pa.Array:
        indices = pa.array(np.zeros(len(records), dtype=np.int32))
        return pa.DictionaryArray.from_arrays(indices, pa.array([self.topic])).cast(pa.string())

    def _timestamp(self, records: Sequence[Record]) -> pa.Array:
        micros = _int64(records, _TIMESTAMP) * 1000  # Kafka stores milliseconds, Spark microseconds
        return pa.array(micros).cast(self.schema.field("timestamp").type)

    # -- value --------------------------------------------------------------------------------------------

    def _value(self, records: Sequence[Record]) -> pa.Array:
        raw = list(map(_VALUE, records))
        fmt = self.value_format
        if fmt == "binary":
            return pa.array(raw, pa.binary())
        if fmt == "string" or (fmt == "json" and self._value_is_text):
            return self._utf8(raw, records, "value")
        objects = self._decode_all(raw, records)
        if fmt == "msgpack" and self._value_is_text:
            return pa.array([None if o is None else json.dumps(o, default=_json_default) for o in objects],
                            pa.string())
        return self._structured(objects, records)

    def _utf8(self, raw: list[bytes | None], records: Sequence[Record], part: str) -> pa.Array:
        try:
            return pa.array(raw, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:
            for record, data in zip(records, raw, strict=True):
                if data is not None:
                    self._decode_one("str", data, record, part)
            raise

    def _decode_all(self, raw: list[bytes | None], records: Sequence[Record]) -> list[Any]:
        from metaq.consumer.serde import get_deserializer

        fn = get_deserializer(self.value_format)
        try:
            return [fn(data) for data in raw]
        except DeserializationError:
            for record, data in zip(records, raw, strict=True):
                self._decode_one(self.value_format, data, record)
            raise

    def _decode_one(self, fmt: str, data: bytes | None, record: Record, part: str = "value") -> Any:
        from metaq.consumer.serde import describe_position, deserialize, get_deserializer

        where = describe_position(self.topic, self.partition, record[0], part)
        return deserialize(get_deserializer(fmt), data, where)

    def _structured(self, objects: list[Any], records: Sequence[Record]) -> pa.Array:
        value_type = self.schema.field("value").type
        try:
            return pa.array(objects, value_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            for record, obj in zip(records, objects, strict=True):
                try:
                    pa.array([obj], value_type)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                    raise DeserializationError(
                        f"value of {self.topic}/{self.partition} at offset {record[0]} does not fit "
                        f"the value schema {value_type}: {e}") from e
            raise


def _int64(records: Sequence[Record], field: Callable[[Record], int]) -> np.ndarray:
    return np.fromiter(map(field, records), dtype=np.int64, count=len(records))


def _json_default(obj: Any) -> Any:
    """msgpack binaries have no JSON form: they become base64 text."""
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(obj)).decode("ascii")
    raise TypeError(f"{type(obj).__name__} has no JSON form")
