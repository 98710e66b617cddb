"""Batches with a valid CRC but invalid contents, sent by a raw client to a real broker process: each gets
Kafka's error code, nothing is appended, and kcat / confluent-kafka keep reading the partition. Internal
topics refuse client produces, and a coordinator partition holding an undecodable batch still loads."""

from __future__ import annotations

import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from integration_tests import peers
from metaq.broker.coordinator.offsets_schema import (
    OFFSETS_TOPIC,
    OffsetKey,
    OffsetValue,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.segment import LOG_SUFFIX
from metaq.errors import ErrorCode
from metaq.protocol.batches import read_header
from metaq.protocol.builder import BatchBuilder
from metaq.protocol.records import decode_records
from metaq.testing.batches import INVALID_BATCHES, good_batch, recrc
from metaq.testing.broker import SharedBroker, request, shared_broker, topic_leaders
from metaq.testing.group import log_end_offsets
from metaq.testing.wait import wait_until

TS = 1_700_000_000_000
ALLOWED_REFUSALS = {2, 10, 76, 87}  # CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD


Shared = SharedBroker


@pytest.fixture(scope="module")
def shared(zk_server, tmp_path_factory) -> Iterator[SharedBroker]:
    """One broker for the module (a topic per test), on a ZooKeeper chroot of its own."""
    with shared_broker(zk_server.connect_string, tmp_path_factory.mktemp("validation"), "metaq-validation") as s:
        yield s


def produce_raw(bootstrap: str, topic: str, records: bytes, partition: int = 0) -> tuple[int, int]:
    """(error code, base offset) of one Produce v7 carrying ``records`` as they are."""
    req = ProduceRequest[7](transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
    resp = request(bootstrap, req, ProduceResponse, 7)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def fetch_batches(bootstrap: str, topic: str, offset: int) -> bytes:
    req = FetchRequest[4](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                          topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                              FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=offset,
                                                                     partition_max_bytes=1 << 20)])])
    part = request(bootstrap, req, FetchResponse, 4).responses[0].partitions[0]
    assert part.error_code == 0, part.error_code
    return part.records or b""


def _items(start: int, n: int) -> list[tuple[bytes, bytes, int]]:
    return [(b"k%d" % i, b"good-%d" % i, TS + i) for i in range(start, start + n)]


def _as_kcat(items: list[tuple[bytes, bytes, int]]) -> list[tuple[int, bytes, bytes]]:
    return [(offset, key, value) for offset, (key, value, _) in enumerate(items)]


@pytest.mark.parametrize("kind", sorted(INVALID_BATCHES))
def test_invalid_batch_is_refused_and_consumers_keep_reading(shared: Shared, kind: str) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic(f"bad-{kind}")
    before = peers.confluent_produce(bootstrap, topic, 0, _items(0, 5))
    assert [m.offset for m in before] == [0, 1, 2, 3, 4]

    batch, code = INVALID_BATCHES[kind]()
    assert produce_raw(bootstrap, topic, batch) == (code, -1)
    assert log_end_offsets(bootstrap, topic, 1) == {0: 5}  # nothing appended, the next offset did not jump

    after = peers.confluent_produce(bootstrap, topic, 0, _items(5, 5))
    assert [m.offset for m in after] == [5, 6, 7, 8, 9]
    want = _as_kcat(_items(0, 10))
    got = peers.kcat_consume(bootstrap, topic, 0, "beginning")
    assert [(m.offset, m.key, m.value) for m in got] == want
    got = peers.confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, 10)
    assert [(m.offset, m.key, m.value) for m in got] == want


def test_internal_topic_refuses_client_produces(shared: Shared) -> None:
    bootstrap = shared.broker.bootstrap
    group = "victim"
    topic = shared.topic("data-for-victim")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 7)], asynchronous=False)
    finally:
        consumer.close()
    wait_until(lambda: bool(topic_leaders(bootstrap, OFFSETS_TOPIC)), 20, f"{OFFSETS_TOPIC} leaders")
    partition = partition_for(group, len(topic_leaders(bootstrap, OFFSETS_TOPIC)))
    end = log_end_offsets(bootstrap, OFFSETS_TOPIC, partition + 1)[partition]
    forged = BatchBuilder(1 << 20)
    forged.append(TS, encode_offset_key(OffsetKey(group, topic, 0)), encode_offset_value(OffsetValue(0, "", TS)))
    assert produce_raw(bootstrap, OFFSETS_TOPIC, forged.build(), partition) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
    assert produce_raw(bootstrap, "__transaction_state", good_batch()) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
    assert log_end_offsets(bootstrap, OFFSETS_TOPIC, partition + 1)[partition] == end


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        return consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        consumer.close()


def test_coordinator_skips_an_undecodable_batch_in_its_log(broker_cluster, make_topic) -> None:
    broker = broker_cluster.add(0, **{"offsets.topic.num.partitions": 1})
    topic = make_topic("data", partitions=1)
    peers.confluent_commit(broker.bootstrap, "g", topic, 7)
    peers.confluent_commit(broker.bootstrap, "h", topic, 3)
    broker.stop()

    # A batch with a valid CRC and garbage records at the log end, as a produce to the internal topic could
    # leave it before they were refused (or a broker bug could).
    log_dir = broker.data_dir / "logs-0" / f"{OFFSETS_TOPIC}-0"
    plog = PartitionLog.open(log_dir, OFFSETS_TOPIC, 0, LogConfig(), recover=False)
    end = plog.log_end_offset
    plog.close()
    garbage = bytearray(INVALID_BATCHES["garbage-records"]()[0])
    struct.pack_into(">q", garbage, 0, end)
    with open(sorted(log_dir.glob(f"*{LOG_SUFFIX}"))[-1], "ab") as segment:
        segment.write(garbage)

    broker.start()
    assert _committed(broker.bootstrap, "g", topic) == 7
    assert _committed(broker.bootstrap, "h", topic) == 3
    peers.confluent_commit(broker.bootstrap, "g", topic, 9)
    assert _committed(broker.bootstrap, "g", topic) == 9
    assert "skipping unreadable batch" in Path(broker.log_path).read_text()


# -- fuzz: random valid-CRC batches; nothing invalid is ever acknowledged -----------------------------------


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    """A valid batch (1-20 records, maybe gzip, maybe headers), then header fields or record bytes inside
    the CRC changed, maybe cut short; length and CRC fixed up."""
    count = draw(st.integers(1, 20))
    batch = bytearray(good_batch(count, value=draw(st.binary(max_size=40)),
                                 compression=draw(st.sampled_from(["none", "gzip"])),
                                 headers=draw(st.sampled_from([None, [("h", b"v")]]))))
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(21, len(batch) - 1))
        batch[pos] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, 6))
    if cut and len(batch) - cut > 61:
        del batch[-cut:]
    return recrc(batch)


# Hypothesis flags any change of the global `random` state during a draw as a strategy using `random`; such a
# change can come from other threads of this process (kazoo's and tenacity's jittered backoffs), not the strategy.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
def test_fuzz_nothing_invalid_is_acknowledged(shared: Shared) -> None:
    bootstrap = shared.broker.bootstrap
    topic = shared.topic("fuzz")
    acked: list[tuple[int, int]] = []  # (base offset, record count) of every acknowledged batch
    codes: set[int] = set()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mutated_batches())
    def fuzz(batch: bytes) -> None:
        code, base = produce_raw(bootstrap, topic, batch)
        codes.add(code)
        if code:
            assert code in ALLOWED_REFUSALS, code
            return
        header = read_header(batch)
        fetched = fetch_batches(bootstrap, topic, base)
        result = decode_records(fetched[:read_header(fetched).size], base)  # raises if it does not decode
        assert [r[0] for r in result.records] == list(range(base, base + header.record_count))
        acked.append((base, header.record_count))

    fuzz()
    assert codes - {0}, "the fuzz never produced an invalid batch"
    assert acked, "the fuzz never produced a valid batch"
    total = sum(n for _, n in acked)
    assert log_end_offsets(bootstrap, topic, 1) == {0: total}
    # healthy clients read every acknowledged record, and what was produced after the fuzz
    peers.confluent_produce(bootstrap, topic, 0, _items(0, 3))
    got = peers.confluent_consume(bootstrap, topic, 0, confluent_kafka.OFFSET_BEGINNING, total + 3)
    assert [m.offset for m in got] == list(range(total + 3))
    assert _kcat_offsets(bootstrap, topic) == list(range(total + 3))


def _kcat_offsets(bootstrap: str, topic: str) -> list[int]:
    """Offsets kcat reads from the beginning to the end (values may hold any byte, so only offsets)."""
    out = subprocess.run([peers.KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          "-q", "-f", "%o\\n"], capture_output=True, check=True, timeout=60).stdout
    return [int(line) for line in out.decode().split()]
