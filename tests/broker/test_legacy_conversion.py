"""Up-conversion of produced v0/v1 message sets (kafka-python's legacy builder) to one v2 batch, and the
lazy down-conversion of stored v2 batches for Fetch v0..3: sizes, the overflow entry, chunking."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import cramjam
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from metaq.broker import downconvert
from metaq.broker.downconvert import DownConverted, fetch_magic
from metaq.broker.log.segment_reads import FetchSlice
from metaq.broker.log.upconvert import upconvert
from metaq.errors import CorruptRecordError, MessageSizeTooLargeError
from metaq.protocol import legacy
from metaq.protocol.batches import read_header
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.records import decode_records

TS = 1_700_000_000_000
LIMIT = 64 << 20


def produced(magic: int, codec: int, n: int, tag: str = "v") -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i in range(n):
        builder.append(i, TS + i, None if i % 2 else b"k%d" % i, f"{tag}-{i}-".encode() * 10)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", [0, 1, 2, 3])
@pytest.mark.parametrize("magic", [0, 1])
def test_upconvert_keeps_records_timestamps_and_codec(magic: int, codec: int) -> None:
    batch = upconvert(produced(magic, codec, 8), LIMIT)
    header = read_header(batch)
    assert header.magic == 2 and header.record_count == 8 and header.attributes & 0x07 == codec
    assert [r[:4] for r in decode_records(batch).records] == [
        (i, TS + i if magic else -1, None if i % 2 else b"k%d" % i, f"v-{i}-".encode() * 10) for i in range(8)]


def test_upconvert_refuses_what_kafka_refuses() -> None:
    bad_crc = bytearray(produced(1, 0, 2))
    bad_crc[-1] ^= 1
    mixed = produced(0, 0, 1) + produced(1, 0, 1)
    log_append = legacy.encode_message(0, 1, legacy.TIMESTAMP_TYPE_MASK, TS, None, b"v")
    nested = legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(
        legacy.build_message_set(1, 1, [(0, TS, None, b"v")]))))
    empty_wrapper = legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(b"")))
    for data, match in ((bytes(bad_crc), "CRC"), (mixed, "magic 1 after"), (log_append, "may not set"),
                        (nested, "nested"), (empty_wrapper, "no message"), (b"", "empty")):
        with pytest.raises(CorruptRecordError, match=match):
            upconvert(data, LIMIT)
    bomb = legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(
        legacy.encode_message(0, 1, 0, TS, None, bytes(1 << 20)))))
    with pytest.raises(MessageSizeTooLargeError):
        upconvert(bomb, 1 << 16)


_OPENED: list[io.FileIO] = []


@pytest.fixture(autouse=True)
def _close_stored_files() -> Iterator[None]:
    """The segment files :func:`stored` opened are closed after each test (not left to the collector)."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def stored(path: Path, batches: list[bytes]) -> FetchSlice:
    """The batches written one after the other (offsets from 0) as a segment slice (its file is closed after
    the test)."""
    data = bytearray()
    offset = 0
    for batch in batches:
        b = bytearray(batch)
        b[0:8] = offset.to_bytes(8, "big")
        offset += read_header(b).record_count
        data += b
    path.write_bytes(bytes(data))
    _OPENED.append(io.FileIO(path, "r"))
    return FetchSlice(_OPENED[-1], 0, len(data), 0)


def v2(n: int, compression: str = "none", headers: bool = False) -> bytes:
    builder = BatchBuilder(1 << 30, compression)
    for i in range(n):
        builder.append(TS + i, b"k", b"value-%04d-" % i * 8, [("h", b"x")] if headers else None)
    return builder.build()


def pieces(converted: DownConverted) -> bytes:
    out = b"".join(converted.pieces())
    assert len(out) == converted.size
    return out


def test_fetch_magic_by_version() -> None:
    assert [fetch_magic(v) for v in range(6)] == [0, 0, 1, 1, None, None]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_down_conversion_reads_back_the_records(tmp_path: Path, magic: int, compression: str) -> None:
    piece = stored(tmp_path / "log", [v2(10, compression, headers=True), v2(10, compression)])
    out = pieces(DownConverted(piece, magic, 0))
    result = decode_records(out)
    assert [r[:4] for r in result.records] == [
        (i, TS + i % 10 if magic else -1, b"k", b"value-%04d-" % (i % 10) * 8) for i in range(20)]
    assert all(r[4] == () for r in result.records)
    codec = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}[compression]
    assert out[16] == magic and out[17] & 0x07 == codec


def test_records_below_the_fetch_offset_are_left_out_and_the_rest_is_an_overflow_entry(tmp_path: Path) -> None:
    piece = stored(tmp_path / "log", [v2(50)])
    converted = DownConverted(piece, 1, 45)
    assert converted.size == piece.size  # the five converted messages are smaller than the stored batch
    out = pieces(converted)
    result = decode_records(out)
    assert [r[0] for r in result.records] == [45, 46, 47, 48, 49]
    assert result.next_offset == 50 and result.complete_bytes < len(out)  # the overflow entry is partial


def test_a_large_answer_is_converted_a_chunk_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(downconvert, "CHUNK_BYTES", 4096)
    piece = stored(tmp_path / "log", [v2(20) for _ in range(30)])
    converted = DownConverted(piece, 0, 0)
    parts = list(converted.pieces())
    assert len(parts) > 10 and max(len(p) for p in parts) < 3 * 4096
    result = decode_records(b"".join(parts))
    # magic 0 messages are larger than the stored records: what fits in the size is sent, the rest later
    assert result.records and [r[0] for r in result.records] == list(range(len(result.records)))
    assert sum(len(p) for p in parts) == converted.size >= piece.size


def test_upconvert_refuses_zstd_and_backwards_inner_offsets() -> None:
    from metaq.errors import InvalidRecordError, UnsupportedCompressionError

    inner = legacy.encode_message(0, 1, 0, TS, None, b"v")
    zstd = legacy.encode_message(0, 1, 4, TS, None, bytes(cramjam.zstd.compress(inner)))
    with pytest.raises(UnsupportedCompressionError, match="zstd"):
        upconvert(zstd, LIMIT)
    backwards = b"".join(legacy.encode_message(o, 1, 0, TS, None, b"v") for o in (0, 2, 1))
    with pytest.raises(InvalidRecordError, match="backwards"):
        upconvert(legacy.encode_message(0, 1, 1, TS, None, bytes(cramjam.gzip.compress(backwards))), LIMIT)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_log_append_time_on_append_up_conversion_and_down_conversion(tmp_path: Path, compression: str) -> None:
    """A LogAppendTime topic's log (Kafka's LogValidator): a v2 batch and an up-converted v0 and v1 set all get
    the append time (type bit, maxTimestamp, answered to the producer); a Fetch v2/v3 answer keeps it (v1
    messages, or a v1 wrapper, with the LogAppendTime bit and that timestamp), a Fetch v0/v1 answer has none."""
    from metaq.broker.log.config import LOG_APPEND_TIME, LogConfig
    from metaq.broker.log.partition_log import PartitionLog

    codec = {"none": 0, "gzip": 1}[compression]
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(timestamp_type=LOG_APPEND_TIME), recover=False)
    now = TS + 10_000
    results = [plog.append(v2(3, compression), now_ms=now),
               plog.append(upconvert(produced(0, codec, 2), LIMIT), now_ms=now + 1),
               plog.append(upconvert(produced(1, codec, 2), LIMIT), now_ms=now + 2)]
    assert [(r.base_offset, r.log_append_time) for r in results] == [(0, now), (3, now + 1), (5, now + 2)]
    piece = plog.read(0, 1 << 20)
    assert piece is not None
    expected = [now] * 3 + [now + 1] * 2 + [now + 2] * 2
    assert [r[1] for r in decode_records(piece.read_bytes()).records] == expected
    assert plog.offset_for_timestamp(now + 1) == (3, now + 1)
    one = pieces(DownConverted(piece, 1, 0))
    assert [r[1] for r in decode_records(one).records] == expected
    assert {one[pos + 17] & 0x0F for pos in _entries(one)} == {legacy.TIMESTAMP_TYPE_MASK | codec}
    assert {int.from_bytes(one[pos + 18:pos + 26], "big") for pos in _entries(one)} == {now, now + 1, now + 2}
    if codec:  # the wrappers' inner messages carry the type and the time too (Kafka's MemoryRecordsBuilder)
        for pos in _entries(one):
            assert one[pos + 26:pos + 30] == b"\xff\xff\xff\xff"  # a wrapper has no key
            value_size = int.from_bytes(one[pos + 30:pos + 34], "big")
            inner = bytes(cramjam.gzip.decompress(one[pos + 34:pos + 34 + value_size]))
            wrapper_time = one[pos + 18:pos + 26]
            assert {(inner[p + 17], inner[p + 18:p + 26]) for p in _entries(inner)} == {(0x08, wrapper_time)}
    zero = pieces(DownConverted(piece, 0, 0))
    assert [r[1] for r in decode_records(zero).records] == [-1] * 7
    plog.close()


def _entries(data: bytes) -> list[int]:
    """The byte positions of the complete top-level entries of a v0/v1 message set."""
    out, pos = [], 0
    while len(data) - pos >= 17:
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        if pos + size > len(data):
            break
        out.append(pos)
        pos += size
    return out
