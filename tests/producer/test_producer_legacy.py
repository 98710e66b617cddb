"""The producer's batches as message sets v0/v1 for brokers before Kafka 0.11 (metaq/producer/legacy.py)."""

from __future__ import annotations

import pytest

from metaq.producer.legacy import HeadersUnsupportedError, message_set_from_batch, produce_magic
from metaq.protocol import legacy, lz4_frame
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.compression import CODECS
from metaq.protocol.records import decode_records

ROWS = [(1_700_000_000_000 + i, b"key-%d" % i if i % 3 else None, b"value-%d-" % i + b"x" * 200) for i in range(20)]


def _batch(codec: str, headers: list[tuple[str, bytes | None]] | None = None) -> bytes:
    builder = BatchBuilder(1 << 20, codec)
    for i, (ts, key, value) in enumerate(ROWS):
        assert builder.add(i, ts, key, value, headers if headers and i == 5 else []) is not None
    return builder.build()


@pytest.mark.parametrize(("version", "magic"), [(0, 0), (1, 0), (2, 1), (3, None), (7, None)])
def test_produce_versions_carry_these_formats(version: int, magic: int | None) -> None:
    assert produce_magic(version) == magic


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_a_batch_becomes_a_message_set_with_its_records_and_codec(magic: int, codec: str) -> None:
    message_set = message_set_from_batch(_batch(codec), magic)
    assert message_set[16] == magic
    assert message_set[17] & legacy.CODEC_MASK == CODECS[codec]  # one wrapper of the batch's codec (or plain)
    got = decode_records(message_set).records
    assert [(o, t, k, v) for o, t, k, v, _ in got] == [
        (i, ts if magic else legacy.NO_TIMESTAMP, key, value) for i, (ts, key, value) in enumerate(ROWS)]


def test_magic_0_lz4_is_the_frame_kafka_0_8_reads() -> None:
    """Kafka 0.8.2-0.9's KafkaLZ4BlockInputStream refuses a content checksum and a content size and checks the
    header checksum over the frame magic too (KAFKA-3160): the wrapper's frame has neither flag, and its header
    checksum is the old one (rewriting it the old way changes nothing)."""
    wrapper = next(iter(legacy.walk_message_set(message_set_from_batch(_batch("lz4"), 0))))
    frame = wrapper.value
    assert frame is not None and frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x0C == 0  # FLG: no content size (0x08), no content checksum (0x04)
    assert lz4_frame.lz4_frame_fix(frame, broken=True) == frame
    assert lz4_frame.lz4_frame_fix(frame, broken=False) != frame


def test_headers_have_no_place_in_old_formats() -> None:
    with pytest.raises(HeadersUnsupportedError, match="record 5 has headers: message format v1"):
        message_set_from_batch(_batch("none", [("trace", b"1")]), 1)
