"""Record batch v2 header parsing, validation and offset assignment."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from metaq.errors import CorruptRecordError, UnsupportedMessageFormatError
from metaq.protocol.batches import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    assign_offsets,
    batch_problem,
    iter_valid_batches,
    log_append_time,
    read_header,
    total_size_at,
    valid_prefix,
    validate_batches,
)
from tests.broker import BASE_TS, decode, make_batch, make_values


def _recrc(data: bytearray, pos: int = 0) -> None:
    """Recompute the CRC of the batch at ``pos`` after a deliberate change inside the CRC range."""
    (length,) = struct.unpack_from(">i", data, pos + 8)
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21 : pos + 12 + length])))


def test_header_fields_match_kafka_python() -> None:
    data = make_batch(make_values(5), timestamps=[10, 50, 20, 40, 30], base_offset=1234)
    header = read_header(data)
    batch = DefaultRecordBatch(data)
    assert header.base_offset == 1234 == batch.base_offset
    assert header.size == len(data) == header.batch_length + LOG_OVERHEAD
    assert header.magic == 2
    assert header.crc == batch.crc
    assert header.last_offset_delta == 4
    assert header.last_offset == 1238 and header.next_offset == 1239
    assert header.base_timestamp == 10 and header.max_timestamp == 50
    assert header.record_count == 5
    assert header.producer_id == -1 and header.producer_epoch == -1 and header.base_sequence == -1
    assert header.compression == 0
    assert not header.is_transactional and not header.is_control and not header.is_log_append_time


def test_header_flags() -> None:
    # kafka-python only keeps compression when it pays off: use compressible values.
    header = read_header(make_batch(make_values(50, size=100), compression=1, transactional=True))
    assert header.compression == 1
    assert header.is_transactional
    assert header.producer_id == 7
    data = bytearray(make_batch([b"x"]))
    struct.pack_into(">h", data, 21, 0x20 | 0x08)
    header = read_header(data)
    assert header.is_control and header.is_log_append_time


def test_read_header_at_position() -> None:
    first, second = make_batch([b"a"]), make_batch([b"b", b"c"], base_offset=1)
    header = read_header(first + second, len(first))
    assert header.base_offset == 1 and header.record_count == 2


@pytest.mark.parametrize("cut", [0, 1, 12, BATCH_HEADER_SIZE - 1])
def test_read_header_short_buffer(cut: int) -> None:
    with pytest.raises(CorruptRecordError, match="header bytes"):
        read_header(make_batch([b"a"])[:cut])


def test_read_header_bad_length() -> None:
    data = bytearray(make_batch([b"a"]))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        read_header(data)


def test_validate_single_and_concatenated() -> None:
    batches = [make_batch(make_values(n)) for n in (1, 3, 10)]
    headers = validate_batches(b"".join(batches))
    assert [h.record_count for h in headers] == [1, 3, 10]
    assert validate_batches(bytearray(batches[0]))[0].record_count == 1
    assert validate_batches(memoryview(batches[1]))[0].record_count == 3


def test_validate_empty() -> None:
    with pytest.raises(CorruptRecordError, match="empty"):
        validate_batches(b"")


def test_validate_every_truncation_is_rejected() -> None:
    data = make_batch(make_values(3)) + make_batch(make_values(2))
    first_size = read_header(data).size
    for cut in range(1, len(data)):
        if cut == first_size:
            continue  # a complete first batch alone is valid
        with pytest.raises(CorruptRecordError, match="byte"):
            validate_batches(data[:cut])


def test_validate_crc_covers_everything_from_attributes() -> None:
    data = make_batch(make_values(3))
    for pos in range(21, len(data)):
        corrupt = bytearray(data)
        corrupt[pos] ^= 0x40
        with pytest.raises(CorruptRecordError):
            validate_batches(corrupt)


def test_validate_base_offset_and_leader_epoch_are_outside_crc() -> None:
    data = bytearray(make_batch(make_values(3)))
    struct.pack_into(">qii", data, 0, 999, read_header(data).batch_length, 42)
    (header,) = validate_batches(data)
    assert header.base_offset == 999 and header.partition_leader_epoch == 42


def test_validate_crc_message_names_position() -> None:
    first = make_batch([b"a"])
    second = bytearray(make_batch([b"b"]))
    second[-1] ^= 1
    with pytest.raises(CorruptRecordError, match=rf"byte {len(first)}: CRC mismatch"):
        validate_batches(first + bytes(second))


@pytest.mark.parametrize("magic", [0, 1])
def test_validate_legacy_magic(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 16)
    builder.append(0, timestamp=None if magic == 0 else 1000, key=None, value=b"legacy")
    with pytest.raises(UnsupportedMessageFormatError, match=f"v{magic}"):
        validate_batches(bytes(builder.build()))


def test_validate_unknown_magic() -> None:
    data = bytearray(make_batch([b"a"]))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="unknown magic byte 3"):
        validate_batches(data)


@pytest.mark.parametrize("length", [-1, 0, 48])
def test_validate_small_length(length: int) -> None:
    data = bytearray(make_batch([b"a"]))
    struct.pack_into(">i", data, 8, length)
    with pytest.raises(CorruptRecordError, match="below the minimum 49"):
        validate_batches(data)


def test_validate_length_beyond_buffer() -> None:
    data = bytearray(make_batch([b"a"]))
    struct.pack_into(">i", data, 8, 10_000)
    with pytest.raises(CorruptRecordError, match="truncated"):
        validate_batches(data)


def test_validate_trailing_garbage() -> None:
    data = make_batch([b"a"])
    with pytest.raises(CorruptRecordError, match=rf"byte {len(data)}"):
        validate_batches(data + b"\x00" * 5)


@pytest.mark.parametrize(("field_pos", "fmt", "message"), [(57, ">i", "record count"), (23, ">i", "last offset delta")])
def test_validate_negative_counts(field_pos: int, fmt: str, message: str) -> None:
    data = bytearray(make_batch([b"a"]))
    struct.pack_into(fmt, data, field_pos, -5)
    _recrc(data)
    with pytest.raises(CorruptRecordError, match=f"negative {message}"):
        validate_batches(data)


def test_iter_valid_batches_stops_at_garbage() -> None:
    batches = [make_batch(make_values(n)) for n in (2, 3, 4)]
    data = b"".join(batches) + b"garbage-garbage-garbage"
    found = list(iter_valid_batches(data))
    assert [pos for pos, _ in found] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert valid_prefix(data) == (sum(map(len, batches)), [h for _, h in found])
    assert list(iter_valid_batches(data, len(batches[0])))[0][0] == len(batches[0])
    assert valid_prefix(data, len(batches[0]))[0] == len(batches[1]) + len(batches[2])
    assert valid_prefix(b"") == (0, [])


def test_batch_problem_and_total_size() -> None:
    data = make_batch([b"a"])
    assert batch_problem(data) is None
    assert "truncated" in (batch_problem(data[:-1]) or "")
    assert total_size_at(data) == len(data)
    assert total_size_at(data[:11]) is None
    assert total_size_at(b"x" * 3 + data, 3) == len(data)


def test_assign_offsets_contiguous_and_crc_preserved() -> None:
    batches = [make_batch(make_values(n, tag=f"b{n}")) for n in (1, 5, 3)]
    buf = bytearray(b"".join(batches))
    headers = validate_batches(buf)
    assert assign_offsets(buf, headers, 100) == 109
    assert [h.base_offset for h in validate_batches(buf)] == [100, 101, 106]
    assert [offset for offset, _, _ in decode(buf)] == list(range(100, 109))


def test_assign_offsets_uses_last_offset_delta() -> None:
    # A compacted-style batch whose offsets have a gap: it occupies lastOffsetDelta + 1 offsets.
    data = bytearray(make_batch([b"a", b"b"]))
    struct.pack_into(">i", data, 23, 9)
    _recrc(data)
    buf = data + bytearray(make_batch([b"c"]))
    headers = validate_batches(buf)
    assert assign_offsets(buf, headers, 0) == 11
    assert read_header(buf, len(data)).base_offset == 10


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=6),
    cut=st.integers(min_value=0, max_value=10_000),
    garbage=st.binary(max_size=80),
)
def test_valid_prefix_is_exactly_the_complete_batches(sizes: list[int], cut: int, garbage: bytes) -> None:
    batches = [make_batch(make_values(n), base_ts=BASE_TS + i) for i, n in enumerate(sizes)]
    data = b"".join(batches)
    cut = min(cut, len(data))
    expected_count, expected_bytes = 0, 0
    for batch in batches:
        if expected_bytes + len(batch) > cut:
            break
        expected_bytes += len(batch)
        expected_count += 1
    prefix_bytes, headers = valid_prefix(data[:cut] + garbage)
    # Garbage may by chance not start a valid batch; it can never extend the valid prefix past the cut
    # unless the cut was at a batch boundary (then the garbage is simply not a batch).
    assert prefix_bytes == expected_bytes
    assert len(headers) == expected_count


@pytest.mark.parametrize("compression", [0, 1])
def test_log_append_time_sets_the_type_bit_and_max_timestamp_inside_a_valid_crc(compression: int) -> None:
    """What a LogAppendTime topic's log does to each appended batch (Kafka's DefaultRecordBatch.setMaxTimestamp):
    kafka-python's reader, which checks the CRC-32C, then reads every record at the broker's time."""
    data = bytearray(make_batch(make_values(3, 40), compression=compression)
                     + make_batch(make_values(2, 40), base_offset=3, compression=compression))
    headers = validate_batches(data)
    now = BASE_TS + 123_456
    after = log_append_time(data, headers, now)
    assert validate_batches(data) == after  # CRC-32C valid again, the headers returned as stored
    for header, before in zip(after, headers, strict=True):
        assert header.is_log_append_time and header.max_timestamp == now
        assert header.attributes & 0x07 == compression and header.base_timestamp == before.base_timestamp
    pos = 0
    for header in after:
        batch = DefaultRecordBatch(bytes(data[pos:pos + header.size]))
        assert batch.validate_crc() and batch.timestamp_type == 1
        assert [r.timestamp for r in batch] == [now] * header.record_count
        pos += header.size
