"""The consumer's fast paths behave exactly like the straightforward code they replace."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from metaq.consumer.listener import _size, split_by_size
from metaq.consumer.message import MessageAndMetadata, MessageBatch, batch_from, make_message
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.consumer.streams import DeliveryGate, KafkaStream
from metaq.errors import ConsumerTimeoutError


def test_make_message_is_a_frozen_message_and_metadata() -> None:
    fields = ("t", 3, 42, b"k", b"v", 1700, (("h", b"x"),))
    fast, slow = make_message(*fields), MessageAndMetadata(*fields)
    assert type(fast) is MessageAndMetadata
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.value = b"other"  # type: ignore[misc]
    assert dataclasses.replace(fast, value=b"w").value == b"w"
    assert pickle.loads(pickle.dumps(fast)) == slow
    assert make_message("t", 0, 1, None, None, 2).headers == ()


def test_a_message_batch_builds_the_same_messages_as_make_message() -> None:
    records = [(5, 1700, b"k", b"v", ()), (6, 1701, None, None, (("h", None),)), (7, 1702, b"", b"x", ())]
    batch = batch_from("t", 2, records, 0, 6)
    expected = [MessageAndMetadata("t", 2, o, k, v, ts, h) for o, ts, k, v, h in records[1:]]
    assert list(batch) == expected and batch == expected and len(batch) == 2
    assert all(type(m) is MessageAndMetadata for m in batch)
    assert batch[0] == expected[0] and batch[-1] == expected[-1] and type(batch[-1]) is MessageAndMetadata
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch[0].offset = 0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(batch[1])) == batch[1] and hash(batch[1]) == hash(make_message("t", 2, 7, b"",
                                                                                                    b"x", 1702))
    tail = batch[1:]
    assert isinstance(tail, MessageBatch) and tail == expected[1:] and tail != expected
    assert batch.offsets() == [6, 7] and batch.keys() == [None, b""] and batch.values() == [None, b"x"]
    assert batch.next_offset == 8 and batch.size() == 1
    assert not batch_from("t", 2, records, 0, 8) and batch_from("t", 2, records, 0, 8) == []
    assert batch_from("t", 2, records, 2, 0) == expected[1:]  # from a position inside the chunk
    with pytest.raises(IndexError):
        batch[2]


def test_a_gate_timeout_keeps_the_record_for_the_next_call() -> None:
    queue = ChunkQueue(2)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1, "c-0")
    assert info.enqueue(0, [(0, 1, None, b"a", ()), (1, 2, None, b"b", ())])
    gate = DeliveryGate()
    stream = KafkaStream(queue, consumer_timeout_ms=50, gate=gate)
    assert next(stream).offset == 0
    gate.close()  # ZooKeeper SUSPENDED
    with pytest.raises(ConsumerTimeoutError):
        next(stream)
    assert info.get_consumed_offset() == 1  # nothing handed out while suspended
    gate.open()
    assert next(stream).offset == 1  # offset 1 was not skipped by the timeout
    assert info.get_consumed_offset() == 2


def _slow_split(batch: list[MessageAndMetadata], max_size: int) -> list[list[MessageAndMetadata]]:
    parts: list[list[MessageAndMetadata]] = []
    part: list[MessageAndMetadata] = []
    size = 0
    for message in batch:
        n = _size(message)
        if part and size + n > max_size:
            parts.append(part)
            part, size = [], 0
        part.append(message)
        size += n
    if part:
        parts.append(part)
    return parts


@pytest.mark.parametrize("max_size", [1, 5, 10, 30, 1000])
def test_split_by_size_matches_the_message_by_message_split(max_size: int) -> None:
    keys = [None, b"", b"kk", b"k"]
    values = [b"v" * n for n in (3, 0, 7, 1, 12)] + [None]
    batch = [make_message("t", 0, i, keys[i % len(keys)], values[i % len(values)], 0) for i in range(40)]
    assert list(split_by_size(batch, max_size)) == _slow_split(batch, max_size)
    assert list(split_by_size([], max_size)) == []
    lazy = MessageBatch("t", 0, [(m.offset, m.timestamp, m.key, m.value, m.headers) for m in batch])
    parts = list(split_by_size(lazy, max_size))
    assert all(isinstance(p, MessageBatch) for p in parts)  # slices: no message built to split
    assert parts == _slow_split(batch, max_size)
