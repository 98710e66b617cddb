"""Message sets v0/v1: decode_records on what kafka-python's legacy producer code writes (plain and every
codec it has), as an old broker stores it (wrapper offsets absolute), mixed with v2 batches; our encoder
read back by kafka-python's reader; the lz4 header checksum of KAFKA-3160; malformed sets refused."""

from __future__ import annotations

import struct
import zlib

import cramjam
import pytest
from kafka.codec import lz4_encode, lz4_encode_old_kafka
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metaq.errors import CorruptRecordError
from metaq.protocol import legacy, lz4_frame
from metaq.protocol.records import decode_columns, decode_records
from metaq.testing.readers import each_record_reader  # noqa: F401 (autouse: each test runs with both readers)

TS = 1_700_000_000_000
_OFFSET = struct.Struct(">q")
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}

Item = tuple[int, bytes | None, bytes | None]
"""(timestamp, key, value)"""


def items(n: int, start: int = 0) -> list[Item]:
    """Records with a null key every third, a null value every fifth."""
    return [(TS + i, None if i % 3 == 0 else b"k%d" % i, None if i % 5 == 4 else b"value-%d" % (start + i))
            for i in range(start, start + n)]


def stored(magic: int, codec: int, base: int, records: list[Item]) -> bytes:
    """What a 0.8-0.10 broker stores for kafka-python's produced set: offsets base.. (v0 inner offsets
    absolute, as the broker rewrites them; v1 inner offsets relative, the wrapper's set to the last one)."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, (ts, key, value) in enumerate(records):
        offset = base + i if (magic == 0 and codec) else i
        assert builder.append(offset, ts, key, value) is not None
    data = bytearray(builder.build())
    if codec:
        _OFFSET.pack_into(data, 0, base + len(records) - 1)  # the offset lies outside the CRC
        return bytes(data)
    pos = 0
    for i in range(len(records)):
        _OFFSET.pack_into(data, pos, base + i)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return bytes(data)


def expected(magic: int, base: int, records: list[Item]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(base + i, ts if magic else -1, key, value) for i, (ts, key, value) in enumerate(records)]


def plain(result_records: list[tuple[int, int, bytes | None, bytes | None, object]]) -> list[tuple[object, ...]]:
    assert all(r[4] == () for r in result_records)
    return [r[:4] for r in result_records]


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_sets_decode(magic: int, codec: str) -> None:
    records = items(7)
    data = stored(magic, CODECS[codec], 100, records) + stored(magic, CODECS[codec], 107, items(3, 7))
    result = decode_records(data)
    assert plain(result.records) == expected(magic, 100, records + items(3, 7))
    assert result.next_offset == 110
    assert result.complete_bytes == len(data)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_fetch_into_the_middle_of_a_wrapper_skips_inner_messages_below(magic: int, codec: str) -> None:
    data = stored(magic, CODECS[codec], 10, items(6))
    result = decode_records(data, min_offset=13)
    assert [r[0] for r in result.records] == [13, 14, 15]
    assert result.next_offset == 16
    assert decode_records(data, min_offset=16).records == []


def test_v1_log_append_time_wrapper_gives_its_timestamp_to_every_inner_message() -> None:
    data = legacy.build_message_set(1, 1, [(5 + i, TS + i, None, b"v%d" % i) for i in range(3)],
                                    log_append_time=TS + 999)
    assert [r[1] for r in decode_records(data).records] == [TS + 999] * 3
    create = legacy.build_message_set(1, 1, [(5 + i, TS + i, None, b"v%d" % i) for i in range(3)])
    assert [r[1] for r in decode_records(create).records] == [TS, TS + 1, TS + 2]


def test_raw_snappy_wrapper_without_xerial_framing() -> None:
    inner = b"".join(legacy.encode_message(i, 1, 0, TS, None, b"raw-%d" % i) for i in range(3))
    data = legacy.encode_message(42, 1, 2, TS, None, bytes(cramjam.snappy.compress_raw(inner)))
    assert [(r[0], r[3]) for r in decode_records(data).records] == [(40, b"raw-0"), (41, b"raw-1"), (42, b"raw-2")]


def test_mixed_v0_v1_v2_and_a_cut_off_entry() -> None:
    v2 = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                   producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(2):
        v2.append(i, TS + 50 + i, None, b"v2-%d" % i, [("h", b"x")])
    batch = bytearray(v2.build())
    _OFFSET.pack_into(batch, 0, 6)
    tail = stored(1, 0, 8, items(1, 8))
    data = stored(0, 1, 0, items(3)) + stored(1, 0, 3, items(3, 3)) + bytes(batch) + tail
    result = decode_records(data[:-5], min_offset=1)
    assert [r[0] for r in result.records] == [1, 2, 3, 4, 5, 6, 7]
    assert [r[1] for r in result.records[:4]] == [-1, -1, TS + 3, TS + 4]
    assert result.records[5][4] == (("h", b"x"),)
    assert result.next_offset == 8
    assert result.complete_bytes == len(data) - len(tail)
    assert result.first_batch_size == struct.unpack_from(">i", data, 8)[0] + 12
    columns = decode_columns(data, with_headers=False).columns
    assert columns.offsets == list(range(9))
    assert columns.values[6] == b"v2-0"


def test_only_a_cut_off_first_entry_reports_its_size() -> None:
    data = stored(1, 0, 0, [(TS, None, b"x" * 1000)])
    result = decode_records(data[:100])
    assert (result.records, result.next_offset, result.complete_bytes) == ([], None, 0)
    assert result.first_batch_size == len(data)
    assert decode_records(data[:14]).first_batch_size == len(data)  # not even the magic byte arrived


def test_bad_crc_is_corrupt_and_skippable_without_the_check() -> None:
    data = bytearray(stored(1, 0, 0, items(2)))
    data[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match=r"message at byte \d+ \(offset 1\): CRC mismatch"):
        decode_records(bytes(data))
    assert len(decode_records(bytes(data), check_crcs=False).records) == 2


def test_a_bad_crc_in_the_middle_of_a_run_is_named_by_position() -> None:
    data = bytearray(stored(0, 0, 50, items(5)))
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    data[second + 20] ^= 0x01
    with pytest.raises(CorruptRecordError, match=rf"message at byte {second} \(offset 51\): CRC mismatch"):
        decode_records(bytes(data))


def test_nested_compression_is_corrupt() -> None:
    inner = legacy.build_message_set(1, 1, [(0, TS, None, b"x")])
    data = legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(inner)))
    with pytest.raises(CorruptRecordError, match="nested compression"):
        decode_records(data)


def test_unknown_magic_and_undersized_messages_are_corrupt() -> None:
    data = bytearray(stored(1, 0, 0, items(1)))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="unknown magic byte 3"):
        decode_records(bytes(data))
    small = bytearray(stored(0, 0, 0, items(1)))
    struct.pack_into(">i", small, 8, 10)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        decode_records(bytes(small))


def test_lengths_that_do_not_add_up_are_corrupt() -> None:
    message = bytearray(legacy.encode_message(0, 0, 0, 0, b"key", b"value"))
    struct.pack_into(">i", message, 18, 50)  # key length past the message
    struct.pack_into(">I", message, 12, zlib.crc32(message[16:]))
    with pytest.raises(CorruptRecordError, match="does not fit"):
        decode_records(bytes(message))
    struct.pack_into(">i", message, 18, -7)
    struct.pack_into(">I", message, 12, zlib.crc32(message[16:]))
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(message))


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_our_encoder_is_read_by_kafka_python(magic: int, codec: str) -> None:
    rows = [(20 + i, TS + i, key, value) for i, (_, key, value) in enumerate(items(5))]
    data = legacy.build_message_set(magic, CODECS[codec], rows)
    batches = MemoryRecords(data)
    got = []
    while (batch := batches.next_batch()) is not None:
        assert batch.validate_crc()
        got += [(r.offset, r.timestamp if magic else -1, r.key, r.value) for r in batch]
    assert got == [(o, t if magic else -1, k, v) for o, t, k, v in rows]


def test_xxh32_known_values() -> None:
    assert lz4_frame.xxh32(b"") == 0x02CC5D05
    assert lz4_frame.xxh32(b"a") == 0x550D7456
    assert lz4_frame.xxh32(b"abc") == 0x32D153FF


def test_lz4_header_checksum_of_kafka_0_8_both_ways() -> None:
    payload = b"lz4 framing " * 50
    old, new = lz4_encode_old_kafka(payload), lz4_encode(payload)
    assert lz4_frame.lz4_frame_fix(new, broken=True) == old  # what kafka-python sends a 0.8/0.9 broker
    with pytest.raises(cramjam.DecompressionError):
        cramjam.lz4.decompress(old)
    assert bytes(cramjam.lz4.decompress(lz4_frame.lz4_frame_fix(old, broken=False))) == payload


@pytest.mark.parametrize("magic", [0, 1])
def test_plain_entries_are_the_bytes_of_encode_message(magic: int) -> None:
    rows = [(7 + i, TS + i, key, value) for i, (_, key, value) in enumerate(items(6))]
    expected = b"".join(legacy.encode_message(o - 7, magic, 0, t, k, v) for o, t, k, v in rows)
    assert legacy.build_message_set(magic, 0, [(o - 7, t, k, v) for o, t, k, v in rows]) == expected
