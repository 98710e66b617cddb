"""The high-level consumer in-process against a real broker: delivery, offsets, resets, wildcards."""

from __future__ import annotations

import time

from metaq.consumer import Consumer, ConsumerTimeoutError, Whitelist
from metaq.producer import Producer
from metaq.testing.group import drain_values
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout


def _produce(zk_connect: str, topic: str, n: int, partitions: int) -> dict[tuple[int, int], bytes]:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, b"m%d" % i, partition=i % partitions) for i in range(n)]
        producer.flush()
        return {(f.result().partition, f.result().offset): b"m%d" % i for i, f in enumerate(futures)}


def _consumer(zk_connect: str, group: str, **props: object) -> Consumer:
    return Consumer({"group.id": group, "zookeeper.connect": zk_connect, "consumer.timeout.ms": 2000,
                     "auto.offset.reset": "smallest", "auto.commit.interval.ms": 200,
                     "zookeeper.session.timeout.ms": 3000, **props})


def test_consumes_everything_and_commits(broker, make_topic, zk_connect, zk_layout: ZkLayout) -> None:
    make_topic("basic", partitions=4)
    sent = _produce(zk_connect, "basic", 400, 4)
    with _consumer(zk_connect, "g1") as consumer:
        streams = consumer.create_message_streams({"basic": 2})["basic"]
        assert consumer.state.state == "STABLE"
        assert sorted(p for _, p in consumer.state.owned) == [0, 1, 2, 3]
        got: dict[tuple[int, int], bytes] = {}
        for stream in streams:
            got.update(drain_values(stream, 400, timeout=0))
        assert got == sent
        consumer.commit_offsets()
        assert zk_layout.offsets("g1") == {("basic", p): 100 for p in range(4)}
        owners = zk_layout.owners("g1")
        assert sorted(owners) == [("basic", p) for p in range(4)]
        assert {o.rsplit("-", 1)[0] for o in owners.values()} == {consumer.consumer_id}
    # shutdown released everything and left the group
    assert zk_layout.owners("g1") == {} and zk_layout.consumer_ids("g1") == []


def test_offsets_survive_restart_and_reset_policies(broker, make_topic, zk_connect, zk_layout: ZkLayout) -> None:
    make_topic("resume", partitions=2)
    _produce(zk_connect, "resume", 100, 2)
    with _consumer(zk_connect, "g2") as c:
        [stream] = c.create_message_streams({"resume": 1})["resume"]
        first = drain_values(stream, 60, timeout=0)
        assert len(first) == 60
    more = _produce(zk_connect, "resume", 20, 2)
    with _consumer(zk_connect, "g2") as c:
        [stream] = c.create_message_streams({"resume": 1})["resume"]
        rest = drain_values(stream, 1000, timeout=0)
    assert set(first).isdisjoint(rest)  # clean shutdown committed exactly what was handed out
    assert len(first) + len(rest) == 120 and set(more) <= set(rest)
    # a new group with largest starts at the end; with smallest from the beginning
    with _consumer(zk_connect, "g3", **{"auto.offset.reset": "largest"}) as c:
        [stream] = c.create_message_streams({"resume": 1})["resume"]
        # positioned at the end once the auto-committer writes the reset offsets (every 200 ms)
        wait_until(lambda: [o is not None and o >= 0 for o in zk_layout.offsets("g3").values()] == [True, True], 30,
                   "g3 to start at the end of both partitions")
        late = _produce(zk_connect, "resume", 4, 2)
        assert drain_values(stream, 4, timeout=0) == late
    with _consumer(zk_connect, "g4") as c:
        [stream] = c.create_message_streams({"resume": 1})["resume"]
        assert len(drain_values(stream, 1000, timeout=0)) == 124


def test_whitelist_picks_up_a_topic_created_later(broker, make_topic, zk_connect) -> None:
    make_topic("logs.a", partitions=1)
    _produce(zk_connect, "logs.a", 5, 1)
    with _consumer(zk_connect, "g5") as c:
        [stream] = c.create_message_streams_by_filter(Whitelist("logs\\..*"), 1)
        assert len(drain_values(stream, 5, timeout=0)) == 5
        make_topic("logs.b", partitions=2)
        make_topic("other", partitions=1)
        _produce(zk_connect, "other", 3, 1)
        sent = _produce(zk_connect, "logs.b", 6, 2)
        got = {}
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            try:
                m = next(stream)
            except ConsumerTimeoutError:
                continue
            assert m.topic == "logs.b"
            got[(m.partition, m.offset)] = m.value
        assert got == sent
