"""KafkaStream semantics with hand-made chunks (pure logic: no broker)."""

from __future__ import annotations

import pytest

from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.consumer.serde import get_deserializer
from metaq.consumer.streams import DeliveryGate, KafkaStream
from metaq.errors import ConsumerTimeoutError, DeserializationError


def _info(queue: ChunkQueue, offset: int = 0) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", 0, queue, offset, offset, 1, "c-0")


def _records(values: list[bytes], start: int = 0) -> list:
    return [(start + i, 1000 + i, None, v, ()) for i, v in enumerate(values)]


def test_iteration_skips_below_consumed_and_marks_each_message() -> None:
    queue = ChunkQueue(4)
    info = _info(queue, offset=2)
    assert info.enqueue(2, _records([b"a", b"b", b"c", b"d"]))  # the batch starts before the fetch offset
    stream = KafkaStream(queue, consumer_timeout_ms=100)
    first = next(stream)
    assert (first.offset, first.value) == (2, b"c")
    assert info.get_consumed_offset() == 3  # handed out: covered by the next commit
    assert next(stream).offset == 3
    with pytest.raises(ConsumerTimeoutError):
        next(stream)


def test_revoked_partition_delivers_nothing_more() -> None:
    queue = ChunkQueue(4)
    info = _info(queue)
    info.enqueue(0, _records([b"a", b"b", b"c"]))
    stream = KafkaStream(queue, consumer_timeout_ms=100)
    assert next(stream).offset == 0
    info.revoke()
    with pytest.raises(ConsumerTimeoutError):
        next(stream)
    assert info.get_consumed_offset() == 1


def test_batches_mark_after_processing_and_isolate_a_poison_record() -> None:
    queue = ChunkQueue(4)
    info = _info(queue)
    info.enqueue(0, _records([b'{"n": 0}', b'{"n": 1}', b"{bad", b'{"n": 3}']))
    stream = KafkaStream(queue, consumer_timeout_ms=100, value_deserializer=get_deserializer("json"))
    batches = stream.iter_batches()
    first = next(batches)
    assert [m.value for m in first] == [{"n": 0}, {"n": 1}]
    assert info.get_consumed_offset() == 0  # not yet processed
    with pytest.raises(DeserializationError, match="offset 2"):
        next(batches)
    assert info.get_consumed_offset() == 3  # the good ones processed, the poison one reported and passed
    batches = stream.iter_batches()
    assert [m.value for m in next(batches)] == [{"n": 3}]
    with pytest.raises(ConsumerTimeoutError):
        next(batches)
    assert info.get_consumed_offset() == 4


def test_end_stops_every_iterator() -> None:
    queue = ChunkQueue(2)
    stream = KafkaStream(queue)
    stream.end()
    assert list(stream) == []
    assert list(KafkaStream(queue)) == []


def test_for_loop_and_next_share_one_position() -> None:
    """``for m in stream`` (a generator over the chunk) and ``next(stream)`` hand out each record once, in order,
    however they are mixed; each message is counted consumed as it is handed out."""
    queue = ChunkQueue(4)
    info = _info(queue)
    info.enqueue(0, _records([b"%d" % i for i in range(6)]))
    info.enqueue(6, _records([b"6", b"7"], start=6))
    stream = KafkaStream(queue, consumer_timeout_ms=100)
    got = []
    for message in stream:
        got.append(message.offset)
        assert info.get_consumed_offset() == message.offset + 1
        if message.offset == 1:
            got.append(next(stream).offset)  # between two messages of the generator
        if message.offset == 3:
            break
    got.append(next(stream).offset)
    with pytest.raises(ConsumerTimeoutError):
        for message in stream:  # the rest of the chunk, then the next chunk, then a timeout
            got.append(message.offset)
    assert got == list(range(8))
    assert info.get_consumed_offset() == 8


def test_for_loop_stops_at_a_revocation_and_a_closed_gate() -> None:
    queue = ChunkQueue(4)
    info = _info(queue)
    info.enqueue(0, _records([b"a", b"b", b"c", b"d", b"e"]))
    gate = DeliveryGate()
    stream = KafkaStream(queue, consumer_timeout_ms=100, gate=gate)
    got = []
    with pytest.raises(ConsumerTimeoutError):
        for message in stream:
            got.append(message.offset)
            if message.offset == 1:
                gate.close()  # ZooKeeper SUSPENDED: nothing more until it opens
    assert got == [0, 1] and info.get_consumed_offset() == 2
    gate.open()
    with pytest.raises(ConsumerTimeoutError):
        for message in stream:
            got.append(message.offset)
            if message.offset == 2:
                info.revoke()  # the rest of the chunk belongs to the next owner
    assert got == [0, 1, 2] and info.get_consumed_offset() == 3
