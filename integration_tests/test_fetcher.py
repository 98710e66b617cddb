"""FetcherManager against real broker processes: delivery, offset resets, oversized batches, shutdown,
two leaders, and a broker crash."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest

from metaq.consumer import fetcher as fetcher_module
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.fetcher_manager import FetcherManager
from metaq.consumer.partition_info import ChunkQueue, FetchedChunk, PartitionTopicInfo
from metaq.errors import MessageSizeTooLargeError
from metaq.testing.broker import BrokerCluster
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

CONSUMER_ID = "fetch-test_host-1-abcd"
FAST_ZK_SESSION = {"zookeeper.session.timeout.ms": 1000}  # a killed broker's registration goes away fast

Got = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


# -- helpers ---------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partition: int, items: list[tuple[bytes | None, bytes]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in items:
        producer.produce(topic, value=value, key=key, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


def items(partition: int, start: int, count: int) -> list[tuple[bytes | None, bytes]]:
    return [(None if i % 5 == 0 else b"k%d" % i, b"p%d-v%d" % (partition, i)) for i in range(start, start + count)]


def config(zk_connect: str, **overrides: Any) -> ConsumerConfig:
    props: dict[str, Any] = {"group.id": "g", "zookeeper.connect": zk_connect, "fetch.wait.max.ms": 50,
                             "refresh.leader.backoff.ms": 50, "socket.timeout.ms": 5000}
    props.update(overrides)
    return ConsumerConfig.from_properties(props)


def infos_for(topic: str, partitions: range, offset: int = 0, capacity: int = 4) -> list[PartitionTopicInfo]:
    return [PartitionTopicInfo(topic, p, ChunkQueue(capacity), offset, offset, 1, f"t-{p}") for p in partitions]


def drain(infos: list[PartitionTopicInfo], want: int, timeout: float = 20.0) -> tuple[list[Got], list[FetchedChunk]]:
    """Take chunks (as a stream would) until ``want`` records arrived; (records, error chunks)."""
    got: list[Got] = []
    errors: list[FetchedChunk] = []
    queues = {id(info.chunks): info.chunks for info in infos}
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for q in queues.values():
            try:
                chunk = q.get(timeout=0.02)
            except queue.Empty:
                continue
            assert chunk is not None
            if chunk.error is not None:
                errors.append(chunk)
            chunk.info.mark_consumed(chunk.records[-1][0] + 1 if chunk.records else chunk.fetch_offset)
            got.extend((chunk.info.partition, o, k, v) for o, _ts, k, v, _h in chunk.records)
        if errors:
            break
    return got, errors


def check_exactly(got: list[Got], partition: int, offsets: range) -> None:
    mine = [g for g in got if g[0] == partition]
    assert [g[1] for g in mine] == list(offsets), f"partition {partition}"
    expected = dict(((o, (k, v)) for o, (k, v) in zip(offsets, items(partition, offsets.start, len(offsets)),
                                                     strict=True)))
    assert all((k, v) == expected[o] for _p, o, k, v in mine)


def fetcher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(CONSUMER_ID) and t.is_alive()]


@pytest.fixture
def manager_factory(zk_connect: str, zk_layout: ZkLayout) -> Iterator[Callable[..., FetcherManager]]:
    made: list[FetcherManager] = []

    def make(**overrides: Any) -> FetcherManager:
        manager = FetcherManager(config(zk_connect, **overrides), zk_layout, consumer_id=CONSUMER_ID)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.close()
    assert not fetcher_threads()


# -- against a broker ------------------------------------------------------------------------------


def test_every_record_arrives_once_in_order(broker, make_topic, manager_factory) -> None:
    topic = make_topic("fetch-all", partitions=3)
    for p in range(3):
        for start in range(0, 300, 100):  # several batches, so several chunks
            produce(broker.bootstrap, topic, p, items(p, start, 100))
    manager = manager_factory(**{"fetch.message.max.bytes": 4096})
    infos = infos_for(topic, range(3))
    manager.start_connections(infos)
    assert [t.name for t in fetcher_threads()] == [f"{CONSUMER_ID}-fetcher-0-broker-0"]
    got, errors = drain(infos, 900)
    assert not errors
    for p in range(3):
        check_exactly(got, p, range(300))
        assert infos[p].get_fetch_offset() == 300
    produce(broker.bootstrap, topic, 1, items(1, 300, 10))  # long polling picks up new records
    more, _ = drain(infos, 10)
    check_exactly(more, 1, range(300, 310))
    manager.stop_connections()
    assert not fetcher_threads()


@pytest.mark.parametrize(("reset", "first"), [("smallest", 0), ("largest", 5)])
def test_no_committed_offset_follows_auto_offset_reset(broker, make_topic, manager_factory, reset, first) -> None:
    topic = make_topic(f"fetch-reset-{reset}", partitions=1)
    produce(broker.bootstrap, topic, 0, items(0, 0, 5))
    manager = manager_factory(**{"auto.offset.reset": reset})
    infos = infos_for(topic, range(1), offset=-1)
    manager.start_connections(infos)
    wait_until(lambda: infos[0].get_fetch_offset() >= 0, 10, "the offset resolved")
    assert infos[0].get_consumed_offset() == first
    produce(broker.bootstrap, topic, 0, items(0, 5, 3))
    got, _ = drain(infos, 8 - first)
    check_exactly(got, 0, range(first, 8))


@pytest.mark.parametrize(("reset", "first"), [("smallest", 0), ("largest", 4)])
def test_offset_out_of_range_resets(broker, make_topic, manager_factory, reset, first) -> None:
    topic = make_topic(f"fetch-oor-{reset}", partitions=1)
    produce(broker.bootstrap, topic, 0, items(0, 0, 4))
    manager = manager_factory(**{"auto.offset.reset": reset})
    infos = infos_for(topic, range(1), offset=10**9)
    manager.start_connections(infos)
    wait_until(lambda: infos[0].get_fetch_offset() < 10**9, 10, "the offset reset")
    produce(broker.bootstrap, topic, 0, items(0, 4, 2))
    got, _ = drain(infos, 6 - first)
    check_exactly(got, 0, range(first, 6))


def test_message_larger_than_fetch_size_yields_an_error_chunk(broker, make_topic, manager_factory) -> None:
    topic = make_topic("fetch-big", partitions=2)
    produce(broker.bootstrap, topic, 0, items(0, 0, 3))
    produce(broker.bootstrap, topic, 0, [(b"big", b"x" * 5000)])
    produce(broker.bootstrap, topic, 1, items(1, 0, 3))
    manager = manager_factory(**{"fetch.message.max.bytes": 1024})
    infos = infos_for(topic, range(2))
    manager.start_connections(infos)
    got, errors = drain(infos, 10**6, timeout=10)
    assert len(errors) == 1
    error = errors[0].error
    assert isinstance(error, MessageSizeTooLargeError)
    assert errors[0].info is infos[0] and errors[0].fetch_offset == 3
    assert "fetch.message.max.bytes" in str(error) and f"{topic}-0" in str(error) and "offset 3" in str(error)
    check_exactly(got, 0, range(3))
    assert manager.partition_errors()[(topic, 0)].startswith("MessageSizeTooLargeError")
    assert (topic, 0) not in [tp for tps in manager.assignment().values() for tp in tps]  # not fetched any more
    more, _ = drain(infos, 3 - len([g for g in got if g[0] == 1]))
    check_exactly(got + more, 1, range(3))


def test_stop_connections_is_bounded_with_full_queues(broker, make_topic, manager_factory) -> None:
    topic = make_topic("fetch-stop", partitions=3)
    for p in range(3):
        produce(broker.bootstrap, topic, p, items(p, 0, 200))
    manager = manager_factory(**{"fetch.message.max.bytes": 512, "num.consumer.fetchers": 2})
    shared = ChunkQueue(1)  # three partitions, one stream: every runner blocks on it
    infos = [PartitionTopicInfo(topic, p, shared, 0, 0, 1, "t-0") for p in range(3)]
    manager.start_connections(infos)
    wait_until(shared.full, 10, "the stream queue to fill up")
    # both runners have data for the full queue, so they are (or soon will be) blocked handing it over
    wait_until(lambda: len(fetcher_threads()) == 2, 10, "both fetcher runners")
    started = time.monotonic()
    manager.stop_connections(timeout=5)
    assert time.monotonic() - started < 4  # the runners did not need the 5 s timeout
    assert not fetcher_threads()
    fetched = [info.get_fetch_offset() for info in infos]
    shared.get_nowait()
    # no runner thread is left (asserted above) to fill the freed slot or move an offset: no wait can change this
    assert shared.empty() and [info.get_fetch_offset() for info in infos] == fetched


def test_runner_survives_an_unexpected_exception(broker, make_topic, manager_factory, monkeypatch) -> None:
    topic = make_topic("fetch-survive", partitions=1)
    produce(broker.bootstrap, topic, 0, items(0, 0, 5))
    real = fetcher_module.decode_records
    calls = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(fetcher_module, "decode_records", flaky)
    manager = manager_factory()
    infos = infos_for(topic, range(1))
    manager.start_connections(infos)
    got, _ = drain(infos, 5)
    check_exactly(got, 0, range(5))
    assert manager.last_error == "RuntimeError: boom"
    assert len(fetcher_threads()) == 1


def test_partition_without_leader_waits_in_the_leader_finder(broker, make_topic, manager_factory) -> None:
    manager = manager_factory()
    infos = infos_for("fetch-later", range(1))
    manager.start_connections(infos)  # the topic does not exist yet: no state node
    assert manager.assignment() == {f"{CONSUMER_ID}-leader-finder": [("fetch-later", 0)]}
    make_topic("fetch-later", partitions=1)
    produce(broker.bootstrap, "fetch-later", 0, items(0, 0, 5))
    got, _ = drain(infos, 5)
    check_exactly(got, 0, range(5))
    assert manager.assignment()[f"{CONSUMER_ID}-fetcher-0-broker-0"] == [("fetch-later", 0)]


def test_partitions_are_fetched_from_their_own_leaders(broker_cluster: BrokerCluster, make_topic, zk_layout,
                                                       manager_factory) -> None:
    brokers = [broker_cluster.add(0), broker_cluster.add(1)]
    topic = make_topic("fetch-two", partitions=4)
    leaders = {p: zk_layout.partition_state(topic, p).leader for p in range(4)}
    assert set(leaders.values()) == {0, 1}
    for p in range(4):
        produce(brokers[leaders[p]].bootstrap, topic, p, items(p, 0, 50))
    manager = manager_factory()
    infos = infos_for(topic, range(4))
    manager.start_connections(infos)
    got, _ = drain(infos, 200)
    for p in range(4):
        check_exactly(got, p, range(50))
    plan = manager.assignment()
    for b in (0, 1):
        assert plan[f"{CONSUMER_ID}-fetcher-0-broker-{b}"] == [(topic, p) for p in range(4) if leaders[p] == b]


def test_fetching_resumes_without_gaps_after_broker_sigkill(broker_cluster: BrokerCluster, make_topic,
                                                            manager_factory) -> None:
    broker = broker_cluster.add(0, **FAST_ZK_SESSION)
    topic = make_topic("fetch-crash", partitions=3)
    for p in range(3):
        produce(broker.bootstrap, topic, p, items(p, 0, 100))
    manager = manager_factory()
    infos = infos_for(topic, range(3))
    manager.start_connections(infos)
    got, _ = drain(infos, 300)
    broker.kill()
    # the runner notices: connection refused, backoff, hand-off to the leader finder
    wait_until(lambda: manager.last_error is not None, 20, "the fetcher to report the lost broker")
    broker.start()
    for p in range(3):
        produce(broker.bootstrap, topic, p, items(p, 100, 100))
    more, errors = drain(infos, 300, timeout=30)
    assert not errors
    for p in range(3):
        check_exactly(got + more, p, range(200))
