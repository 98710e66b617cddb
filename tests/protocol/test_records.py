"""decode_records against batches built by kafka-python, and against arbitrary bytes."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from metaq.errors import CorruptRecordError
from metaq.protocol import records
from metaq.protocol.records import RecordColumns, decode_columns, decode_records
from metaq.testing.readers import each_record_reader  # noqa: F401 (autouse: each test runs with both readers)

_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_COUNT = struct.Struct(">i")
TS = 1_700_000_000_000

Item = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def build(base_offset: int, items: list[Item], *, compression: int = 0) -> bytearray:
    """One v2 batch from (offset delta, timestamp, key, value, headers), at ``base_offset``."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for delta, ts, key, value, headers in items:
        assert builder.append(delta, ts, key, value, headers) is not None
    batch = builder.build()
    _BASE_OFFSET.pack_into(batch, 0, base_offset)
    return batch


def simple(base_offset: int, count: int, *, value_size: int = 10) -> bytearray:
    return build(base_offset, [(i, TS + i, None, b"%0*d" % (value_size, base_offset + i), []) for i in range(count)])


def recrc(batch: bytearray) -> bytearray:
    _CRC.pack_into(batch, 17, crc32c(bytes(batch[21:])))
    return batch


def with_attributes(batch: bytearray, extra: int) -> bytearray:
    (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
    _ATTRIBUTES.pack_into(batch, 21, attributes | extra)
    return recrc(batch)


def expected(base_offset: int, items: list[Item]) -> list[tuple]:
    return [(base_offset + d, ts, k, v, tuple(h)) for d, ts, k, v, h in items]


# -- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [0, 1])
def test_round_trip_with_keys_headers_and_nulls(compression: int) -> None:
    items: list[Item] = [
        (0, TS, b"k0", b"v0", []),
        (1, TS + 5, None, b"no key", []),
        (2, TS - 3, b"null value", None, []),
        (3, TS + 9, None, None, [("h1", b"x"), ("h2", None), ("ünï", b"")]),
        (4, TS + 1, b"", b"", [("", b"empty key")]),
    ]
    data = bytes(build(100, items, compression=compression))
    result = decode_records(data)
    assert result.records == expected(100, items)
    assert result.next_offset == 105
    assert result.complete_bytes == len(data)
    assert result.first_batch_size == len(data)


@pytest.mark.parametrize(("value_size", "count"), [(0, 3), (63, 70), (100, 200), (1024, 20), (9000, 3), (70000, 2)])
def test_round_trip_sizes_cover_one_two_and_three_byte_varints(value_size: int, count: int) -> None:
    items: list[Item] = [(i, TS + i * 100_000, b"k" * (i % 70), bytes([i % 256]) * value_size, [])
                         for i in range(count)]
    data = build(0, items)
    assert decode_records(data).records == expected(0, items)


def test_large_and_negative_deltas_and_gaps() -> None:
    items: list[Item] = [(0, TS, None, b"a", []), (5000, TS - 10**9, None, b"b", []),
                         (10**6, TS + 10**10, None, b"c", [])]
    assert decode_records(build(7, items)).records == expected(7, items)


def test_several_batches_and_memoryview_input() -> None:
    data = bytes(simple(0, 3) + simple(3, 4) + simple(7, 2))
    result = decode_records(memoryview(data))
    assert [r[0] for r in result.records] == list(range(9))
    assert result.next_offset == 9


def test_empty_input() -> None:
    assert decode_records(b"") == ([], None, 0, None)


# -- what a fetch returns ------------------------------------------------------------------------------


def test_records_below_min_offset_are_skipped() -> None:
    data = bytes(simple(0, 5) + simple(5, 5))
    result = decode_records(data, min_offset=3)
    assert [r[0] for r in result.records] == list(range(3, 10))
    assert decode_records(data, min_offset=7).records[0][0] == 7
    assert decode_records(data, min_offset=10).records == []
    assert decode_records(data, min_offset=10).next_offset == 10


def test_truncated_tail_is_left_for_the_next_fetch() -> None:
    first, second = simple(0, 5), simple(5, 5)
    for cut in (1, 11, 12, 20, 61, len(second) - 1):
        data = bytes(first + second[:cut])
        result = decode_records(data)
        assert [r[0] for r in result.records] == list(range(5))
        assert result.next_offset == 5
        assert result.complete_bytes == len(first)
        assert result.first_batch_size == len(first)


def test_first_batch_size_of_a_cut_off_batch() -> None:
    batch = simple(0, 50, value_size=100)
    result = decode_records(bytes(batch[:300]))
    assert result.records == [] and result.next_offset is None and result.complete_bytes == 0
    assert result.first_batch_size == len(batch)
    assert decode_records(bytes(batch[:11])).first_batch_size is None


def test_control_batch_is_skipped_but_advances_next_offset() -> None:
    control = with_attributes(build(3, [(0, TS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])]), 0x20)
    data = bytes(simple(0, 3) + control + simple(4, 2))
    result = decode_records(data)
    assert [r[0] for r in result.records] == [0, 1, 2, 4, 5]
    assert decode_records(bytes(simple(0, 3) + control)).next_offset == 4


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    batch = with_attributes(build(0, [(0, TS, None, b"a", []), (1, TS + 50, None, b"b", [])]), 0x08)
    assert [r[1] for r in decode_records(batch).records] == [TS + 50, TS + 50]


def _fetch_like() -> bytes:
    """A fetch with what columns must get right: a batch below the offset asked for, keys, null keys and
    values, headers, a compressed batch, a control batch, LogAppendTime and a cut-off tail."""
    items: list[Item] = [(0, TS, b"k0", b"v0", [("h", b"x"), ("n", None)]), (1, TS + 5, None, b"no key", []),
                         (2, TS - 3, b"k2", None, []), (3, TS + 9, None, None, [("ü", b"")])]
    control = with_attributes(build(12, [(0, TS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])]), 0x20)
    log_append = with_attributes(build(13, [(0, TS, None, b"a", []), (1, TS + 50, b"b", b"b", [])]), 0x08)
    tail = simple(15, 5)
    return bytes(simple(0, 5) + build(5, items, compression=1) + build(9, items[:3]) + control + log_append
                 + tail[:len(tail) - 3])


@pytest.mark.parametrize("min_offset", [0, 3, 6, 14])
def test_columns_hold_exactly_what_decode_records_gives(min_offset: int) -> None:
    data = _fetch_like()
    rows = decode_records(data, min_offset)
    result = decode_columns(data, min_offset)
    assert list(result.columns) == rows.records and rows.records
    assert result[1:] == rows[1:]  # next offset, complete bytes, first batch size
    bare = decode_columns(data, min_offset, with_headers=False).columns
    assert bare.headers is None and list(bare) == [(*r[:4], ()) for r in rows.records]
    assert list(RecordColumns.from_records(rows.records)) == rows.records


def test_columns_keep_nothing_of_a_corrupt_batch() -> None:
    bad = bytearray(simple(3, 3))
    assert bad[61 + 2 * 17] == 2 * 16  # the third record's length (16 bytes, zigzag), after two of 17 bytes
    bad[61 + 2 * 17] = 0x7E  # 63 bytes: more than it has, found after two good records were read
    columns = RecordColumns()
    with pytest.raises(CorruptRecordError, match="base offset 3"):
        records._decode_all(bytes(simple(0, 3) + recrc(bad)), 0, True, columns)
    assert list(columns) == decode_records(bytes(simple(0, 3))).records


def test_key_length_below_minus_one_is_null_compiled_and_corrupt_in_pure_python() -> None:
    """The one difference between the readers (see metaq/protocol/records.py): Kafka's rule, librdkafka's."""
    data = build(0, [(0, TS, None, b"v", [])])
    assert data[65] == 0x01  # length, attributes, timestamp delta, offset delta: one byte each; then the key
    data[65] = 0x09  # -5
    recrc(data)
    if records._CompiledBatch is not None:  # the reader this run uses (metaq.testing.readers)
        assert decode_records(bytes(data)).records == [(0, TS, None, b"v", ())]
    else:
        with pytest.raises(CorruptRecordError, match="base offset 0"):
            decode_records(bytes(data))


# -- errors ----------------------------------------------------------------------------------------


def test_bad_crc_names_position_and_offset() -> None:
    data = bytearray(simple(0, 2) + simple(2, 2))
    data[len(data) - 2] ^= 0x01  # the last value byte (the last byte is the header count)
    with pytest.raises(CorruptRecordError, match=r"batch at byte \d+ \(base offset 2\): CRC mismatch"):
        decode_records(bytes(data))
    assert len(decode_records(bytes(data), check_crcs=False).records) == 4  # a value byte: still parses


def test_unknown_magic_is_corrupt() -> None:
    data = bytearray(simple(0, 1))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="unknown magic byte 3"):
        decode_records(bytes(data))


def test_a_v2_batch_with_its_magic_changed_to_1_fails_the_v1_crc() -> None:
    data = bytearray(simple(0, 1))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_records(bytes(data))


def test_malformed_record_inside_a_valid_crc() -> None:
    data = bytearray(simple(0, 3))
    data[61] = 0x7E  # first record's length: 63 bytes, more than it has
    with pytest.raises(CorruptRecordError, match="base offset 0"):
        decode_records(bytes(recrc(data)))


def test_wrong_record_count() -> None:
    data = bytearray(simple(0, 3))
    _COUNT.pack_into(data, 57, 2)
    with pytest.raises(CorruptRecordError, match="record count"):
        decode_records(bytes(recrc(data)))


def test_unknown_codec_is_a_clear_corrupt_record_error() -> None:
    data = with_attributes(simple(0, 1), 0x05)
    with pytest.raises(CorruptRecordError, match="unknown compression codec 5"):
        decode_records(bytes(data))


def test_garbage_gzip_payload() -> None:
    data = with_attributes(simple(0, 3), 0x01)
    with pytest.raises(CorruptRecordError, match="cannot decompress"):
        decode_records(bytes(data))


# -- fuzzing: CorruptRecordError and nothing else ----------------------------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_corrupt(data: bytes, **kwargs: object) -> None:
    try:
        decode_records(data, **kwargs)  # type: ignore[arg-type]
    except CorruptRecordError:
        pass


@_FUZZ
@given(st.binary(max_size=300), st.booleans())
def test_arbitrary_bytes_raise_only_corrupt_record_error(data: bytes, check_crcs: bool) -> None:
    _decode_or_corrupt(data, check_crcs=check_crcs)


@_FUZZ
@given(st.binary(max_size=200), st.integers(-3, 40), st.sampled_from([0, 1, 2, 3, 4, 5, 7, 0x08, 0x20]))
def test_valid_header_with_arbitrary_records(body: bytes, count: int, attributes: int) -> None:
    """A header that passes every check (length, magic, CRC) in front of arbitrary record bytes."""
    batch = bytearray(simple(0, 1))[:61] + body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _ATTRIBUTES.pack_into(batch, 21, attributes)
    _COUNT.pack_into(batch, 57, count)
    _decode_or_corrupt(bytes(recrc(batch)))


@_FUZZ
@given(st.lists(st.tuples(st.integers(61, 400), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_records_with_fixed_crc(mutations: list[tuple[int, int]]) -> None:
    batch = build(0, [(0, TS, b"key", b"value", [("h", b"v")]), (1, TS + 1, None, b"x" * 70, []),
                      (2, TS + 2, b"k", None, [])])
    for pos, byte in mutations:
        if pos < len(batch):
            batch[pos] = byte
    _decode_or_corrupt(bytes(recrc(batch)))
