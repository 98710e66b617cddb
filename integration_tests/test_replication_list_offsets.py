"""ListOffsets after a failover never goes backwards: a new leader whose high watermark is below the
start offset of its leader epoch answers OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5) until its HW
has caught up, as Kafka does; real clients retry it. Three real brokers and a real ZooKeeper."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kafka
import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from integration_tests.test_replication import FAST, _metadata, _produce_all, _raw_produce, _state
from metaq.admin.log_offsets import BrokerLogOffsets
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.errors import ErrorCode
from metaq.testing.broker import BrokerCluster, request
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import embedded_server
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout

pytestmark = pytest.mark.timeout(240)

TOPIC = "epochstart"
FIRST_TS = 1_700_000_000_000  # offsets 0..9 (_produce_all); 10..15 are stamped with the current time
FUTURE_TS = 4_000_000_000_000


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """This module's own ZooKeeper with a tickTime of 2 s (the shared one's 200 ms caps sessions at 4 s): a
    paused broker with a 20 s session stays registered, and so in the ISR, while the test looks."""
    with embedded_server(tmp_path_factory, tick_time_ms=2000) as server:
        yield server


def _list_offsets(bootstrap: str, timestamp: int, version: int = 5) -> tuple[int, int]:
    """(error, offset) of a consumer's ListOffsets for ``TOPIC``-0 at ``version``."""
    partition: dict[str, Any] = {"partition_index": 0, "timestamp": timestamp}
    if version == 0:
        partition["max_num_offsets"] = 1
    if version >= 4:
        partition["current_leader_epoch"] = -1
    topic = ListOffsetsRequest.ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(**partition)])
    fields: dict[str, Any] = {"replica_id": -1, "topics": [topic]}
    if version >= 2:
        fields["isolation_level"] = 0
    req = ListOffsetsRequest[version](**fields)
    part = request(bootstrap, req, ListOffsetsResponse, version).topics[0].partitions[0]
    if version == 0:
        return part.error_code, (part.old_style_offsets or [-1])[0]
    return part.error_code, int(part.offset)


def _log_size(broker: BrokerProcess) -> int:
    return sum(f.stat().st_size for f in _partition_dir(broker).glob("*.log"))


def _partition_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir / f"logs-{broker.broker_id}" / f"{TOPIC}-0"


def test_a_new_leader_answers_offset_not_available_until_its_hw_reaches_its_epoch_start(
        broker_cluster: BrokerCluster, zk_layout: ZkLayout) -> None:
    """Broker 1 copies offsets 10..15 from leader 0 while broker 2 (in the ISR, paused) holds the HW at 10.
    Broker 0 dies; broker 1 leads from offset 16 with a HW of 10: a latest offset of 10 could be below one
    broker 0 answered, so it answers OFFSET_NOT_AVAILABLE until broker 2 is back and the HW reaches 16."""
    long_lived = {**FAST, "zookeeper.session.timeout.ms": 20000, "replica.lag.time.max.ms": 30000}
    brokers = [broker_cluster.add(0, **{**long_lived, "zookeeper.session.timeout.ms": 4000}),
               broker_cluster.add(1, **long_lived), broker_cluster.add(2, **long_lived)]
    create_topic(zk_layout, TOPIC, 1, assignment={0: [0, 1, 2]})
    for b in brokers:
        wait_until(lambda b=b: _metadata(b.bootstrap, TOPIC) is not None, 20, f"visible on {b.broker_id}")
    first = _produce_all(brokers[0].bootstrap, TOPIC, [b"a%d" % i for i in range(10)])
    assert [m.offset for m in first] == list(range(10))
    brokers[2].pause()
    try:
        new = _fail_over_to_broker_1(zk_layout, brokers)
        _check_unconfirmed(zk_layout, new)
        end = _kafka_python_end_offset_when(new, brokers[2].resume)
    finally:
        if brokers[2].proc is not None and brokers[2].proc.poll() is None:
            brokers[2].resume()
    assert end == 16  # kafka-python retried OffsetNotAvailableError (a RetriableError) until the HW caught up
    wait_until(lambda: _list_offsets(new, -1) == (0, 16), 30, "the latest offset is 16")
    assert _list_offsets(new, -1, version=0) == (0, 16)
    assert _list_offsets(new, FIRST_TS + 10_000) == (0, 10)
    assert _list_offsets(new, FUTURE_TS) == (0, -1)


def _fail_over_to_broker_1(zk_layout: ZkLayout, brokers: list[BrokerProcess]) -> str:
    """Offsets 10..15 on brokers 0 and 1 only, then broker 0 killed; broker 1's address once it leads."""
    for _ in range(2):  # offsets 10..15: broker 1 copies them, broker 2 does not, the HW stays at 10
        assert _raw_produce(brokers[0].bootstrap, TOPIC, acks=1)[0] == 0
    wait_until(lambda: _log_size(brokers[1]) == _log_size(brokers[0]), 30, "broker 1 has offsets 10..15")
    assert _list_offsets(brokers[0].bootstrap, -1) == (0, 10)
    # a client is answered no offset it cannot fetch: the first record at or after the time is 10, at the HW
    assert _list_offsets(brokers[0].bootstrap, FIRST_TS + 10_000) == (0, -1)
    assert _list_offsets(brokers[0].bootstrap, FIRST_TS + 5) == (0, 5)
    epoch = _state(zk_layout, TOPIC).leader_epoch
    brokers[0].kill()
    wait_until(lambda: _state(zk_layout, TOPIC).leader == 1, 30, "broker 1 leads")
    assert _state(zk_layout, TOPIC).leader_epoch == epoch + 1
    new = brokers[1].bootstrap
    wait_until(lambda: _list_offsets(new, -1)[0] != ErrorCode.NOT_LEADER_OR_FOLLOWER, 20, "broker 1 serves it")
    assert sorted(_state(zk_layout, TOPIC).isr) == [1, 2]  # broker 2 is still registered, so in the ISR
    return new


def _check_unconfirmed(zk_layout: ZkLayout, new: str) -> None:
    """What the new leader answers while its HW (10) is below its epoch's start offset (16)."""
    assert _list_offsets(new, -1) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)  # latest: not 10
    assert _list_offsets(new, -1, version=1) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    assert _list_offsets(new, -1, version=0) == (0, 10)  # v0 has no such error (Kafka's legacy path)
    assert _list_offsets(new, -2) == (0, 0)  # earliest is answered
    assert _list_offsets(new, FIRST_TS + 5) == (0, 5)  # a record below the HW is answered ...
    assert _list_offsets(new, FIRST_TS + 10_000) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)  # ... not offset 10
    assert _list_offsets(new, FUTURE_TS) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)  # nor "none found"
    marks = BrokerLogOffsets(zk_layout)  # the ops tools retry for a few seconds, then say why; metaq's
    try:  # client speaks ListOffsets v1..2, so it gets LEADER_NOT_AVAILABLE, retriable too
        answer = marks.watermarks([(TOPIC, 0)])[(TOPIC, 0)]
        assert (answer.end, answer.error) == (None, "LEADER_NOT_AVAILABLE from broker 1")
    finally:
        marks.close()


def _kafka_python_end_offset_when(bootstrap: str, release: Callable[[], None]) -> int | str:
    """kafka-python's end offset of ``TOPIC``-0, asked before ``release()`` lets the HW catch up."""
    found: dict[str, Any] = {}
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                   request_timeout_ms=60000)
    tp = kafka.TopicPartition(TOPIC, 0)

    def ask() -> None:
        try:
            found["end"] = consumer.end_offsets([tp], timeout_ms=60000)[tp]
        except Exception as e:  # returned for the caller's assertion
            found["end"] = repr(e)

    asker = threading.Thread(target=ask, name="kafka-python-end-offsets")
    try:
        asker.start()
        asker.join(1.0)  # it is asking (and being told OFFSET_NOT_AVAILABLE) before the HW can move
        release()
        asker.join(90)
    finally:
        consumer.close()
    return found.get("end", "no answer")  # type: ignore[no-any-return]
