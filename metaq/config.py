"""Typed configuration objects built from Kafka-style property names.

A config class is a frozen dataclass whose fields carry their Kafka property name::

    @dataclass(frozen=True)
    class FetchConfig(Config):
        max_bytes: int = prop("fetch.message.max.bytes", 1048576, check=positive)

    FetchConfig.from_properties({"fetch.message.max.bytes": "65536"}).max_bytes   # 65536

Values may be given as strings (as in a ``.properties`` file) or as Python values. Unknown keys are errors
that name the key and suggest the closest known one; so are values that do not convert or fail their check.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Self, SupportsFloat, SupportsIndex, TypeAlias, TypeVar

from metaq.errors import ConfigError

Check = Callable[[Any], str | None]
"""A validator of one field's converted value (each takes its field's type): returns None when the value is
fine, otherwise a reason."""

Properties: TypeAlias = Mapping[str, object]
"""Kafka-style properties as given: strings (a ``.properties`` file) or Python values (an ``int`` for a number, a
``bool``, a list for a list); :meth:`Config.from_properties` converts each to its field's type or names the key."""

T = TypeVar("T")

MASK = "********"


class Secret:
    """A password-like config value that never shows itself: ``repr``, ``str`` and f-strings give
    :data:`MASK`, so a config object can be logged, printed in an error or shown in a Spark plan.
    :meth:`reveal` is for the one place that sends it (the SASL exchange, loading a TLS key)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:  # pickled to Spark executors as itself
        return Secret, (self._value,)


_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_int(text: str) -> int:
    """A config number as Kafka's ``ConfigDef`` reads one: surrounding blanks trimmed, then ASCII digits with an
    optional sign; ValueError otherwise (Python's ``int`` would also take ``1_000`` and non-ASCII digits)."""
    stripped = text.strip()
    if not _INTEGER.fullmatch(stripped):
        raise ValueError(text)
    return int(stripped)


def prop(key: str, default: T, *, check: Check | None = None, doc: str = "") -> T:
    """Declare a config field with its Kafka property name, default, optional check and doc. A password is
    a field of type :class:`Secret` (the one way secrets are kept out of logs, errors and ``repr()``)."""
    return dataclasses.field(default=default, metadata={"key": key, "check": check, "doc": doc})


def positive(value: float) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def one_of(*allowed: object) -> Check:
    def check(value: object) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(map(str, allowed))}"

    return check


def _convert(key: str, raw: object, annotation: object) -> object:
    """Convert ``raw`` to the field's annotated type, or raise ConfigError naming ``key``."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0]
    if raw is None or (optional and isinstance(raw, str) and raw.strip().lower() in ("", "null", "none")):
        if optional:
            return None
        raise ConfigError(f"config {key!r}: a value is required")
    try:
        if annotation is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "yes", "1"):
                return True
            if text in ("false", "no", "0"):
                return False
            raise ValueError(raw)
        if annotation is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return parse_int(str(raw)) if not isinstance(raw, int) else raw
        if annotation is float:
            if not isinstance(raw, str | bytes | SupportsFloat | SupportsIndex):
                raise TypeError(f"float() argument must be a string or a real number, not '{type(raw).__name__}'")
            return float(raw)
        if annotation is str:
            return str(raw).strip()
        if annotation is Secret:
            return raw if isinstance(raw, Secret) else Secret(str(raw))  # not stripped: spaces may be meant
        if typing.get_origin(annotation) is tuple:
            if isinstance(raw, str):
                return tuple(part.strip() for part in raw.split(",") if part.strip())
            if not isinstance(raw, Iterable):
                raise TypeError(f"'{type(raw).__name__}' object is not iterable")
            return tuple(str(part) for part in raw)
    except ValueError as e:
        kind = getattr(annotation, "__name__", str(annotation))
        raise ConfigError(f"config {key!r}: {raw!r} is not a valid {kind}") from e
    raise ConfigError(f"config {key!r}: unsupported field type {annotation!r}")  # a bug in a Config class


@dataclasses.dataclass(frozen=True)
class Config:
    """Base of typed config objects; see the module docstring."""

    @classmethod
    def keys(cls) -> dict[str, dataclasses.Field[Any]]:
        """Property name -> dataclass field."""
        return {f.metadata["key"]: f for f in dataclasses.fields(cls) if "key" in f.metadata}

    @classmethod
    def from_properties(cls, values: Properties | None = None, **overrides: object) -> Self:
        """Build from Kafka-style keys; ``overrides`` use the Python field names."""
        known = cls.keys()
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, object] = {}
        for key, raw in (values or {}).items():
            field = known.get(key)
            if field is None:
                raise ConfigError(_unknown_key_message(cls.__name__, key, list(known)))
            kwargs[field.name] = _convert(key, raw, hints[field.name])
        by_name = {f.name: f for f in known.values()}
        for name, raw in overrides.items():
            field = by_name.get(name)
            if field is None:
                raise ConfigError(_unknown_key_message(cls.__name__, name, list(by_name)))
            kwargs[name] = _convert(field.metadata["key"], raw, hints[name])
        config = cls(**kwargs)
        config._check_values()
        return config

    @classmethod
    def from_file(cls, path: str | Path, **overrides: object) -> Self:
        return cls.from_properties(load_properties(path), **overrides)

    def _check_values(self) -> None:
        for key, field in self.keys().items():
            check = field.metadata.get("check")
            value = getattr(self, field.name)
            if check is not None and value is not None:
                reason = check(value)
                if reason:
                    raise ConfigError(f"config {key!r}: {value!r} {reason}")



def _unknown_key_message(what: str, key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} option {key!r}{hint}"


# A properties file larger than this is refused rather than read (``--config /dev/zero`` must not hang).
MAX_PROPERTIES_BYTES = 1 << 20


def read_small_file(path: Path, limit: int, what: str, hint: str) -> bytes:
    """The bytes of a file that must be small (a config, a credential): a ConfigError naming ``what`` when it
    cannot be read or holds more than ``limit`` bytes (then ``hint`` says what it should be)."""
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(f"cannot read {what}: {e.strerror}") from e
    if len(raw) > limit:
        raise ConfigError(f"{what} is larger than {limit} bytes; {hint}")
    return raw


def _read_properties_text(path: Path) -> str:
    raw = read_small_file(path, MAX_PROPERTIES_BYTES, f"config file {path}", "is it a properties file?")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from e


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Java-style ``.properties`` file (``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuation), UTF-8, at most MAX_PROPERTIES_BYTES. Errors name the file and line; a
    key set twice is an error (Java would silently keep the last value, hiding a mistake)."""
    path = Path(path)
    text = _read_properties_text(path)
    result: dict[str, str] = {}
    first_line: dict[str, int] = {}
    pending = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = (pending + line.strip()) if pending else line.strip()
        pending = ""
        if not stripped or stripped[0] in "#!":
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1]
            continue
        cut = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line.strip()!r}")
        key = stripped[:cut].strip()
        if key in first_line:
            raise ConfigError(f"{path}:{number}: key {key!r} is set again (first on line {first_line[key]})")
        first_line[key] = number
        result[key] = stripped[cut + 1 :].strip()
    return result
