"""The delivery gate with a session lease and the batch in hand (the lease against a real ZooKeeper:
integration_tests/test_session_lease_zk.py)."""

from __future__ import annotations

import threading
import time

import pytest

from metaq.config import ConfigError
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.consumer.streams import BatchInHand, DeliveryGate, KafkaStream
from metaq.errors import ConsumerTimeoutError
from metaq.testing.wait import wait_until


def test_a_leased_gate_is_closed_until_a_proof_and_closes_when_it_runs_out() -> None:
    gate = DeliveryGate(leased=True)
    assert not gate.is_open and not gate.wait(0.01)
    gate.extend(time.monotonic() + 1.0)
    assert gate.is_open
    gate.extend(time.monotonic() - 10)  # an older proof never shortens the lease
    assert gate.is_open
    wait_until(lambda: not gate.is_open, 10, "the lease to run out")
    assert gate.connected  # connected, but the session is no longer proven alive
    gate.extend(time.monotonic() + 60)
    gate.close()  # SUSPENDED wins over the lease
    assert not gate.is_open and not gate.connected
    gate.open()
    assert gate.is_open
    gate.lapse()  # LOST: a new proof is needed
    assert not gate.is_open


def test_an_unleased_gate_follows_the_connection_only() -> None:
    gate = DeliveryGate()
    assert gate.is_open
    gate.lapse()
    assert gate.is_open
    gate.close()
    assert not gate.is_open
    gate.open()
    assert gate.is_open


def test_a_waiter_wakes_up_when_the_lease_is_renewed() -> None:
    gate = DeliveryGate(leased=True)
    threading.Timer(0.05, lambda: gate.extend(time.monotonic() + 60)).start()
    assert gate.wait(10)


def _chunk(info: PartitionTopicInfo, offsets: range) -> None:
    assert info.enqueue(offsets.start, [(o, 0, None, b"v%d" % o, ()) for o in offsets])


def test_the_iterator_stops_between_two_records_of_a_chunk_when_the_lease_runs_out() -> None:
    queue = ChunkQueue(2)
    info = PartitionTopicInfo("t", 0, queue, 0, 0, 1, "c-0")
    _chunk(info, range(5))
    gate = DeliveryGate(leased=True)
    stream = KafkaStream(queue, consumer_timeout_ms=50, gate=gate)
    gate.extend(time.monotonic() + 1.0)
    assert [next(stream).offset for _ in range(2)] == [0, 1]
    wait_until(lambda: not gate.is_open, 10, "the lease to run out")  # e.g. a process pause
    with pytest.raises(ConsumerTimeoutError, match="not proven alive"):
        next(stream)
    assert info.get_consumed_offset() == 2  # nothing more handed out
    gate.extend(time.monotonic() + 60)
    assert [next(stream).offset for _ in range(3)] == [2, 3, 4]


def test_the_batch_in_hand_waits_for_the_gate_and_stops_at_revocation() -> None:
    info = PartitionTopicInfo("t", 0, ChunkQueue(2), 0, 0, 1, "c-0")
    gate = DeliveryGate(leased=True)
    hand = BatchInHand(info, gate)
    threading.Timer(0.05, lambda: gate.extend(time.monotonic() + 60)).start()
    assert hand.may_go_on()  # waited for the proof
    hand.finished(3)
    assert info.get_consumed_offset() == 3  # a commit now covers the finished messages
    gate.close()
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    assert not hand.may_go_on(stop)  # gated until stopped
    gate.open()
    threading.Timer(0.05, info.revoke).start()
    gate.close()
    assert not hand.may_go_on()  # revoked while gated: the rest belongs to the next owner
    assert info.get_consumed_offset() == 3


def test_the_lease_fraction_is_checked() -> None:
    base = {"group.id": "g", "zookeeper.connect": "127.0.0.1:2181"}
    assert ConsumerConfig.from_properties(base).session_lease_fraction == pytest.approx(2 / 3)
    assert ConsumerConfig.from_properties({**base, "metaq.session.lease.fraction": "0"}).session_lease_fraction == 0
    for bad in ("1", "1.5", "-0.1"):
        with pytest.raises(ConfigError, match="metaq.session.lease.fraction"):
            ConsumerConfig.from_properties({**base, "metaq.session.lease.fraction": bad})
