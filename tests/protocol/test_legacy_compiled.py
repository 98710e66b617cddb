"""The compiled v0/v1 loop (metaq/protocol/_legacy_decode.c) against the pure-Python reference it replaces in
production (metaq.testing.readers' "pure-python"): on generated message sets (v0 and v1 mixed, null keys and
values, v1 timestamps, LogAppendTime and relative-offset wrappers, cut off at any byte, fetched from any
offset, with any byte changed) both give the same records and offsets or the same error; and the loop alone on
what the reference cannot see (its CRC is zlib's, its offsets past int64)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metaq.errors import CorruptRecordError, InvalidRecordError
from metaq.protocol import _legacy_decode, legacy
from metaq.protocol.records import decode_records
from metaq.testing.readers import record_reader

TS = 1_700_000_000_000
_OFFSET = struct.Struct(">q")

fields = st.one_of(st.none(), st.binary(max_size=40))
messages = st.lists(st.tuples(st.integers(-1, 1 << 45), fields, fields), min_size=1, max_size=6)


@st.composite
def message_sets(draw: st.DrawFn) -> bytes:
    """Entries as an old broker serves them: runs of plain v0/v1 messages and gzip/snappy wrappers (v1 ones
    with relative inner offsets, some with LogAppendTime), offsets rising from a drawn base."""
    offset = draw(st.integers(0, 1 << 40))
    out = bytearray()
    for _ in range(draw(st.integers(1, 5))):
        magic = draw(st.integers(0, 1))
        codec = draw(st.sampled_from([0, 0, 1, 2]))
        items = draw(messages)
        records = [(offset + i, ts, key, value) for i, (ts, key, value) in enumerate(items)]
        append_time = draw(st.one_of(st.none(), st.integers(0, 1 << 45))) if magic and codec else None
        if codec:
            data = bytearray(legacy.build_message_set(magic, codec, records, log_append_time=append_time))
        else:
            data = bytearray(b"".join(legacy.encode_message(o, magic, 0, t, k, v) for o, t, k, v in records))
        out += data
        offset += len(items)
    return bytes(out)


def outcome(decode: Callable[[], object]) -> object:
    """What a decode gave: its result, or its error's type and text."""
    try:
        return decode()
    except (CorruptRecordError, InvalidRecordError) as e:
        return type(e), str(e)


def both(decode: Callable[[], object]) -> tuple[object, object]:
    with record_reader("compiled"):
        compiled = outcome(decode)
    with record_reader("pure-python"):
        reference = outcome(decode)
    return compiled, reference


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=message_sets(), cut=st.integers(0, 1 << 16), skip=st.integers(0, 8), check=st.booleans())
def test_same_records_as_the_reference_cut_anywhere_fetched_from_anywhere(data: bytes, cut: int, skip: int,
                                                                           check: bool) -> None:
    piece = data[:len(data) - cut % (len(data) + 1)]
    first = _OFFSET.unpack_from(data, 0)[0]
    compiled, reference = both(lambda: decode_records(piece, first + skip, check_crcs=check))
    assert compiled == reference


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=message_sets(), where=st.integers(0, 1 << 16), value=st.integers(0, 255), check=st.booleans())
def test_same_records_or_the_same_error_with_any_byte_changed(data: bytes, where: int, value: int,
                                                               check: bool) -> None:
    changed = bytearray(data)
    changed[where % len(data)] = value
    compiled, reference = both(lambda: decode_records(bytes(changed), check_crcs=check))
    assert compiled == reference


@settings(max_examples=200, deadline=None)
@given(data=message_sets(), where=st.integers(0, 1 << 16), value=st.integers(0, 255))
def test_produced_sets_read_the_same_or_fail_the_same(data: bytes, where: int, value: int) -> None:
    """The broker's check of a produced set (Produce v0-v2) reads its runs with the same loop."""
    changed = bytearray(data)
    changed[where % len(data)] = value
    compiled, reference = both(lambda: legacy.read_produced(bytes(changed), 1 << 20))
    assert compiled == reference


def test_the_loop_reads_nulls_timestamps_and_stops_at_each_kind_of_entry() -> None:
    v0 = legacy.encode_message(7, 0, 0, 0, None, b"")
    plain = v0 + legacy.encode_message(8, 1, 0, TS, b"k", None)
    wrapper = legacy.build_message_set(1, 1, [(9, TS, None, b"x")])
    data = plain + wrapper + plain + legacy.encode_message(10, 2, 0, TS, None, b"magic 2")
    out: list[object] = []
    assert _legacy_decode.walk(data, 0, len(data), 8, True, out, 0, None, -1) == (len(plain), 8,
                                                                              _legacy_decode.STOP_WRAPPER)
    assert out == [(8, TS, b"k", None, ())]  # offset 7 below min_offset 8
    out.clear()
    second = len(plain) + len(wrapper)
    cut = second + len(plain) - 1
    assert _legacy_decode.walk(data, second, cut, 0, True, out, 5, 42, -1) == (second + len(v0), 7,
                                                                           _legacy_decode.STOP_END)
    assert out == [(12, 42, None, b"", ())]  # shifted by 5, the timestamp given
    out.clear()
    assert _legacy_decode.walk(data, second, len(data), 0, True, out, 0, None, -1) == (second + len(plain), 8,
                                                                                  _legacy_decode.STOP_END)
    assert len(out) == 2  # stopped at the magic 2 entry


def test_the_loop_refuses_a_bad_crc_and_skips_the_check_when_told() -> None:
    message = bytearray(legacy.encode_message(0, 1, 0, TS, b"key", b"value"))
    message[-1] ^= 1
    out: list[object] = []
    bad = bytes(message)
    assert _legacy_decode.walk(bad, 0, len(bad), 0, True, out, 0, None, -1) == (0, None, _legacy_decode.STOP_BAD)
    assert _legacy_decode.walk(bad, 0, len(bad), 0, False, out, 0, None, -1)[2] == _legacy_decode.STOP_END
    assert out == [(0, TS, b"key", b"valud", ())]


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 63, 64, 1000, 4099])
def test_its_crc_is_zlibs(size: int) -> None:
    """The slicing-by-8 CRC-32 agrees with zlib's on every length class (the 8-byte loop and the tail)."""
    body = bytes((i * 37 + 11) & 0xFF for i in range(size))
    message = legacy.encode_message(0, 1, 0, TS, None, body)
    assert struct.unpack_from(">I", message, 12)[0] == zlib.crc32(message[16:])
    out: list[object] = []
    assert _legacy_decode.walk(message, 0, len(message), 0, True, out, 0, None, -1)[2] == _legacy_decode.STOP_END
    assert out == [(0, TS, None, body, ())]


def test_offsets_shifted_past_int64_are_python_ints() -> None:
    message = legacy.encode_message((1 << 63) - 1, 1, 0, TS, None, b"v")
    out: list[object] = []
    _legacy_decode.walk(message, 0, len(message), 0, True, out, 10, None, -1)
    assert out == [((1 << 63) + 9, TS, None, b"v", ())]
    out.clear()
    low = legacy.encode_message(-(1 << 63), 1, 0, TS, None, b"v")
    _legacy_decode.walk(low, 0, len(low), -(1 << 63), True, out, -1, None, -1)
    assert out == []


def test_bounds_outside_the_data_are_refused() -> None:
    with pytest.raises(ValueError, match="within the data"):
        _legacy_decode.walk(b"x" * 10, 0, 11, 0, True, [], 0, None, -1)


@pytest.mark.parametrize(("second", "error"), [
    (legacy.encode_message(1, 1, 0, TS, None, b"v1"), "magic 1 after messages of magic 0"),
    (legacy.encode_message(1, 0, 0x08, TS, None, b"x"), "attributes 0x08 a producer may not set"),
])
def test_a_produced_set_breaking_the_producers_rules_fails_as_in_the_reference(second: bytes, error: str) -> None:
    data = legacy.encode_message(0, 0, 0, 0, None, b"v0") + second
    compiled, reference = both(lambda: legacy.read_produced(data, 1 << 20))
    assert compiled == reference
    assert isinstance(compiled, tuple) and compiled[0] is CorruptRecordError and error in compiled[1]


@pytest.mark.parametrize("order", [(0, 2, 1), (0, 1, 1, 2), (5,)])
def test_produced_wrapper_inner_offsets_checked_as_in_the_reference(order: tuple[int, ...]) -> None:
    """Equal or rising inner offsets pass, backwards ones are InvalidRecordError, in both readers."""
    inner = b"".join(legacy.encode_message(o, 1, 0, TS, None, b"v") for o in order)
    data = legacy.encode_message(0, 1, 1, TS, None, _gzip(inner))
    compiled, reference = both(lambda: legacy.read_produced(data, 1 << 20))
    assert compiled == reference
    backwards = any(b < a for a, b in zip(order, order[1:], strict=False))
    assert (isinstance(compiled, tuple) and compiled[0] is InvalidRecordError) == backwards


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=31)
    return compressor.compress(data) + compressor.flush()
