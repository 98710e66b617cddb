"""Record batch decoding and validation speed, on the same bytes: metaq's decoder with aiokafka's compiled
reader and with the pure-Python fallback, aiokafka's reader alone, kafka-python's MemoryRecords, and the
broker's validation walk (metaq.protocol.records.check_records) with either reader.

    python -m bench.decode [--records 200000] [--sizes 100,1024]

The data is what a 1 MiB fetch looks like: uncompressed v2 batches of about 16 KiB (kafka-python's default
batch size) with null keys and values of the given size, decoded 1 MiB at a time as the fetcher does. Each
decoder reads every record's offset, timestamp, key, value and headers; the best of three runs is reported,
in records per second of CPU time (the machine may be shared). It ends with the target line of the legacy
wire (bench/targets.py): v1 message sets decoded as fast as v2 batches.
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from bench.targets import Target, print_targets
from metaq.protocol import legacy
from metaq.protocol import records as records_module
from metaq.protocol.batches import BATCH_HEADER_SIZE, iter_valid_batches
from metaq.protocol.records import check_records, decode_records

_BASE_OFFSET = struct.Struct(">q")
BATCH_BYTES = 16384
FETCH_BYTES = 1 << 20
RUNS = 3


def make_batches(count: int, value_size: int, *, batch_bytes: int = BATCH_BYTES, codec: int = 0) -> bytes:
    """``count`` records in consecutive v2 batches, offsets from 0, as a broker would serve them."""
    out = bytearray()
    value = b"v" * value_size
    offset = 0
    timestamp = 1_700_000_000_000
    while offset < count:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=batch_bytes)
        first = offset
        while offset < count and builder.append(offset - first, timestamp + offset, None, value, []) is not None:
            offset += 1
        batch = builder.build()
        _BASE_OFFSET.pack_into(batch, 0, first)
        out += batch
    return bytes(out)


def fetches(data: bytes) -> list[bytes]:
    """``data`` cut at batch boundaries into pieces of at most 1 MiB, as fetch responses carry it."""
    out: list[bytes] = []
    start = 0
    for pos, header in iter_valid_batches(data):
        if pos + header.size - start > FETCH_BYTES:
            out.append(data[start:pos])
            start = pos
    out.append(data[start:])
    return out


def make_legacy_fetches(count: int, value_size: int, magic: int, codec: int) -> list[bytes]:
    """``count`` records as v0/v1 message sets, offsets from 0, cut into 1 MiB fetches at entry boundaries:
    plain messages, or compressed wrappers of about BATCH_BYTES of records each (as 0.10 producers wrote)."""
    value = b"v" * value_size
    per_wrapper = max(1, BATCH_BYTES // (value_size + 34)) if codec else 1
    entries = [legacy.build_message_set(magic, codec, [(o, 1_700_000_000_000 + o, None, value)
                                                      for o in range(first, min(first + per_wrapper, count))])
               for first in range(0, count, per_wrapper)]
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for entry in entries:
        if size + len(entry) > FETCH_BYTES and chunk:
            out.append(b"".join(chunk))
            chunk, size = [], 0
        chunk.append(entry)
        size += len(entry)
    out.append(b"".join(chunk))
    return out


def metaq_decode(chunks: list[bytes]) -> int:
    return sum(len(decode_records(chunk).records) for chunk in chunks)


def memory_records_decode(memory_records: Callable[[bytes], Any], chunks: list[bytes]) -> int:
    """Every field of every record read through a MemoryRecords class (no tuples built)."""
    n = 0
    for chunk in chunks:
        batches = memory_records(chunk)
        while batches.has_next():
            for record in batches.next_batch():
                record.offset, record.timestamp, record.key, record.value, record.headers  # noqa: B018
                n += 1
    return n


def aiokafka_fields(chunks: list[bytes]) -> int:
    """aiokafka's compiled reader alone: the upper bound of decode_records with it."""
    from aiokafka.record._crecords.memory_records import MemoryRecords as CompiledMemoryRecords

    return memory_records_decode(CompiledMemoryRecords, chunks)


def kafka_python_decode(chunks: list[bytes]) -> int:
    return memory_records_decode(MemoryRecords, chunks)


def metaq_validate(chunks: list[bytes]) -> int:
    """The broker's record walk (metaq/broker/log/validator.py) over every batch."""
    n = 0
    for chunk in chunks:
        for pos, header in iter_valid_batches(chunk):
            check_records(chunk, pos + BATCH_HEADER_SIZE, pos + header.size, header.record_count)
            n += header.record_count
    return n


@contextmanager
def reader(name: str) -> Iterator[None]:
    """metaq.protocol.records with the compiled reader ("compiled") or the pure-Python loop."""
    saved = records_module._CompiledBatch
    if name != "compiled":
        records_module._CompiledBatch = None
    try:
        yield
    finally:
        records_module._CompiledBatch = saved


def records_per_second(decode: Callable[[list[bytes]], int], chunks: list[bytes], expected: int) -> float:
    best = float("inf")
    for _ in range(RUNS):
        t0 = time.process_time()
        got = decode(chunks)
        best = min(best, time.process_time() - t0)
        if got != expected:
            raise AssertionError(f"{decode.__name__} decoded {got} records, expected {expected}")
    return expected / best


def run(records: int = 200_000, sizes: tuple[int, ...] = (100, 1024)) -> list[tuple[str, float]]:
    """(label, records/s) rows: each decoder on each value size."""
    rows: list[tuple[str, float]] = []
    readers = ["compiled", "pure-python"] if records_module.COMPILED else ["pure-python"]
    for size in sizes:
        count = records if size <= 100 else max(records // 4, 1000)
        chunks = fetches(make_batches(count, size))
        for name in readers:
            with reader(name):
                rows.append((f"metaq decode_records ({name}), {size} B values",
                             records_per_second(metaq_decode, chunks, count)))
        if "compiled" in readers:
            rows.append((f"aiokafka DefaultRecordBatch, fields only, {size} B values",
                         records_per_second(aiokafka_fields, chunks, count)))
        rows.append((f"kafka-python MemoryRecords, {size} B values",
                     records_per_second(kafka_python_decode, chunks, count)))
        for name in readers:
            with reader(name):
                rows.append((f"broker validation check_records ({name}), {size} B values",
                             records_per_second(metaq_validate, chunks, count)))
    rows += legacy_rows(records)
    return rows


LEGACY_CODECS = ((0, "plain"), (1, "gzip"))
LEGACY_VALUE_SIZE = 100


def _decode_label(fmt: str, codec_label: str, size: int) -> str:
    return f"metaq decode_records, {fmt} {codec_label}, {size} B values"


def legacy_rows(records: int, size: int = LEGACY_VALUE_SIZE) -> list[tuple[str, float]]:
    """decode_records on v1 message sets, plain and gzip, beside v2 batches of the same records; aiokafka's
    compiled MemoryRecords (its LegacyRecordBatch for v0/v1) on the same bytes."""
    rows: list[tuple[str, float]] = []
    for codec, codec_label in LEGACY_CODECS:
        v1 = make_legacy_fetches(records, size, 1, codec)
        v2 = fetches(make_batches(records, size, codec=codec))
        rows.append((_decode_label("v1 message sets", codec_label, size),
                     records_per_second(metaq_decode, v1, records)))
        rows.append((_decode_label("v2 batches", codec_label, size), records_per_second(metaq_decode, v2, records)))
        if records_module.COMPILED:
            rows.append((f"aiokafka MemoryRecords (LegacyRecordBatch), v1 {codec_label}, fields only, {size} B values",
                         records_per_second(aiokafka_fields, v1, records)))
    return rows


def legacy_targets(rows: list[tuple[str, float]], size: int = LEGACY_VALUE_SIZE) -> list[Target]:
    """The legacy wire's goal: v0/v1 message sets decode as fast as v2 batches of the same records."""
    rates = dict(rows)
    return [Target(f"v1 decode {codec_label} records/s v1/v2 ({size} B)",
                   rates[_decode_label("v1 message sets", codec_label, size)]
                   / rates[_decode_label("v2 batches", codec_label, size)], 1.0)
            for _, codec_label in LEGACY_CODECS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per 100-byte run (1 KiB: a quarter)")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma separated")
    args = parser.parse_args()
    rows = run(args.records, tuple(int(s) for s in args.sizes.split(",")))
    width = max(len(label) for label, _ in rows)
    for label, rate in rows:
        print(f"{label.ljust(width)}  {rate:>12,.0f} records/s")
    print_targets(legacy_targets(rows))


if __name__ == "__main__":
    main()
