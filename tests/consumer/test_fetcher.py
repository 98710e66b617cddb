"""FetcherManager's pure parts: fetcher ids (Kafka's Java int arithmetic), the backoff, and how a large compressed
fetch is cut into chunks (against real broker processes: integration_tests/test_fetcher.py)."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from metaq.client.cluster import Leader
from metaq.consumer import fetcher as fetcher_module
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.fetch_chunks import _batch_groups
from metaq.consumer.fetcher import BACKOFF_MAX_S
from metaq.consumer.fetcher_manager import fetcher_id
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.hashing import java_string_hash
from metaq.protocol.builder import PyBatchBuilder
from metaq.protocol.records import decode_records
from metaq.retry import fetcher as fetcher_policy

CONSUMER_ID = "fetch-test_host-1-abcd"


def info_for(offset: int = 0, capacity: int = 10) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", 0, ChunkQueue(capacity), offset, offset, 1, "t-0")


# -- pure ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["t", "orders", "a-much-longer-topic-name-whose-hash-overflows", "ünïcode"])
@pytest.mark.parametrize("partition", [0, 1, 7, 2**31 - 1])
def test_fetcher_id_uses_java_int_arithmetic(topic: str, partition: int) -> None:
    java_int = ctypes.c_int32(31 * java_string_hash(topic) + partition).value
    for n in (1, 2, 3, 7):
        assert fetcher_id(topic, partition, n) == (0 if java_int == -(2**31) else abs(java_int)) % n


def test_java_string_hash_known_values() -> None:
    assert [java_string_hash(s) for s in ("", "abc", "hello", "\U0001f600")] == [0, 96354, 99162322, 1772899]
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert [fetcher_id("polygenelubricants", p, 7) for p in range(3)] == [0, 1, 0]  # Kafka's abs(MinValue) = 0


def test_backoff_grows_and_is_capped() -> None:
    backoff = fetcher_policy(refresh_leader_backoff_ms=50, max_s=BACKOFF_MAX_S, min_s=0.01)
    assert 0.05 <= backoff.delay(1) <= 0.1
    assert backoff.delay(3) >= 0.2
    assert all(backoff.delay(n) <= BACKOFF_MAX_S + 0.05 for n in range(1, 50))


def _lz4_batches(count: int, per_batch: int) -> bytes:
    """``count`` lz4-compressed batches of ``per_batch`` records each, offsets from 0, as a fetch returns them."""
    out = bytearray()
    for n in range(count):
        builder = PyBatchBuilder(1 << 20, "lz4")
        for i in range(per_batch):
            builder.append(1_700_000_000_000, None, b"v%d" % (n * per_batch + i))
        batch = bytearray(builder.build())
        batch[0:8] = (n * per_batch).to_bytes(8, "big")  # base offset (not covered by the CRC)
        out += batch
    return bytes(out)


class _Owner:
    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def leader_lost(self, infos: list[PartitionTopicInfo]) -> None:
        raise AssertionError("no leader change here")

    def record_error(self, key: Any, error: BaseException) -> None:
        self.errors.append(error)

    def clear_error(self, key: Any) -> None:
        pass


def test_batch_groups_cut_at_batch_boundaries_after_enough_records() -> None:
    data = _lz4_batches(10, 100)
    cut = data + data[:30]  # and a batch cut off by the fetch size
    groups = _batch_groups(cut, 250)
    assert [g[0] for g in groups[1:]] == [g[1] for g in groups[:-1]] and groups[0][0] == 0 and groups[-1][1] == len(cut)
    assert [len(decode_records(cut[a:b]).records) for a, b in groups] == [300, 300, 300, 100]
    assert _batch_groups(data, 1000) == [(0, len(data))]  # no more than the limit: one range
    assert _batch_groups(b"\0" * 100, 1) == [(0, 100)]  # not a batch: left to the decoder


def test_a_large_compressed_fetch_is_enqueued_in_chunks_of_about_chunk_records(monkeypatch) -> None:
    """fetch.message.max.bytes bounds compressed bytes: the 850 records from the fetch offset (150) on arrive
    as 4 chunks, in order, once."""
    monkeypatch.setattr(fetcher_module, "CHUNK_RECORDS", 250)
    data = _lz4_batches(10, 100)
    info = info_for(offset=150)
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "127.0.0.1:1",
                                             "fetch.wait.max.ms": 50, "socket.timeout.ms": 5000})
    runner = fetcher_module.FetchRequestRunner(_Owner(), config, Leader("127.0.0.1", 1, 0), 0, consumer_id=CONSUMER_ID)
    runner._deliver(info, 150, data)  # the first batch holds offsets below the fetch offset
    chunks = [info.chunks.get_nowait() for _ in range(info.chunks.qsize())]
    assert [len(c.records) for c in chunks] == [150, 300, 300, 100]
    assert [r[0] for c in chunks for r in c.records] == list(range(150, 1000))
    assert [c.fetch_offset for c in chunks] == [150, 300, 600, 900]
    assert info.get_fetch_offset() == 1000
    info.revoke()  # a revoked partition takes no more chunks: the rest of the fetch is dropped
    info2 = info_for()
    info2.revoke()
    runner._deliver(info2, 0, data)
    assert info2.chunks.empty() and info2.get_fetch_offset() == 0
