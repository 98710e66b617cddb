"""Requests built from plain values (nested structs may be given as dicts) and the tagged fields of a flexible
response header skipped: the encoding around kafka-python's message classes that
:class:`metaq.client.connection.BrokerConnection` and the ops tools use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage


def build_request(request_class: type[ApiMessage], version: int, fields: Mapping[str, Any]) -> ApiMessage:
    """A versioned request from plain values; nested structs may be given as dicts."""
    return request_class[version](**_containers(request_class.fields, fields))


def _containers(field_map: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        field = field_map.get(name)
        if field is not None and value is not None:
            if field.is_struct_array():
                value = [_container(field, item) for item in value]
            elif field.is_struct():
                value = _container(field, value)
        out[name] = value
    return out


def _container(field: Any, item: Any) -> Any:
    if isinstance(item, Mapping):
        return field.data_class(**_containers(field.fields, item))
    return item


def _skip_tagged_fields(frame: memoryview, pos: int) -> int:
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
    return pos


def _read_uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
