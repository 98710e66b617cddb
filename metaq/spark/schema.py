"""The columns of a metaq read: those of Spark's own Kafka source, with ``value`` typed by ``valueFormat``,
``key`` by ``keyFormat`` and ``headers`` only with ``includeHeaders`` (as Spark's Kafka source).

    source_schema(options)          # key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp
    check_schema(schema, options)   # a schema given with .schema(...): known columns, types that fit

A user schema may leave columns out or reorder them; ``value`` may then be a struct (or array or map) for
``valueFormat`` json or msgpack, which is the other way to give what ``valueSchema`` gives.
"""

from __future__ import annotations

import json

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from metaq.errors import ConfigError
from metaq.spark.options import ReadOptions

FIXED_COLUMNS: dict[str, DataType] = {
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "timestamp": TimestampType(),
}
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
"""Column ``headers`` (option ``includeHeaders``): Spark's Kafka source's type."""
COLUMN_ORDER = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
_DDL = {"topic": "STRING", "partition": "INT", "offset": "BIGINT", "timestamp": "TIMESTAMP",
        "headers": "ARRAY<STRUCT<key: STRING, value: BINARY>>"}


def columns(options: ReadOptions) -> tuple[str, ...]:
    """The default columns, in order: ``headers`` only with ``includeHeaders``."""
    return COLUMN_ORDER if options.include_headers else COLUMN_ORDER[:-1]


def source_schema(options: ReadOptions) -> StructType | str:
    """The default schema: a StructType, or DDL text when ``valueSchema`` is DDL (only the JVM parses DDL,
    and this runs in a Python worker that has none)."""
    fmt, given = options.value_format, options.value_schema
    if fmt in ("json", "msgpack") and given is not None and not given.startswith("{"):
        ddl = {**_DDL, "key": key_type(options).simpleString().upper(), "value": f"STRUCT<{given}>"}
        return ", ".join(f"`{name}` {ddl[name]}" for name in columns(options))
    schema = StructType()
    for name in columns(options):
        schema.add(name, column_type(name, options))
    return schema


def column_type(name: str, options: ReadOptions) -> DataType:
    """The type of column ``name`` (one of :data:`COLUMN_ORDER`) under ``options``."""
    if name == "value":
        return value_type(options)
    if name == "key":
        return key_type(options)
    return HEADERS_TYPE if name == "headers" else FIXED_COLUMNS[name]


def key_type(options: ReadOptions) -> DataType:
    return StringType() if options.key_format == "string" else BinaryType()


def value_type(options: ReadOptions) -> DataType:
    """``value``'s type for a format without a DDL schema."""
    if options.value_format == "binary":
        return BinaryType()
    if options.value_schema is not None:
        return StructType.fromJson(json.loads(options.value_schema))
    return StringType()  # string, and json/msgpack without a schema: the text (msgpack re-encoded as JSON)


def check_schema(schema: StructType, options: ReadOptions) -> None:
    """Refuse a schema whose columns the source cannot produce, naming the column and what would fit."""
    if not schema.fields:
        raise ConfigError("metaq: the schema has no columns; leave .schema() out for the default one")
    for field in schema.fields:
        if field.name == "value":
            _check_value(field.dataType, options.value_format)
        elif field.name == "headers" and not options.include_headers:
            raise ConfigError("metaq: column 'headers' needs option 'includeHeaders' set to true")
        elif field.name in COLUMN_ORDER:
            expected = column_type(field.name, options)
            if field.dataType != expected:
                hint = " (option 'keyFormat')" if field.name == "key" else ""
                raise ConfigError(f"metaq: column {field.name!r} must be {expected.simpleString()}{hint}, "
                                  f"not {field.dataType.simpleString()}")
        else:
            raise ConfigError(f"metaq: unknown column {field.name!r}; the source has {', '.join(COLUMN_ORDER)}")


def _check_value(data_type: DataType, value_format: str) -> None:
    fits = {
        "binary": isinstance(data_type, BinaryType),
        "string": isinstance(data_type, StringType),
        "json": isinstance(data_type, StringType | StructType | ArrayType | MapType),
        "msgpack": isinstance(data_type, StringType | StructType | ArrayType | MapType),
    }[value_format]
    if not fits:
        wanted = {"binary": "binary", "string": "string"}.get(value_format, "string, struct, array or map")
        raise ConfigError(f"option 'valueFormat': {value_format} values make a {wanted} column 'value', "
                          f"not {data_type.simpleString()}")
