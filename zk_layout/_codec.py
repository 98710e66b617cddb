"""The strict reader and the compact JSON writer behind every node codec of this package (``*_formats.py``).

Each decoder wraps a node's raw data in :class:`_Node`, which turns every failure into a
:class:`~metaq.errors.MalformedNodeError` naming the path, and reads JSON keys through :class:`_Fields`. Encoders
write what Kafka writes: compact JSON (:func:`_dumps`).
"""

from __future__ import annotations

import builtins
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Final, NoReturn, TypeVar, overload

from metaq.errors import MalformedNodeError
from zk_layout.paths import INT32_MAX

_INT_TEXT = re.compile(r"-?[0-9]+")
_DIGITS = re.compile(r"[0-9]+")


def now_ms() -> int:
    return int(time.time() * 1000)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _Node:
    """The raw data of one node being decoded; every failure names the path and shows the data."""

    def __init__(self, path: str, raw: object) -> None:
        self.path = path
        self.raw = bytes(raw) if isinstance(raw, bytes | bytearray | memoryview) else None
        if self.raw is None and raw is not None:
            self.fail(f"expected bytes, got {type(raw).__name__}")

    def fail(self, reason: str) -> NoReturn:
        raise MalformedNodeError(self.path, self.raw, reason)

    def text(self) -> str:
        if self.raw is None:
            self.fail("the node has no data")
        try:
            return self.raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"not UTF-8 ({e.reason} at byte {e.start})")

    def json(self) -> object:
        text = self.text()
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:  # ValueError covers JSONDecodeError and huge integers
            self.fail(f"not JSON ({e})")

    def json_object(self) -> dict[str, object]:
        obj = self.json()
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object, got {type(obj).__name__}")
        return obj


class _Required:
    """The type of :data:`_REQUIRED`: a key without a default (decoding fails when it is missing)."""


_REQUIRED: Final = _Required()
_T = TypeVar("_T")


class _Fields:
    """Typed access to the keys of a decoded JSON object."""

    def __init__(self, node: _Node, obj: Mapping[str, object], where: str = "") -> None:
        self.node = node
        self.obj = obj
        self.where = where

    def value(self, key: str, default: object) -> object:
        if key in self.obj:
            return self.obj[key]
        if default is _REQUIRED:
            self.node.fail(f"missing key {self.where}{key!r}")
        return default

    @overload
    def int(self, key: builtins.str, default: _Required = _REQUIRED, *, minimum: builtins.int | None = None,
            maximum: builtins.int | None = None) -> builtins.int: ...

    @overload
    def int(self, key: builtins.str, default: _T, *, minimum: builtins.int | None = None,
            maximum: builtins.int | None = None) -> builtins.int | _T: ...

    def int(self, key: builtins.str, default: builtins.object = _REQUIRED, *, minimum: builtins.int | None = None,
            maximum: builtins.int | None = None) -> builtins.object:
        value = self.value(key, default)
        if value is default and default is not _REQUIRED:
            return value
        return _as_int(self.node, value, f"{self.where}{key!r}", minimum, maximum)

    def int32(self, key: builtins.str, default: _Required = _REQUIRED, *, minimum: builtins.int = -1) -> builtins.int:
        """A value sent to Kafka clients as int32 (leader, epoch): ``minimum``..2^31-1."""
        return self.int(key, default, minimum=minimum, maximum=INT32_MAX)

    @overload
    def str(self, key: builtins.str) -> builtins.str: ...

    @overload
    def str(self, key: builtins.str, default: None, *, nullable: bool = False) -> builtins.str | None: ...

    def str(self, key: builtins.str, default: builtins.object = _REQUIRED, *, nullable: bool = False
            ) -> builtins.object:
        value = self.value(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            self.node.fail(f"{self.where}{key!r} must be a string, got {value!r:.40}")
        return value

    def timestamp(self, key: builtins.str = "timestamp") -> builtins.int:
        """Kafka writes timestamps as strings of epoch milliseconds; accept numbers too. Missing: -1."""
        value = self.value(key, None)
        if value is None:
            return -1
        if isinstance(value, str):
            return _parse_int_text(self.node, value, f"{self.where}{key!r}")
        return _as_int(self.node, value, f"{self.where}{key!r}", None)

    @overload
    def object(self, key: builtins.str) -> dict[builtins.str, builtins.object]: ...

    @overload
    def object(self, key: builtins.str, default: _T) -> dict[builtins.str, builtins.object] | _T: ...

    def object(self, key: builtins.str, default: builtins.object = _REQUIRED) -> builtins.object:
        value = self.value(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if not isinstance(value, dict):
            self.node.fail(f"{self.where}{key!r} must be a JSON object, got {value!r:.40}")
        return value

    def broker_ids(self, key: builtins.str) -> tuple[builtins.int, ...]:
        """A list of broker ids (an ISR): each 0..2^31-1."""
        return _broker_id_tuple(self.node, self.value(key, _REQUIRED), f"{self.where}{key!r}")


def _parse_int_text(node: _Node, text: str, what: str, *, signed: bool = True) -> int:
    """Decimal digits (optionally signed) that fit in 64 bits; ``int()`` alone would accept ``" 1_0"``,
    non-ASCII digits, and raise ValueError on thousands of digits."""
    if not (_INT_TEXT if signed else _DIGITS).fullmatch(text) or len(text.lstrip("-")) > 19:
        node.fail(f"{what} must be a decimal integer, got {text!r:.40}")
    return int(text)


def _as_int(node: _Node, value: object, what: str, minimum: int | None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        node.fail(f"{what} must be an integer, got {value!r:.40}")
    if minimum is not None and value < minimum:
        node.fail(f"{what} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        node.fail(f"{what} must be <= {maximum} (a Kafka int32), got {value}")
    return value


def _broker_id_tuple(node: _Node, value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        node.fail(f"{what} must be a list of broker ids, got {value!r:.40}")
    return tuple(_as_int(node, item, f"element of {what}", 0, INT32_MAX) for item in value)


def _partition_map(node: _Node, value: object, what: str) -> dict[int, tuple[int, ...]]:
    """``{"0":[1,2],"1":[2]}`` -> ``{0: (1, 2), 1: (2,)}``, sorted numerically. Partitions and replicas
    must fit a Kafka int32."""
    if not isinstance(value, dict):
        node.fail(f"{what} must be a JSON object, got {value!r:.40}")
    result: dict[int, tuple[int, ...]] = {}
    for key, replicas in value.items():
        partition = _parse_int_text(node, key, f"partition {key!r} of {what}", signed=False)
        if partition > INT32_MAX:
            node.fail(f"partition {key!r} of {what} must be <= {INT32_MAX} (a Kafka int32)")
        result[partition] = _broker_id_tuple(node, replicas, f"{what}[{key!r}]")
    return dict(sorted(result.items()))


def _encode_partition_map(partitions: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(partitions.items())}
