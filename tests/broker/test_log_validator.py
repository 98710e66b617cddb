"""Batch validation inside the CRC (metaq/broker/log/validator.py): every invalid kind is refused with the
right error and leaves the log untouched; what real producers send is accepted; mutated batches are either
refused or decode cleanly."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.validator import decompressed_limit, validate_records
from metaq.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    MessageSizeTooLargeError,
    UnsupportedCompressionError,
)
from metaq.protocol.batches import BATCH_HEADER_SIZE, read_header, validate_batches
from metaq.protocol.compression import CODECS, compress
from metaq.protocol.records import decode_records
from metaq.testing.batches import INVALID_BATCHES, good_batch, recrc, set_field
from metaq.testing.readers import each_record_reader  # noqa: F401 (autouse: each test runs with both readers)

_ERROR_FOR_CODE = {
    ErrorCode.CORRUPT_MESSAGE: CorruptRecordError,
    ErrorCode.INVALID_RECORD: InvalidRecordError,
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: UnsupportedCompressionError,
}


def _validate(data: bytes, limit: int = 1 << 26) -> None:
    validate_records(data, validate_batches(data), limit)


@pytest.fixture
def plog(tmp_path: Path) -> Iterator[PartitionLog]:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), recover=False)
    yield log
    log.close()


@pytest.mark.parametrize("kind", sorted(INVALID_BATCHES))
def test_each_invalid_kind_is_refused_and_nothing_is_written(plog: PartitionLog, kind: str) -> None:
    plog.append(good_batch(2))
    size = plog.size_bytes()
    batch, code = INVALID_BATCHES[kind]()
    with pytest.raises(_ERROR_FOR_CODE[code]) as caught:
        plog.append(batch)
    assert type(caught.value) is _ERROR_FOR_CODE[code], caught.value  # not a broader or narrower class
    assert "batch at byte 0" in str(caught.value)
    assert (plog.log_end_offset, plog.size_bytes()) == (2, size)
    # a valid batch after an invalid one in the same request: the whole request is refused
    with pytest.raises(CorruptRecordError):
        plog.append(good_batch(1) + batch)
    assert plog.append(good_batch(3)).base_offset == 2


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_what_producers_send_is_accepted(plog: PartitionLog, compression: str) -> None:
    plog.append(good_batch(50, value=b"v" * 300, compression=compression, headers=[("h", b"1"), ("ü", None)]))
    # kafka-python's builder: idempotent producer fields, null keys and values, negative timestamp deltas
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=CODECS[compression],
                                        is_transactional=False, producer_id=42, producer_epoch=0,
                                        base_sequence=0, batch_size=1 << 30)
    for i in range(200):
        builder.append(i, 1_700_000_000_000 - i * 1000, None if i % 3 else b"k", None if i % 5 == 0 else b"x" * i,
                       [])
    plog.append(bytes(builder.build()))
    # two batches in one request, one record each
    assert plog.append(good_batch(1) + good_batch(1, compression=compression)).last_offset == 251
    assert plog.log_end_offset == 252


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_bomb_is_refused_without_inflating_it_all(codec: str) -> None:
    records = good_batch(1, value=b"\0" * 100_000)[BATCH_HEADER_SIZE:]
    batch = bytearray(good_batch(1, value=b"\0" * 100_000)[:BATCH_HEADER_SIZE]) + compress(CODECS[codec], records)
    batch = recrc(set_field(batch, "attributes", CODECS[codec]))
    _validate(batch)
    with pytest.raises(MessageSizeTooLargeError, match="more than 50000 bytes"):
        _validate(batch, limit=50_000)
    assert decompressed_limit(1 << 20) == 64 << 20 and decompressed_limit(10 << 20) == 320 << 20


def test_gzip_payload_of_several_members_is_accepted_and_trailing_garbage_is_not() -> None:
    records = good_batch(4)[BATCH_HEADER_SIZE:]
    header = good_batch(4)[:BATCH_HEADER_SIZE]
    half = len(records) // 2
    members = gzip.compress(records[:half]) + gzip.compress(records[half:])
    _validate(recrc(set_field(bytearray(header) + members, "attributes", 1)))
    with pytest.raises(CorruptRecordError, match="does not decompress"):
        _validate(recrc(set_field(bytearray(header) + members + b"junk", "attributes", 1)))


def _accepted_batch_decodes(batch: bytes) -> None:
    """The property: a batch the validator accepts decodes, with offsets 0..n-1 and its max timestamp."""
    try:
        _validate(batch)
    except (CorruptRecordError, MessageSizeTooLargeError):
        return
    header = read_header(batch)
    result = decode_records(batch)
    assert [r[0] for r in result.records] == list(range(header.record_count))
    assert max(r[1] for r in result.records) == header.max_timestamp
    assert result.next_offset == header.record_count


_BASES = [good_batch(3), good_batch(2, compression="gzip", value=b"z" * 200),
          good_batch(2, headers=[("key", b"value")])]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(range(len(_BASES))),
       mutations=st.lists(st.tuples(st.integers(21, 400), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.integers(0, 8))
def test_mutated_batches_with_a_valid_crc_are_refused_or_decode(base: int, mutations: list[tuple[int, int]],
                                                                  cut: int) -> None:
    batch = bytearray(_BASES[base])
    for pos, value in mutations:
        batch[21 + pos % (len(batch) - 21)] = value  # inside the CRC
    if cut:
        del batch[-cut:]
    _accepted_batch_decodes(recrc(batch))
