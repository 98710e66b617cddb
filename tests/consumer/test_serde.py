"""Key/value (de)serializers: built-ins, callables, None handling, errors that say where."""

from __future__ import annotations

import json
import pickle
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metaq.consumer.serde import (
    bytes_deserializer,
    describe_position,
    deserialize,
    get_deserializer,
    get_serializer,
    json_serializer,
)
from metaq.errors import ConfigError, DeserializationError, MetaqError

NAMES = ["bytes", "str", "json", "msgpack"]


def test_deserialization_error_is_a_metaq_error() -> None:
    assert issubclass(DeserializationError, MetaqError)
    assert not DeserializationError.retriable


@pytest.mark.parametrize("name", [*NAMES, None])
def test_none_stays_none(name: str | None) -> None:
    assert get_deserializer(name)(None) is None
    assert get_serializer(name)(None) is None


def test_builtin_deserializers() -> None:
    assert get_deserializer("bytes")(b"\x00\xff") == b"\x00\xff"
    assert get_deserializer("str")("héllo".encode()) == "héllo"
    assert get_deserializer("json")(b'{"a":[1,2.5,null,true]}') == {"a": [1, 2.5, None, True]}
    assert get_deserializer("msgpack")(msgpack.packb({"a": b"\x01", 1: [1]}, use_bin_type=True)) == {
        "a": b"\x01",
        1: [1],
    }


def test_bytes_deserializer_returns_bytes_for_views() -> None:
    data = b"abc"
    assert bytes_deserializer(data) is data
    out = bytes_deserializer(memoryview(b"abc"))  # type: ignore[arg-type]
    assert type(out) is bytes and out == b"abc"
    assert get_deserializer("str")(bytearray(b"x")) == "x"  # type: ignore[arg-type]


def test_names_are_case_and_space_insensitive_and_none_means_bytes() -> None:
    assert get_deserializer(" JSON ") is get_deserializer("json")
    assert get_deserializer(None) is get_deserializer("bytes")
    assert get_serializer("Msgpack") is get_serializer("msgpack")
    assert get_serializer(None) is get_serializer("bytes")


@pytest.mark.parametrize("factory", [get_deserializer, get_serializer])
def test_unknown_names_and_non_callables_are_config_errors(factory: Any) -> None:
    with pytest.raises(ConfigError, match="'avro'.*bytes, str, json, msgpack"):
        factory("avro")
    with pytest.raises(ConfigError, match="or a callable"):
        factory(42)


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("str", b"\xff\xfe", "not UTF-8"),
        ("json", b"{", "not JSON"),
        ("json", b"\xff", "not UTF-8"),
        ("msgpack", b"\xc1", "not msgpack"),
        ("msgpack", b"\x01\x02", "not msgpack"),  # trailing bytes
        ("msgpack", b"\x92", "not msgpack"),  # truncated
    ],
)
def test_failing_decodes_raise_deserialization_error(name: str, data: bytes, reason: str) -> None:
    with pytest.raises(DeserializationError, match=reason):
        get_deserializer(name)(data)


def test_deserialize_names_the_position() -> None:
    where = describe_position("clicks", 3, 42, "key")
    assert where == "key of clicks/3 at offset 42"
    with pytest.raises(DeserializationError) as info:
        deserialize(get_deserializer("json"), b"not json at all" * 5, where)
    message = str(info.value)
    assert "key of clicks/3 at offset 42" in message and "not JSON" in message
    assert "(75 bytes) b'not json at allnot json at allno'..." in message
    assert isinstance(info.value.__cause__, DeserializationError)
    assert isinstance(info.value.__cause__.__cause__, json.JSONDecodeError)


def test_deserialize_passes_values_through() -> None:
    assert deserialize(get_deserializer("str"), b"ok", "value of t/0 at offset 0") == "ok"
    assert deserialize(get_deserializer("json"), None, "value of t/0 at offset 0") is None


def test_callable_deserializer_is_wrapped() -> None:
    calls: list[bytes] = []

    def upper(data: bytes) -> str:
        calls.append(data)
        return data.decode().upper()

    fn = get_deserializer(upper)
    assert fn(b"ab") == "AB"
    assert fn(None) is None
    assert calls == [b"ab"]  # never called with None
    assert get_deserializer(fn) is fn  # not wrapped twice
    assert "upper" in repr(fn)


def test_callable_deserializer_failure_names_the_position() -> None:
    def explode(data: bytes) -> Any:
        raise KeyError("boom")

    with pytest.raises(DeserializationError, match="explode raised KeyError"):
        get_deserializer(explode)(b"x")
    with pytest.raises(DeserializationError, match=r"value of t/1 at offset 7: .*explode raised KeyError") as info:
        deserialize(get_deserializer(explode), b"x", describe_position("t", 1, 7))
    assert isinstance(info.value.__cause__.__cause__, KeyError)  # type: ignore[union-attr]


def test_deserialize_with_a_raw_callable_also_wraps() -> None:
    with pytest.raises(DeserializationError, match=r"at offset 1: ValueError: nope"):
        deserialize(lambda b: (_ for _ in ()).throw(ValueError("nope")), b"x", "value of t/0 at offset 1")


# -- serializers ---------------------------------------------------------------------------------------------


def test_builtin_serializers() -> None:
    assert get_serializer("bytes")(bytearray(b"ab")) == b"ab"
    assert get_serializer("bytes")(memoryview(b"ab")) == b"ab"
    assert get_serializer("str")("héllo") == "héllo".encode()
    assert get_serializer("json")({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()
    assert get_serializer("msgpack")({"a": b"\x01"}) == msgpack.packb({"a": b"\x01"}, use_bin_type=True)


def test_serializers_refuse_wrong_types() -> None:
    with pytest.raises(TypeError, match="bytes serializer"):
        get_serializer("bytes")("text")
    with pytest.raises(TypeError, match="str serializer"):
        get_serializer("str")(b"raw")
    with pytest.raises(ValueError):
        json_serializer(float("nan"))
    with pytest.raises(TypeError):
        get_serializer("json")({1, 2})
    with pytest.raises(UnicodeEncodeError):
        get_serializer("str")("\ud800")


def test_callable_serializer() -> None:
    fn = get_serializer(lambda v: str(v).encode())
    assert fn(12) == b"12"
    assert fn(None) is None
    assert get_serializer(fn) is fn
    with pytest.raises(TypeError, match="returned str, not bytes"):
        get_serializer(lambda v: "text")(1)


@pytest.mark.parametrize("name", NAMES)
def test_builtins_are_picklable(name: str) -> None:
    assert pickle.loads(pickle.dumps(get_deserializer(name))) is get_deserializer(name)
    assert pickle.loads(pickle.dumps(get_serializer(name))) is get_serializer(name)


def test_wrapped_callables_are_picklable() -> None:
    fn = pickle.loads(pickle.dumps(get_deserializer(bytes.upper)))
    assert fn(b"ab") == b"AB"
    assert pickle.loads(pickle.dumps(get_serializer(str.encode)))("é") == "é".encode()


# -- round trips ---------------------------------------------------------------------------------------------

# lone surrogates cannot be UTF-8 encoded
texts = st.text(st.characters(blacklist_categories=("Cs",)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | texts
    | st.binary(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(texts | st.integers(-(2**63), 2**63 - 1) | st.binary(), children, max_size=4),
    max_leaves=20,
)


@given(st.binary())
def test_bytes_round_trip(data: bytes) -> None:
    assert get_deserializer("bytes")(get_serializer("bytes")(data)) == data


@given(texts)
def test_str_round_trip(text: str) -> None:
    assert get_deserializer("str")(get_serializer("str")(text)) == text


@given(json_values.filter(lambda v: v is not None))
def test_json_round_trip(value: Any) -> None:
    assert get_deserializer("json")(get_serializer("json")(value)) == value


@given(msgpack_values.filter(lambda v: v is not None))
def test_msgpack_round_trip(value: Any) -> None:
    assert get_deserializer("msgpack")(get_serializer("msgpack")(value)) == value


@pytest.mark.parametrize("name", ["str", "json", "msgpack"])
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_deserialization_error(name: str, data: bytes) -> None:
    try:
        deserialize(get_deserializer(name), data, "value of t/0 at offset 0")
    except DeserializationError as e:
        assert "value of t/0 at offset 0" in str(e)
