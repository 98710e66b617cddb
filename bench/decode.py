"""Record batch decoding speed: metaq's decoder against kafka-python's MemoryRecords, on the same bytes.

    python -m bench.decode [--records 200000] [--sizes 100,1024]

The data is what a 1 MiB fetch looks like: uncompressed v2 batches of about 16 KiB (kafka-python's default
batch size) with null keys and values of the given size. Each decoder reads every record's offset, timestamp,
key, value and headers; the best of three runs is reported, in records per second.
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Callable

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metaq.protocol.records import decode_records

_BASE_OFFSET = struct.Struct(">q")
BATCH_BYTES = 16384
RUNS = 3


def make_batches(count: int, value_size: int, *, batch_bytes: int = BATCH_BYTES) -> bytes:
    """``count`` records in consecutive v2 batches, offsets from 0, as a broker would serve them."""
    out = bytearray()
    value = b"v" * value_size
    offset = 0
    timestamp = 1_700_000_000_000
    while offset < count:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=batch_bytes)
        first = offset
        while offset < count and builder.append(offset - first, timestamp + offset, None, value, []) is not None:
            offset += 1
        batch = builder.build()
        _BASE_OFFSET.pack_into(batch, 0, first)
        out += batch
    return bytes(out)


def metaq_decode(data: bytes) -> int:
    return len(decode_records(data).records)


def kafka_python_decode(data: bytes) -> int:
    n = 0
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        for record in batch:
            record.offset, record.timestamp, record.key, record.value, record.headers  # noqa: B018
            n += 1
    return n


def records_per_second(decode: Callable[[bytes], int], data: bytes, expected: int) -> float:
    best = float("inf")
    for _ in range(RUNS):
        t0 = time.perf_counter()
        got = decode(data)
        best = min(best, time.perf_counter() - t0)
        if got != expected:
            raise AssertionError(f"{decode.__name__} decoded {got} records, expected {expected}")
    return expected / best


def run(records: int = 200_000, sizes: tuple[int, ...] = (100, 1024)) -> list[tuple[str, float]]:
    """(label, records/s) rows: each decoder on each value size."""
    rows: list[tuple[str, float]] = []
    for size in sizes:
        count = records if size <= 100 else max(records // 4, 1000)
        data = make_batches(count, size)
        rows.append((f"metaq decode_records, {size} B values", records_per_second(metaq_decode, data, count)))
        rows.append((f"kafka-python MemoryRecords, {size} B values",
                     records_per_second(kafka_python_decode, data, count)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per 100-byte run (1 KiB: a quarter)")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma separated")
    args = parser.parse_args()
    rows = run(args.records, tuple(int(s) for s in args.sizes.split(",")))
    width = max(len(label) for label, _ in rows)
    for label, rate in rows:
        print(f"{label.ljust(width)}  {rate:>12,.0f} records/s")


if __name__ == "__main__":
    main()
