"""Every codec through cramjam: round trips, and payloads written by the codec libraries Kafka clients use."""

from __future__ import annotations

import struct
import tracemalloc

import kafka.codec
import lz4.frame
import pytest
import zstandard

from metaq.errors import CorruptRecordError, MessageSizeTooLargeError, UnsupportedCompressionError
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.compression import CODECS, _size_hint, compress, decompress
from metaq.protocol.records import decode_records

DATA = b"".join(b"record %d with some repeated text " % i for i in range(5000))  # > one 32 KiB snappy block


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_round_trip_and_smaller(name: str) -> None:
    packed = compress(CODECS[name], DATA)
    assert len(packed) < len(DATA) // 3
    assert decompress(CODECS[name], packed) == DATA


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_batch_builder_compresses_and_decode_records_reads_it(name: str) -> None:
    builder = BatchBuilder(1 << 20, name)
    for i in range(100):
        assert builder.append(1000 + i, b"k%d" % i, b"value %d " % i * 10)
    batch = builder.build()
    assert struct.unpack_from(">h", batch, 21)[0] & 7 == CODECS[name]
    records = decode_records(batch).records
    assert [(r[0], r[1], r[2]) for r in records] == [(i, 1000 + i, b"k%d" % i) for i in range(100)]


def test_snappy_is_xerial_framed_as_kafka_writes_it() -> None:
    packed = compress(CODECS["snappy"], DATA)
    assert packed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert kafka.codec.snappy_decode(packed) == DATA  # python-snappy's reader agrees


def test_reads_xerial_and_raw_snappy_from_python_snappy() -> None:
    assert decompress(CODECS["snappy"], kafka.codec.snappy_encode(DATA)) == DATA
    assert decompress(CODECS["snappy"], kafka.codec.snappy_encode(DATA, xerial_compatible=False)) == DATA


def test_lz4_is_a_frame_with_independent_blocks() -> None:
    packed = compress(CODECS["lz4"], DATA)
    assert packed[:4] == b"\x04\x22\x4d\x18" and packed[4] & 0x20  # frame magic, block independence flag
    assert lz4.frame.decompress(packed) == DATA
    assert decompress(CODECS["lz4"], lz4.frame.compress(DATA, block_linked=False)) == DATA


def test_zstd_from_zstandard_with_and_without_content_size() -> None:
    assert zstandard.ZstdDecompressor().decompress(compress(CODECS["zstd"], DATA)) == DATA
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    payload = streamed.compress(DATA) + streamed.flush()
    assert decompress(CODECS["zstd"], payload) == DATA


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_is_a_corrupt_record_error_naming_the_codec(name: str) -> None:
    packed = compress(CODECS[name], DATA)
    with pytest.raises(CorruptRecordError, match=name):
        decompress(CODECS[name], packed[:len(packed) // 2])


def test_unknown_codec() -> None:
    with pytest.raises(UnsupportedCompressionError, match="unknown compression codec 6"):
        decompress(6, b"x")


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_limit_is_exact_and_holds_for_bombs(name: str) -> None:
    codec = CODECS[name]
    assert decompress(codec, compress(codec, DATA), limit=len(DATA)) == DATA
    with pytest.raises(MessageSizeTooLargeError, match=name):
        decompress(codec, compress(codec, DATA), limit=len(DATA) - 1)
    zeros = bytes(4 << 20)  # compresses far better than 16x: larger buffers, up to the limit, are tried
    assert decompress(codec, compress(codec, zeros), limit=len(zeros)) == zeros
    with pytest.raises(MessageSizeTooLargeError, match=name):
        decompress(codec, compress(codec, zeros), limit=1 << 20)


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_a_very_compressible_batch_is_not_decompressed_into_a_limit_sized_buffer(name: str) -> None:
    """The broker validates with a limit of at least 64 MiB: one such buffer per batch of repetitive values
    (here 2,000 times smaller compressed) cost ~40 ms of zeroing per produced batch."""
    codec = CODECS[name]
    data = b"x" * 100 * 5000
    payload = compress(codec, data)
    already_tracing = tracemalloc.is_tracing()  # e.g. python -X tracemalloc: measure from here, leave it on
    if not already_tracing:
        tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        assert decompress(codec, payload, limit=64 << 20) == data
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not already_tracing:
            tracemalloc.stop()
    assert peak < 8 * len(data), f"{name}: {peak} bytes at the peak to decompress {len(data)}"


def test_the_first_buffer_is_the_size_the_frame_headers_give() -> None:
    """zstd's Frame_Content_Size and lz4's content size field are exact; lz4 frames without one give a bound from
    their block headers (no smaller than the content); a payload the hint misjudges still decompresses."""
    assert _size_hint(compress(CODECS["zstd"], DATA), "zstd") == len(DATA)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()  # as librdkafka writes them
    packed = streamed.compress(DATA) + streamed.flush()
    bound = _size_hint(packed, "zstd")
    assert bound is not None and len(DATA) <= bound <= len(DATA) + (128 << 10)
    assert decompress(CODECS["zstd"], packed, limit=len(DATA)) == DATA
    assert _size_hint(lz4.frame.compress(DATA, store_size=True), "lz4") == len(DATA)
    for checksums in (False, True):
        packed = lz4.frame.compress(DATA, store_size=False, block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                    block_checksum=checksums, content_checksum=checksums)
        bound = _size_hint(packed, "lz4")
        assert bound is not None and len(DATA) <= bound <= len(DATA) + (64 << 10)
        assert decompress(CODECS["lz4"], packed, limit=len(DATA)) == DATA
    assert _size_hint(b"\x04\x22\x4d\x18\x60", "lz4") is None  # cut off in the header: guessed as before
    assert _size_hint(b"\x28\xb5\x2f\xfd\x00\x58", "zstd") is None


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_several_frames_and_empty_frames(name: str) -> None:
    codec = CODECS[name]
    two = compress(codec, DATA) + compress(codec, DATA[:1000])  # the first frame's size is too small a guess
    assert decompress(codec, two, limit=64 << 20) == DATA + DATA[:1000]
    assert decompress(codec, compress(codec, b""), limit=64 << 20) == b""
