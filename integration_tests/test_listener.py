"""The MetaQ listener API end to end: a real ZooKeeper, a real broker process, a real producer.

A listener that fails on every 10th message: those land in the recover store (exactly those), the group's
committed offsets still reach the end of every partition, and the recover thread redelivers them once the
listener recovers. The store outlives the consumer.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import tenacity

from integration_tests import peers
from metaq.consumer.listener import MessageConsumer
from metaq.consumer.message import MessageAndMetadata
from metaq.consumer.recover import RecoverStore, recover_stores
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

PARTITIONS = 3
MESSAGES = 200
FAILING = {n for n in range(MESSAGES) if n % 10 == 0}
GROUP = "listeners"

pytestmark = pytest.mark.timeout(120)


def produce(bootstrap: str, topic: str) -> dict[int, int]:
    """Messages ``m000``..``m199``, round-robin over the partitions; returns partition -> end offset."""
    ends = {}
    for p in range(PARTITIONS):
        items = [(b"k%d" % n, b"m%03d" % n, 1_700_000_000_000 + n) for n in range(p, MESSAGES, PARTITIONS)]
        acked = peers.confluent_produce(bootstrap, topic, p, items)
        ends[p] = acked[-1].offset + 1
    return ends


def number(message: MessageAndMetadata) -> int:
    return int(message.value[1:])


class Flaky:
    """Fails on every 10th message until ``healthy`` is set. Thread-safe (dispatch and recover threads)."""

    executor = None

    def __init__(self) -> None:
        self.healthy = threading.Event()
        self.lock = threading.Lock()
        self.handled: Counter[int] = Counter()
        self.attempts: Counter[int] = Counter()
        self.batch_sizes: list[int] = []
        self.threads: set[str] = set()

    def receive_message(self, message: MessageAndMetadata) -> None:
        self._take([message])

    def _take(self, messages: list[MessageAndMetadata]) -> None:
        with self.lock:
            numbers = [number(m) for m in messages]
            self.attempts.update(numbers)
            self.batch_sizes.append(len(numbers))
            self.threads.add(threading.current_thread().name)
            if not self.healthy.is_set() and FAILING.intersection(numbers):
                raise ValueError(f"cannot handle {sorted(FAILING.intersection(numbers))}")
            self.handled.update(numbers)


class FlakyBatches(Flaky):
    def receive_messages(self, batch: list[MessageAndMetadata]) -> None:
        self._take(batch)


def properties(zk_connect: str, recover_dir: Path, **extra: Any) -> dict[str, Any]:
    return {"group.id": GROUP, "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": 3000,
            "auto.offset.reset": "smallest", "auto.commit.interval.ms": 200, "rebalance.backoff.ms": 200,
            "metaq.recover.interval.ms": 500, "metaq.recover.max.attempts": 1000,
            "metaq.recover.dir": str(recover_dir), **extra}


def stored_numbers(store: RecoverStore) -> list[int]:
    return sorted(number(e.to_message()) for e in store.list())


def committed(layout: ZkLayout, topic: str) -> dict[int, int | None]:
    return {p: layout.read_offset(GROUP, topic, p) for p in range(PARTITIONS)}


def check_set_aside_then_redelivered(consumer: MessageConsumer, listener: Flaky, layout: ZkLayout, topic: str,
                                     ends: dict[int, int]) -> None:
    store = consumer.recover_store(topic)
    everything_else = set(range(MESSAGES)) - FAILING
    wait_until(lambda: set(listener.handled) == everything_else and stored_numbers(store) == sorted(FAILING), 60,
               "every message handled or set aside")
    wait_until(lambda: committed(layout, topic) == ends, 20, "committed offsets at the end of every partition")
    assert not FAILING & set(listener.handled)
    assert all(listener.attempts[n] >= 6 for n in FAILING)  # 1 + metaq.max.fetch.retries, then set aside
    listener.healthy.set()
    wait_until(lambda: not store.list(), 20, "the recover thread to redeliver the stored messages")
    assert set(listener.handled) == set(range(MESSAGES))
    assert all(listener.handled[n] == 1 for n in FAILING)  # redelivered once, then removed


def test_failing_messages_are_set_aside_and_redelivered(broker, make_topic, zk_connect, zk_layout,
                                                        tmp_path: Path) -> None:
    topic = make_topic("listener-single", partitions=PARTITIONS)
    ends = produce(broker.bootstrap, topic)
    listener = Flaky()
    with MessageConsumer(properties(zk_connect, tmp_path), recover_initial_delay_s=0.2) as consumer:
        consumer.subscribe(topic, 1 << 20, listener).complete_subscribe()
        check_set_aside_then_redelivered(consumer, listener, zk_layout, topic, ends)
        assert consumer.state.state == "STABLE"
    assert max(listener.handled.values()) == 1  # one stable member: no duplicates either
    assert listener.threads == {f"metaq-dispatch-{topic}-0", f"metaq-recover-{topic}@{GROUP}"}
    assert recover_stores(tmp_path) == [(topic, GROUP)]


def test_batch_listener_on_an_executor(broker, make_topic, zk_connect, zk_layout, tmp_path: Path) -> None:
    topic = make_topic("listener-batch", partitions=PARTITIONS)
    ends = produce(broker.bootstrap, topic)
    listener = FlakyBatches()
    with ThreadPoolExecutor(2, thread_name_prefix="app") as pool:
        listener.executor = pool  # type: ignore[assignment]
        consumer = MessageConsumer(properties(zk_connect, tmp_path), streams_per_topic=2,
                                   retry_wait=tenacity.wait_fixed(0.005), recover_initial_delay_s=0.2)
        with consumer:
            consumer.subscribe(topic, 4096, listener).complete_subscribe()
            check_set_aside_then_redelivered(consumer, listener, zk_layout, topic, ends)
    assert max(listener.handled.values()) == 1
    assert max(listener.batch_sizes) > 1  # whole chunks arrived, and failing ones were split
    assert all(name.startswith("app") for name in listener.threads)  # dispatch and replay both on the executor


def test_the_store_survives_a_consumer_restart(broker, make_topic, zk_connect, zk_layout, tmp_path: Path) -> None:
    topic = make_topic("listener-restart", partitions=PARTITIONS)
    ends = produce(broker.bootstrap, topic)
    first = Flaky()
    with MessageConsumer(properties(zk_connect, tmp_path), retry_wait=tenacity.wait_fixed(0.005),
                         recover_initial_delay_s=3600) as consumer:
        consumer.subscribe(topic, 1 << 20, first).complete_subscribe()
        store = consumer.recover_store(topic)
        wait_until(lambda: stored_numbers(store) == sorted(FAILING), 60, "the failing messages set aside")
        wait_until(lambda: committed(zk_layout, topic) == ends, 20, "committed offsets at the end")
    with RecoverStore.open(tmp_path, topic, GROUP) as offline:  # what an operator would see meanwhile
        assert stored_numbers(offline) == sorted(FAILING)
        assert all(e.attempts == 0 and not e.dead for e in offline.list())

    second = Flaky()
    second.healthy.set()
    with MessageConsumer(properties(zk_connect, tmp_path), recover_initial_delay_s=0.2) as consumer:
        consumer.subscribe(topic, 1 << 20, second).complete_subscribe()
        wait_until(lambda: not consumer.recover_store(topic).list(), 20, "the stored messages redelivered")
        time.sleep(0.5)  # anything past the committed offsets would show up now
    assert second.handled == Counter(FAILING)  # only the stored ones: the offsets were committed at the end
