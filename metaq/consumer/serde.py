"""Key/value (de)serializers, chosen by name or given as a callable.

Kafka 0.8 took ``Decoder`` objects; here a spec is ``"bytes"`` (the default), ``"str"`` (UTF-8), ``"json"``,
``"msgpack"`` or any callable. ``None`` (a null key, a tombstone) always stays ``None``: a user callable is
never called with it. A failing decode raises :class:`~metaq.errors.DeserializationError`, and
:func:`deserialize` adds where the record came from::

    value_of = get_deserializer("json")
    deserialize(value_of, raw, describe_position("clicks", 0, 42))   # ... "value of clicks/0 at offset 42" ...
    get_serializer("json")({"a": 1})                                  # b'{"a":1}'

Every function returned here is picklable when its callable is (Spark ships them to executors).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import msgpack

from metaq.errors import ConfigError, DeserializationError

Deserializer = Callable[[bytes | None], Any]
Serializer = Callable[[Any], bytes | None]
DeserializerSpec = str | Callable[[bytes], Any] | None
SerializerSpec = str | Callable[[Any], bytes] | None

_PREVIEW: Final = 32  # bytes of a failing payload shown in the error message


# -- deserializers -------------------------------------------------------------------------------------


def bytes_deserializer(data: bytes | None) -> bytes | None:
    """Identity, except that a memoryview or bytearray from the record parser becomes ``bytes``."""
    if data is None or type(data) is bytes:
        return data
    return bytes(data)


def str_deserializer(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise DeserializationError(f"not UTF-8 ({e.reason} at byte {e.start})") from e


def json_deserializer(data: bytes | None) -> Any:
    """UTF-8 JSON. Python's parser also accepts ``NaN``/``Infinity``; the serializer never writes them."""
    text = str_deserializer(data)
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise DeserializationError(f"not JSON ({e})") from e


def msgpack_deserializer(data: bytes | None) -> Any:
    """One msgpack object, strings as ``str``, arrays as lists; map keys may be any hashable msgpack value
    (the serializer writes int keys too). Trailing bytes are an error."""
    if data is None:
        return None
    try:
        return msgpack.unpackb(bytes(data), raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises ValueError subclasses, TypeError (unhashable key), and others
        raise DeserializationError(f"not msgpack ({type(e).__name__}: {e})") from e


T = TypeVar("T")

_DESERIALIZERS: Final[dict[str, Deserializer]] = {
    "bytes": bytes_deserializer,
    "str": str_deserializer,
    "json": json_deserializer,
    "msgpack": msgpack_deserializer,
}


class _NullSafeDeserializer:
    """Wraps a user callable: ``None`` stays ``None``, any exception becomes DeserializationError."""

    def __init__(self, fn: Callable[[bytes], Any]) -> None:
        self.fn = fn

    def __call__(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self.fn(data)
        except DeserializationError:
            raise
        except Exception as e:
            raise DeserializationError(f"{_name(self.fn)} raised {type(e).__name__}: {e}") from e

    def __repr__(self) -> str:
        return f"deserializer({_name(self.fn)})"


def get_deserializer(spec: DeserializerSpec) -> Deserializer:
    """The deserializer for ``spec``: a name from ``bytes, str, json, msgpack`` (None means bytes) or a
    callable taking ``bytes``. Unknown names raise ConfigError."""
    if spec is None:
        return bytes_deserializer
    if isinstance(spec, str):
        return _lookup("deserializer", _DESERIALIZERS, spec)
    if spec in _DESERIALIZERS.values() or isinstance(spec, _NullSafeDeserializer):
        return spec  # type: ignore[return-value]
    if not callable(spec):
        raise ConfigError(f"deserializer {spec!r}: must be one of {', '.join(_DESERIALIZERS)} or a callable")
    return _NullSafeDeserializer(spec)


def describe_position(topic: str, partition: int, offset: int, part: str = "value") -> str:
    """The ``where`` of :func:`deserialize`: ``"value of clicks/0 at offset 42"``."""
    return f"{part} of {topic}/{partition} at offset {offset}"


def deserialize(fn: Deserializer, data: bytes | None, where: str) -> Any:
    """``fn(data)``, turning any failure into DeserializationError naming ``where`` and showing the start of
    the payload, so a poison record can be found (and skipped) by its position."""
    try:
        return fn(data)
    except Exception as e:
        reason = str(e) if isinstance(e, DeserializationError) else f"{type(e).__name__}: {e}"
        raise DeserializationError(f"cannot deserialize {where}: {reason}; data {_preview(data)}") from e


def _preview(data: bytes | None) -> str:
    if data is None:
        return "None"
    raw = bytes(data)
    shown = repr(raw[:_PREVIEW]) + ("..." if len(raw) > _PREVIEW else "")
    return f"({len(raw)} bytes) {shown}"


# -- serializers ---------------------------------------------------------------------------------------


def bytes_serializer(value: Any) -> bytes | None:
    """``bytes``, ``bytearray`` or ``memoryview`` as ``bytes``; anything else is a TypeError (no silent
    ``str()``)."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"the bytes serializer takes bytes, bytearray or memoryview, got {type(value).__name__}")


def str_serializer(value: Any) -> bytes | None:
    """UTF-8. Strings with lone surrogates cannot be encoded (UnicodeEncodeError, a ValueError)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"the str serializer takes str, got {type(value).__name__}")
    return value.encode("utf-8")


def json_serializer(value: Any) -> bytes | None:
    """Compact UTF-8 JSON (``{"a":1}``). NaN and infinities are refused (ValueError): they are not JSON and
    other readers (Spark, jq) reject them."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def msgpack_serializer(value: Any) -> bytes | None:
    """msgpack with the str/bin distinction (``use_bin_type``), so str and bytes round-trip as themselves."""
    if value is None:
        return None
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


_SERIALIZERS: Final[dict[str, Serializer]] = {
    "bytes": bytes_serializer,
    "str": str_serializer,
    "json": json_serializer,
    "msgpack": msgpack_serializer,
}


class _NullSafeSerializer:
    """Wraps a user callable: ``None`` stays ``None``; the result must be bytes-like."""

    def __init__(self, fn: Callable[[Any], bytes]) -> None:
        self.fn = fn

    def __call__(self, value: Any) -> bytes | None:
        if value is None:
            return None
        result = self.fn(value)
        if not isinstance(result, bytes | bytearray | memoryview):
            raise TypeError(f"serializer {_name(self.fn)} returned {type(result).__name__}, not bytes")
        return bytes(result)

    def __repr__(self) -> str:
        return f"serializer({_name(self.fn)})"


def get_serializer(spec: SerializerSpec) -> Serializer:
    """The serializer for ``spec``: a name from ``bytes, str, json, msgpack`` (None means bytes) or a
    callable returning ``bytes``. Unknown names raise ConfigError."""
    if spec is None:
        return bytes_serializer
    if isinstance(spec, str):
        return _lookup("serializer", _SERIALIZERS, spec)
    if spec in _SERIALIZERS.values() or isinstance(spec, _NullSafeSerializer):
        return spec
    if not callable(spec):
        raise ConfigError(f"serializer {spec!r}: must be one of {', '.join(_SERIALIZERS)} or a callable")
    return _NullSafeSerializer(spec)


# -- helpers -------------------------------------------------------------------------------------------


def _lookup(kind: str, table: Mapping[str, T], name: str) -> T:
    try:
        return table[name.strip().lower()]
    except KeyError:
        raise ConfigError(f"{kind} {name!r}: must be one of {', '.join(table)} or a callable") from None


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
