"""MessageConsumer's dispatch and retry-then-skip against in-memory fake streams (no ZooKeeper, no broker)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tenacity

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.listener import MessageConsumer, split_by_size
from metaq.consumer.membership import ConsumerState
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.consumer.streams import BatchInHand, DeliveryGate
from metaq.errors import ConfigError, ConsumerTimeoutError, MetaqError, StorageError
from metaq.testing.wait import wait_until

TOPIC = "clicks"
MAX_RETRIES = 3


def msg(offset: int, value: bytes | None = None, partition: int = 0) -> MessageAndMetadata:
    return MessageAndMetadata(TOPIC, partition, offset, None, value if value is not None else b"v%d" % offset, 0)


def make_chunks(n: int, size: int, partition: int = 0) -> list[list[MessageAndMetadata]]:
    return [[msg(o, partition=partition) for o in range(start, min(n, start + size))] for start in range(0, n, size)]


class ObservedGate(DeliveryGate):
    """A delivery gate that records when the dispatcher first waits on it (delivery is held)."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float) -> bool:
        self.waited.set()
        return super().wait(timeout)


class FakeStream:
    """Like KafkaStream.iter_batches: each message counts as consumed when the listener finished it (through
    ``in_hand``), and a chunk at the latest when the next one is asked for."""

    def __init__(self) -> None:
        self.chunks: queue.Queue[Any] = queue.Queue()
        self.infos: dict[int, PartitionTopicInfo] = {}
        self.gate = ObservedGate()
        self.taken = 0
        self._last: list[MessageAndMetadata] = []

    @property
    def consumed(self) -> dict[int, int]:
        return {p: info.get_consumed_offset() for p, info in self.infos.items() if info.get_consumed_offset() > 0}

    def info(self, partition: int) -> PartitionTopicInfo:
        if partition not in self.infos:
            self.infos[partition] = PartitionTopicInfo(TOPIC, partition, ChunkQueue(), 0, 0, 1)
        return self.infos[partition]

    def feed(self, *items: Any) -> None:
        for item in items:
            self.chunks.put(item)

    def iter_batches(self) -> Iterator[list[MessageAndMetadata]]:
        while True:
            item = self.chunks.get()
            if item is None:
                self.chunks.put(None)
                return
            if isinstance(item, BaseException):
                raise item
            self.taken += 1
            self._last = item
            yield item
            info = self.info(item[-1].partition)
            if not info.revoked:
                info.mark_consumed(item[-1].offset + 1)

    def in_hand(self) -> BatchInHand:
        return BatchInHand(self.info(self._last[-1].partition), self.gate)

    def end(self) -> None:
        self.chunks.put(None)


class FakeConnector:
    def __init__(self, streams: Mapping[str, list[FakeStream]]) -> None:
        self.streams = streams
        self.closed = False
        self.commits = 0

    def create_message_streams(self, topic_count: Mapping[str, int]) -> dict[str, list[FakeStream]]:
        return {topic: self.streams[topic][:n] for topic, n in topic_count.items()}

    def commit_offsets(self) -> None:
        self.commits += 1

    def shutdown(self) -> None:
        self.closed = True
        for streams in self.streams.values():
            for s in streams:
                s.end()

    @property
    def state(self) -> ConsumerState:
        return ConsumerState("STABLE", 1)


class Recorder:
    """A listener that fails (always, or a number of times) on chosen offsets."""

    executor = None

    def __init__(self, fail_on: set[int] = frozenset(), fail_times: int | None = None) -> None:  # type: ignore[assignment]
        self.fail_on = set(fail_on)
        self.fail_times = fail_times
        self.calls: dict[int, int] = {}
        self.delivered: list[MessageAndMetadata] = []
        self.threads: set[str] = set()
        self.healthy = threading.Event()
        self.lock = threading.Lock()

    def receive_message(self, message: MessageAndMetadata) -> None:
        with self.lock:
            self.threads.add(threading.current_thread().name)
            n = self.calls[message.offset] = self.calls.get(message.offset, 0) + 1
            failing = message.offset in self.fail_on and not self.healthy.is_set()
            if failing and (self.fail_times is None or n <= self.fail_times):
                raise ValueError(f"cannot handle {message.offset}")
            self.delivered.append(message)


def config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"group.id": "etl", "zookeeper.connect": "127.0.0.1:1", "metaq.max.fetch.retries": MAX_RETRIES,
            "metaq.recover.dir": str(tmp_path / "recover"), "metaq.recover.interval.ms": 100, **extra}


def make_consumer(tmp_path: Path, streams: Mapping[str, list[FakeStream]], **kwargs: Any) -> tuple[MessageConsumer,
                                                                                                     FakeConnector]:
    connector = FakeConnector(streams)
    extra = kwargs.pop("config", {})
    kwargs.setdefault("retry_wait", tenacity.wait_none())
    kwargs.setdefault("recover_initial_delay_s", 3600.0)
    consumer = MessageConsumer(config(tmp_path, **extra), connector_factory=lambda c, r: connector, **kwargs)
    return consumer, connector




def drained(stream: FakeStream, end: int, partition: int = 0) -> Callable[[], bool]:
    """The dispatcher processed everything below ``end`` (and asked for the chunk after it)."""
    return lambda: stream.consumed.get(partition, 0) >= end


# -- retry-then-skip ---------------------------------------------------------------------------------


def test_failing_messages_are_tried_n_plus_1_times_then_stored_and_skipped(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed(*make_chunks(50, 7))
    consumer, connector = make_consumer(tmp_path, {TOPIC: [stream]})
    listener = Recorder(fail_on={3, 17, 49})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(drained(stream, 50))
        stored = consumer.recover_store(TOPIC).list()
        assert [e.offset for e in stored] == [3, 17, 49]
        assert all(e.last_error == f"ValueError: cannot handle {e.offset}" for e in stored)
        assert all(e.value == b"v%d" % e.offset for e in stored)  # raw bytes, ready for replay
    assert {o: n for o, n in listener.calls.items() if n != 1} == {3: MAX_RETRIES + 1, 17: MAX_RETRIES + 1,
                                                                   49: MAX_RETRIES + 1}
    assert [m.offset for m in listener.delivered] == [o for o in range(50) if o not in (3, 17, 49)]
    assert listener.threads == {f"metaq-dispatch-{TOPIC}-0"}
    assert connector.closed


def test_a_transient_failure_is_retried_and_delivered_in_order(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed(*make_chunks(10, 4), [msg(10)])
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    listener = Recorder(fail_on={2, 5}, fail_times=MAX_RETRIES)  # succeeds on the last allowed attempt
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(drained(stream, 8))
        assert consumer.recover_store(TOPIC).list() == []
    assert [m.offset for m in listener.delivered][:8] == list(range(8))
    assert listener.calls[2] == listener.calls[5] == MAX_RETRIES + 1


def test_zero_retries_means_one_attempt(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0), msg(1)], [msg(2)])
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]}, config={"metaq.max.fetch.retries": 0})
    listener = Recorder(fail_on={1})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(drained(stream, 2))
        assert [e.offset for e in consumer.recover_store(TOPIC).list()] == [1]
    assert listener.calls[1] == 1


def test_the_backoff_policy_object_is_used_between_attempts(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0)], [msg(1)])
    waits: list[int] = []

    def wait(state: tenacity.RetryCallState) -> float:
        waits.append(state.attempt_number)
        return 0.0

    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]}, retry_wait=wait)
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, Recorder(fail_on={0})).complete_subscribe()
        wait_until(drained(stream, 1))
    assert waits[:MAX_RETRIES] == list(range(1, MAX_RETRIES + 1))  # (tenacity may also ask after the last)


def test_a_chunk_is_marked_consumed_only_after_processing(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0), msg(1)])
    gate = threading.Event()
    entered = threading.Event()

    class Slow:
        def receive_message(self, message: MessageAndMetadata) -> None:
            entered.set()
            gate.wait(10)

    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, Slow()).complete_subscribe()
        assert entered.wait(5)
        # marking happens on the dispatcher thread, so a mark before processing would be visible by now
        assert stream.consumed == {}  # in flight: a commit now would not cover it
        gate.set()
        wait_until(drained(stream, 2))


def test_bad_input_from_the_deserializer_goes_to_the_store_raw(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0, b'{"a": 1}'), msg(1, b"{not json"), msg(2, b'{"a": 3}')], [msg(3, b"{}")])
    listener = Recorder()
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]}, value_deserializer="json")
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(drained(stream, 3))
        [entry] = consumer.recover_store(TOPIC).list()
    assert (entry.offset, entry.value) == (1, b"{not json")
    assert entry.last_error.startswith("DeserializationError: cannot deserialize clicks-0 offset 1")
    assert [m.value for m in listener.delivered[:2]] == [{"a": 1}, {"a": 3}]


def test_the_partition_waits_while_the_store_cannot_be_written(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    stream = FakeStream()
    listener = Recorder(fail_on={0})
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        store = consumer.recover_store(TOPIC)
        real_append = store.append
        failures = [OSError("disk full")] * 3
        delivered_meanwhile: list[int] = []

        def flaky_append(message: MessageAndMetadata, error: BaseException) -> str:
            if failures:
                delivered_meanwhile.append(len(listener.delivered))
                raise failures.pop()
            return real_append(message, error)

        monkeypatch.setattr(store, "append", flaky_append)
        stream.feed([msg(0), msg(1)], [msg(2)])
        wait_until(drained(stream, 2))
        assert failures == [] and delivered_meanwhile == [0, 0, 0]  # offset 1 waited for the store
        assert [e.offset for e in store.list()] == [0]
        assert [m.offset for m in listener.delivered][:1] == [1]


# -- batch listeners ---------------------------------------------------------------------------------


class BatchRecorder:
    executor = None

    def __init__(self, poison: set[int]) -> None:
        self.poison = poison
        self.calls: list[list[int]] = []
        self.delivered: list[int] = []
        self.healthy = threading.Event()

    def receive_messages(self, batch: list[MessageAndMetadata]) -> None:
        offsets = [m.offset for m in batch]
        self.calls.append(offsets)
        if not self.healthy.is_set() and self.poison & set(offsets):
            raise ValueError(f"poison in {offsets}")
        self.delivered.extend(offsets)


def test_a_failing_batch_is_retried_then_split_into_single_messages(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed(list(map(msg, range(5))), list(map(msg, range(5, 8))), [msg(8)])
    listener = BatchRecorder(poison={2})
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(drained(stream, 8))
        assert [e.offset for e in consumer.recover_store(TOPIC).list()] == [2]
    whole = [0, 1, 2, 3, 4]
    assert listener.calls[:MAX_RETRIES + 1] == [whole] * (MAX_RETRIES + 1)
    assert listener.calls[MAX_RETRIES + 1:MAX_RETRIES + 3 + MAX_RETRIES + 1] == \
        [[0], [1]] + [[2]] * (MAX_RETRIES + 1)
    assert listener.delivered[:7] == [0, 1, 3, 4, 5, 6, 7]


def test_max_size_bounds_the_batches(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(i, b"x" * 100) for i in range(10)], [msg(10)])
    listener = BatchRecorder(poison=set())
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    with consumer:
        consumer.subscribe(TOPIC, 250, listener).complete_subscribe()
        wait_until(drained(stream, 10))
    assert listener.calls[:4] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_split_by_size_keeps_order_and_never_makes_empty_parts() -> None:
    batch = [msg(i, b"x" * n) for i, n in enumerate([10, 300, 5, 5, 1000, 1])]
    parts = list(split_by_size(batch, 100))
    assert [[m.offset for m in p] for p in parts] == [[0], [1], [2, 3], [4], [5]]


# -- executors, threads, replay ------------------------------------------------------------------------


def test_an_executor_runs_each_chunk_and_order_is_kept(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed(*make_chunks(40, 6), [msg(40)])
    with ThreadPoolExecutor(4, thread_name_prefix="app-pool") as pool:
        listener = Recorder(fail_on={11})
        listener.executor = pool  # type: ignore[assignment]
        consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
        with consumer:
            consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
            wait_until(drained(stream, 36))
    assert [m.offset for m in listener.delivered][:35] == [o for o in range(36) if o != 11]
    assert all(name.startswith("app-pool") for name in listener.threads)


def test_streams_per_topic_gives_named_dispatch_threads(tmp_path: Path) -> None:
    streams = [FakeStream(), FakeStream()]
    streams[0].feed([msg(0)], [msg(1)])
    streams[1].feed([msg(0, partition=1)], [msg(1, partition=1)])
    listener = Recorder()
    consumer, _ = make_consumer(tmp_path, {TOPIC: streams}, streams_per_topic=2)
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(lambda: drained(streams[0], 2, 0)() and drained(streams[1], 2, 1)())
        names = {t.name for t in threading.enumerate()}
        assert {"metaq-dispatch-clicks-0", "metaq-dispatch-clicks-1", "metaq-recover-clicks@etl"} <= names
    assert {"metaq-dispatch-clicks-0", "metaq-dispatch-clicks-1"} <= listener.threads


def test_the_recover_thread_redelivers_through_the_listener_once_it_recovers(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed(*make_chunks(20, 5), [msg(20)])
    with ThreadPoolExecutor(2, thread_name_prefix="app-pool") as pool:
        listener = Recorder(fail_on={4, 9})
        listener.executor = pool  # type: ignore[assignment]
        consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]}, recover_initial_delay_s=0.05)
        with consumer:
            consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
            wait_until(drained(stream, 20))
            store = consumer.recover_store(TOPIC)
            wait_until(lambda: all(e.attempts >= 1 for e in store.list()) and len(store.list()) == 2)
            listener.healthy.set()
            wait_until(lambda: not store.list())
    offsets = [m.offset for m in listener.delivered]
    assert sorted(offsets[-2:]) == [4, 9] and offsets.count(4) == 1 and offsets.count(9) == 1
    assert all(name.startswith("app-pool") for name in listener.threads)


def test_a_batch_listener_gets_replays_as_batches_of_one(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0), msg(1)], [msg(2)])
    listener = BatchRecorder(poison={1})
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]}, recover_initial_delay_s=0.05)
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(lambda: len(consumer.recover_store(TOPIC).list()) == 1)
        listener.healthy.set()
        wait_until(lambda: not consumer.recover_store(TOPIC).list())
    assert [1] in listener.calls and listener.delivered.count(1) == 1


# -- the stream misbehaving, shutdown -----------------------------------------------------------------


def test_stream_errors_and_timeouts_do_not_kill_the_dispatcher(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed(ConsumerTimeoutError("tick"), [msg(0)], MetaqError("rebalance failed"), [msg(1)],
                RuntimeError("bug"), [msg(2)], [msg(3)])
    listener = Recorder()
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
        wait_until(drained(stream, 3))
    assert [m.offset for m in listener.delivered][:3] == [0, 1, 2]


def test_shutdown_is_bounded_with_a_stuck_listener(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0), msg(1)])
    release = threading.Event()
    entered = threading.Event()

    dispatchers: list[threading.Thread] = []

    class Stuck:
        def receive_message(self, message: MessageAndMetadata) -> None:
            dispatchers.append(threading.current_thread())
            entered.set()
            release.wait(30)

    consumer, connector = make_consumer(tmp_path, {TOPIC: [stream]})
    consumer.subscribe(TOPIC, 1 << 20, Stuck()).complete_subscribe()
    assert entered.wait(5)
    started = time.monotonic()
    consumer.shutdown(timeout_s=0.5)
    assert time.monotonic() - started < 10  # not held by the handler stuck for 30 s
    assert connector.closed and consumer.state.state == "STABLE"
    release.set()
    wait_until(lambda: not dispatchers[0].is_alive(), what="the abandoned dispatcher to end")
    # the chunk in hand was abandoned: message 1 neither processed nor marked
    assert len(dispatchers) == 1 and stream.consumed.get(0, 0) <= 1


def test_shutdown_finishes_the_chunk_in_hand_and_takes_no_other(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(0), msg(1)], [msg(2)])
    entered = threading.Event()
    release = threading.Event()
    delivered: list[int] = []

    class Slow:
        def receive_message(self, message: MessageAndMetadata) -> None:
            entered.set()
            release.wait(10)
            delivered.append(message.offset)

    consumer, connector = make_consumer(tmp_path, {TOPIC: [stream]})
    consumer.subscribe(TOPIC, 1 << 20, Slow()).complete_subscribe()
    store = consumer.recover_store(TOPIC)
    assert entered.wait(5)
    threading.Timer(0.2, release.set).start()
    consumer.shutdown()
    assert delivered == [0, 1]
    assert stream.consumed == {0: 2}  # the finished chunk counts; [2] was taken but neither processed nor marked
    assert stream.taken == 2
    consumer.shutdown()  # idempotent
    assert connector.closed
    with pytest.raises(StorageError, match="closed"):
        store.list()


# -- API rules --------------------------------------------------------------------------------------------


def test_max_size_above_fetch_message_max_bytes_is_a_config_error(tmp_path: Path) -> None:
    consumer, _ = make_consumer(tmp_path, {}, config={"fetch.message.max.bytes": 1000})
    with pytest.raises(ConfigError, match="max_size=1001 exceeds fetch.message.max.bytes=1000"):
        consumer.subscribe(TOPIC, 1001, Recorder())
    with pytest.raises(ConfigError, match="max_size"):
        consumer.subscribe(TOPIC, 0, Recorder())
    consumer.subscribe(TOPIC, 1000, Recorder())


def test_subscribe_rules(tmp_path: Path) -> None:
    stream = FakeStream()
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream], "views": [FakeStream()]})
    with pytest.raises(ConfigError, match="receive_message"):
        consumer.subscribe(TOPIC, 100, object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="topic name"):
        consumer.subscribe("bad topic", 100, Recorder())
    with pytest.raises(MetaqError, match="subscribe"):
        consumer.complete_subscribe()
    assert consumer.subscribe(TOPIC, 100, Recorder()).subscribe("views", 100, Recorder()) is consumer
    with pytest.raises(ConfigError, match="already subscribed"):
        consumer.subscribe(TOPIC, 100, Recorder())
    with pytest.raises(MetaqError, match="no recover store"):
        consumer.recover_store(TOPIC)
    assert consumer.state.state == "STARTING"
    with consumer:
        consumer.complete_subscribe()
        with pytest.raises(MetaqError, match="before complete_subscribe"):
            consumer.subscribe("other", 100, Recorder())
        with pytest.raises(MetaqError, match="already called"):
            consumer.complete_subscribe()
        consumer.commit_offsets()
    assert consumer.state.state == "STABLE"


def test_a_failed_start_shuts_everything_down(tmp_path: Path) -> None:
    class Refusing(FakeConnector):
        def create_message_streams(self, topic_count: Mapping[str, int]) -> dict[str, list[FakeStream]]:
            raise MetaqError("rebalance failed")

    connector = Refusing({})
    consumer = MessageConsumer(config(tmp_path), connector_factory=lambda c, r: connector)
    consumer.subscribe(TOPIC, 100, Recorder())
    with pytest.raises(MetaqError, match="rebalance failed"):
        consumer.complete_subscribe()
    assert connector.closed
    with pytest.raises(MetaqError, match="already called"):
        consumer.complete_subscribe()


def test_a_shutdown_during_complete_subscribe_stops_what_it_built(tmp_path: Path) -> None:
    """A signal's shutdown that lands while complete_subscribe() is still joining the group waits for it, then
    stops the connector and the dispatch threads it started (they were left running before)."""
    joining, may_finish = threading.Event(), threading.Event()

    class SlowJoin(FakeConnector):
        def create_message_streams(self, topic_count: Mapping[str, int]) -> dict[str, list[FakeStream]]:
            joining.set()
            may_finish.wait(10)
            return super().create_message_streams(topic_count)

    connector = SlowJoin({TOPIC: [FakeStream()]})
    consumer = MessageConsumer(config(tmp_path), connector_factory=lambda c, r: connector)
    consumer.subscribe(TOPIC, 100, Recorder())
    starter = threading.Thread(target=consumer.complete_subscribe, name="test-complete-subscribe")
    starter.start()
    assert joining.wait(10)
    stopper = threading.Thread(target=consumer.shutdown, args=(10.0,), name="test-signal-shutdown")
    stopper.start()
    may_finish.set()
    starter.join(10)
    stopper.join(10)
    assert connector.closed
    assert consumer.wait(0)
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("metaq-dispatch-", "metaq-recover-"))]


def test_config_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="metaq.max.fetch.retries"):
        MessageConsumer(config(tmp_path, **{"metaq.max.fetch.retries": -1}))
    with pytest.raises(ConfigError, match="streams_per_topic"):
        MessageConsumer(ConsumerConfig.from_properties(config(tmp_path)), streams_per_topic=0)


# -- the delivery gate and revocation between messages ------------------------------------


class GateClosingListener:
    """Closes the stream's delivery gate (as SUSPENDED or a lapsed lease would) while handling offset 1."""

    executor = None

    def __init__(self, stream: FakeStream, batch: bool = False) -> None:
        self.stream = stream
        self.delivered: list[int] = []
        if batch:
            self.receive_messages = self._batch

    def receive_message(self, message: MessageAndMetadata) -> None:
        self.delivered.append(message.offset)
        if message.offset == 1:
            self.stream.gate.close()

    def _batch(self, batch: list[MessageAndMetadata]) -> None:
        for message in batch:
            self.receive_message(message)


@pytest.mark.parametrize("batch", [False, True], ids=["per-message", "batch"])
def test_nothing_more_of_a_chunk_is_delivered_while_the_gate_is_closed(tmp_path: Path, batch: bool) -> None:
    stream = FakeStream()
    stream.feed([msg(o) for o in range(6)])
    listener = GateClosingListener(stream, batch)
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    # batch listeners: parts of 2 messages (10 bytes each: "v0".."v5" are 2 bytes, so max_size 4)
    with consumer:
        consumer.subscribe(TOPIC, 4 if batch else 1 << 20, listener).complete_subscribe()
        wait_until(lambda: stream.gate.waited.is_set())  # the dispatcher is held at the closed gate
        assert listener.delivered == [0, 1]  # held between messages (parts), not at the next chunk
        assert stream.consumed == {0: 2}  # what was finished counts
        stream.gate.open()
        wait_until(drained(stream, 6))
    assert listener.delivered == list(range(6))


def test_the_rest_of_a_revoked_chunk_is_not_delivered(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(o) for o in range(6)], [msg(6)])
    delivered: list[int] = []

    class Revoking:
        executor = None

        def receive_message(self, message: MessageAndMetadata) -> None:
            delivered.append(message.offset)
            if message.offset == 2:
                info = stream.info(0)
                info.revoke()  # a rebalance while the listener works: it commits what was finished
                assert info.get_consumed_offset() == 2

    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    with consumer:
        consumer.subscribe(TOPIC, 1 << 20, Revoking()).complete_subscribe()
        wait_until(lambda: stream.taken == 2)  # the dispatcher moved on: the revoked chunk is behind it
    assert delivered[:3] == [0, 1, 2] and 3 not in delivered  # the in-flight one finished, then no more
    assert stream.info(0).get_consumed_offset() == 3


def test_shutdown_while_delivery_is_held_leaves_the_rest_unmarked(tmp_path: Path) -> None:
    stream = FakeStream()
    stream.feed([msg(o) for o in range(6)])
    listener = GateClosingListener(stream)
    consumer, _ = make_consumer(tmp_path, {TOPIC: [stream]})
    consumer.subscribe(TOPIC, 1 << 20, listener).complete_subscribe()
    wait_until(lambda: len(listener.delivered) >= 2)
    started = time.monotonic()
    consumer.shutdown(timeout_s=20)
    assert time.monotonic() - started < 10  # not held until the abandon deadline (half the timeout)
    assert listener.delivered == [0, 1]
    assert stream.consumed == {0: 2}  # offsets 2..5 neither delivered nor marked: redelivered later
