"""Delivering nothing a member may no longer own, with a real ZooKeeper and a real broker process.

- The listener API holds delivery between messages while ZooKeeper is down (SUSPENDED) and, once the session
  is no longer proven alive (the session lease), while ZooKeeper is silent: checked against the times of the
  session events and of every listener call.
- A rebalance that revokes a partition while a listener works through a chunk: the commit it makes covers
  every message finished until then, and the rest of the chunk is not delivered, so the next owner repeats at
  most the one message in flight.
- After a session loss the member says LOST (owning nothing), not STABLE, until the rebalance on its new
  session is done.

(The SIGSTOP-past-the-session zombie is in test_consumer_group.py.)
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.consumer.config import ConsumerConfig
from metaq.consumer.connector import ZookeeperConsumerConnector
from metaq.consumer.listener import MessageConsumer
from metaq.consumer.membership import RebalanceListener
from metaq.consumer.message import MessageAndMetadata
from metaq.testing.broker import topic_leaders
from metaq.testing.group import GatedProxy
from metaq.testing.wait import wait_until
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout, split_connect

SESSION_S = 3.0
LEASE_S = SESSION_S * 2 / 3  # metaq.session.lease.fraction's default
SLACK_S = 0.05  # between the lease check and the listener noting its start

pytestmark = pytest.mark.timeout(180)


@dataclass
class Call:
    partition: int
    offset: int
    started: float
    ended: float


class Recording:
    """A MessageListener that takes ``work_s`` per message and notes when each call started and ended."""

    executor = None

    def __init__(self, work_s: float) -> None:
        self.work_s = work_s
        self.lock = threading.Lock()
        self.calls: list[Call] = []

    def receive_message(self, message: MessageAndMetadata) -> None:
        started = time.monotonic()
        time.sleep(self.work_s)
        with self.lock:
            self.calls.append(Call(message.partition, message.offset, started, time.monotonic()))

    def started_between(self, after: float, before: float) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if after < c.started < before]

    def count(self) -> int:
        with self.lock:
            return len(self.calls)


class SessionEvents:
    """The consumer's ZooKeeper session events with their times (and the consumer's state at each)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float, str, int]] = []
        self.connector: ZookeeperConsumerConnector | None = None

    def factory(self, config: ConsumerConfig, listener: RebalanceListener | None) -> ZookeeperConsumerConnector:
        connector = ZookeeperConsumerConnector(config, rebalance_listener=listener)
        self.connector = connector
        connector.add_session_listener(self._on_state)
        return connector

    def _on_state(self, state: str) -> None:
        assert self.connector is not None
        snapshot = self.connector.state
        self.events.append((state, time.monotonic(), snapshot.state, len(snapshot.owned)))

    def first(self, state: str, after: float) -> float | None:
        return min((t for s, t, _, _ in self.events if s == state and t > after), default=None)


def properties(zk: str, recover_dir: Path, group: str, **extra: Any) -> dict[str, Any]:
    return {"group.id": group, "zookeeper.connect": zk, "zookeeper.session.timeout.ms": int(SESSION_S * 1000),
            "auto.offset.reset": "smallest", "auto.commit.interval.ms": 200, "rebalance.backoff.ms": 200,
            "rebalance.max.retries": 20, "metaq.recover.dir": str(recover_dir), **extra}


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        items = [(None, b"m%05d" % n, 1_700_000_000_000 + n) for n in range(per_partition)]
        peers.confluent_produce(bootstrap, topic, p, items)  # type: ignore[arg-type]


# -- ZooKeeper down, then silent, in the middle of a listener's chunk --------------------------------------------


@dataclass
class OwnCluster:
    server: ZooKeeperServer
    proxy: GatedProxy
    zk: str
    layout: ZkLayout
    broker: BrokerProcess


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[OwnCluster]:
    """A ZooKeeper of this test's own (to be stopped), behind a GatedProxy (see there why), and a broker on it."""
    server = ZooKeeperServer(data_dir=tmp_path / "zk-data", log_path=tmp_path / "zookeeper.log",
                             tick_time_ms=200, force_sync=False)
    server.start()
    proxy = GatedProxy(server.host, server.port)
    zk = f"127.0.0.1:{proxy.port}/metaq-lease"
    client = connect(zk, session_timeout_ms=4000, connection_retry=KazooRetry(max_tries=-1, max_delay=0.5))
    broker = BrokerProcess(zk, 0, tmp_path / "broker")
    try:
        broker.start()
        yield OwnCluster(server, proxy, zk, ZkLayout(client), broker)
    finally:
        broker.stop()
        client.stop()
        client.close()
        proxy.stop()
        server.stop()


def test_a_listener_delivers_nothing_while_zookeeper_is_down_or_silent(own_cluster: OwnCluster,
                                                                        tmp_path: Path) -> None:
    """One partition, one 1000-message chunk after another, a 20 ms listener. (1) ZooKeeper is killed after
    20 deliveries and restarted 1.5 s later: no call starts between SUSPENDED and CONNECTED. (2) ZooKeeper is
    paused (connections open, nothing answered) for 2.2 s: no call starts later than the lease allows, i.e.
    2/3 of the session timeout after the pause began, until it answers again. Both outages are shorter than
    the session timeout, so the session, the ownership and the delivery order survive: each message once."""
    c = own_cluster
    topic = "lease-listener"
    create_topic(c.layout, topic, 1)
    wait_until(lambda: len(topic_leaders(c.broker.bootstrap, topic)) == 1, 10, "the topic on the broker")
    total = 400
    produce(c.broker.bootstrap, topic, 1, total)
    listener = Recording(0.02)
    session = SessionEvents()
    consumer = MessageConsumer(properties(c.zk, tmp_path, "lease-listener"), connector_factory=session.factory)
    with consumer:
        consumer.subscribe(topic, 1 << 20, listener).complete_subscribe()
        wait_until(lambda: listener.count() >= 20, 30, "20 deliveries")

        down_at = time.monotonic()
        c.proxy.close()
        c.server.kill()
        time.sleep(1.5)  # the fault: ZooKeeper is down
        c.server.start()
        c.proxy.open()
        wait_until(lambda: session.first("CONNECTED", down_at) is not None, 30, "the session to reconnect")
        suspended_at = session.first("SUSPENDED", down_at)
        connected_at = session.first("CONNECTED", down_at)
        assert suspended_at is not None and connected_at is not None
        during_outage = listener.started_between(suspended_at, connected_at)
        before_outage = listener.started_between(0, suspended_at)

        wait_until(lambda: len(listener.started_between(connected_at, time.monotonic())) >= 20, 30,
                   "20 deliveries after reconnecting")
        paused_at = time.monotonic()
        c.server.pause()
        try:
            time.sleep(2.2)  # the fault: ZooKeeper answers nothing (below the session timeout)
        finally:
            c.server.resume()
        resumed_at = time.monotonic()
        beyond_lease = listener.started_between(paused_at + LEASE_S + SLACK_S, resumed_at)
        within_lease = listener.started_between(paused_at, paused_at + LEASE_S + SLACK_S)
        wait_until(lambda: listener.count() >= total, 60, "every message delivered")
        calls = list(listener.calls)

    assert not during_outage, (f"{len(during_outage)} listener calls started while ZooKeeper was SUSPENDED "
                               f"(offsets {[c.offset for c in during_outage][:10]}...)")
    assert not beyond_lease, (f"{len(beyond_lease)} listener calls started after the session lease ran out, "
                              f"while ZooKeeper was silent")
    assert [e[0] for e in session.events if e[0] == "LOST"] == [], "the outages were meant to keep the session"
    assert Counter(c.offset for c in calls) == Counter(range(total)), "each message exactly once, in one session"
    assert [c.offset for c in calls] == list(range(total))
    print(f"ZooKeeper down: SUSPENDED {suspended_at - down_at:.3f}s after the kill, {len(before_outage)} calls "
          f"before it, 0 in the {connected_at - suspended_at:.2f}s until CONNECTED; ZooKeeper silent for 2.2s: "
          f"{len(within_lease)} calls within the {LEASE_S:.1f}s lease, 0 after it")


# -- a rebalance racing listeners --------------------------------------------------------------------------------


class Revocations:
    """A rebalance listener that notes when its member released its partitions."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def before_release(self, partitions: Any) -> None:
        self.times.append(time.monotonic())

    def assigned(self, consumer_id: str, assignment: Any) -> None:
        pass

    def rebalance_failed(self, error: Any) -> None:
        pass


def test_a_rebalance_racing_a_listener_repeats_at_most_the_message_in_flight(
        broker: BrokerProcess, make_topic: Callable[..., str], zk_connect: str, tmp_path: Path) -> None:
    """A owns both partitions and works through chunks (10 ms per message) when B joins: A's rebalance revokes
    its partitions in the middle of a chunk. Its commit covers every message A finished, A delivers no more
    of the revoked chunk, and the next owner starts after what A finished: per partition and revocation, at
    most the one message in A's listener at that moment is delivered twice."""
    topic = make_topic("lease-race", partitions=2)
    per_partition = 300
    produce(broker.bootstrap, topic, 2, per_partition)
    a_listener, b_listener = Recording(0.01), Recording(0.01)
    a_revocations = Revocations()
    a = MessageConsumer(properties(zk_connect, tmp_path / "a", "race"), rebalance_listener=a_revocations)
    b = MessageConsumer(properties(zk_connect, tmp_path / "b", "race"))
    try:
        a.subscribe(topic, 1 << 20, a_listener).complete_subscribe()
        wait_until(lambda: a_listener.count() >= 60, 30, "A to be in the middle of its chunks")
        b.subscribe(topic, 1 << 20, b_listener).complete_subscribe()

        def delivered() -> set[tuple[int, int]]:
            return {(c.partition, c.offset) for lst in (a_listener, b_listener) for c in list(lst.calls)}

        wait_until(lambda: len(delivered()) == 2 * per_partition, 90, "every message delivered")
        assert b_listener.count() > 0, "B never got a partition"
    finally:
        a.shutdown()
        b.shutdown()
    calls = a_listener.calls + b_listener.calls
    twice = Counter((c.partition, c.offset) for c in calls)
    duplicates = sorted(key for key, n in twice.items() if n > 1)
    revocations = len(a_revocations.times)
    assert revocations >= 1
    for partition in (0, 1):
        repeated = [o for p, o in duplicates if p == partition]
        assert len(repeated) <= revocations, (
            f"partition {partition}: {len(repeated)} messages delivered twice ({repeated[:10]}...) over "
            f"{revocations} revocation(s) of A; at most the one in flight at each may be repeated")
    # and those repeated were in A's listener when it released its partitions
    in_flight = {(c.partition, c.offset) for c in a_listener.calls
                 if any(c.started <= t for t in a_revocations.times)}
    assert set(duplicates) <= in_flight
    print(f"rebalance race: A revoked {revocations} time(s), {len(duplicates)} messages delivered twice "
          f"({duplicates}); A delivered {a_listener.count()}, B {b_listener.count()}")


# -- the state after a session loss ------------------------------------------------------------------------------


def test_after_a_session_loss_the_state_is_lost_until_the_rebalance_is_done(
        broker: BrokerProcess, make_topic: Callable[..., str], zk_connect: str, tmp_path: Path) -> None:
    """The server expires the member's session (a twin client closes it): from LOST until the rebalance on
    the new session owns partitions again, the member never says STABLE while owning nothing, and that
    rebalance starts as soon as the new session is there (no executor tick)."""
    topic = make_topic("lease-state", partitions=4)
    produce(broker.bootstrap, topic, 4, 10)
    session = SessionEvents()
    config = ConsumerConfig.from_properties(properties(zk_connect, tmp_path, "state"))
    connector = session.factory(config, None)
    samples: list[tuple[float, str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            snapshot = connector.state
            samples.append((time.monotonic(), snapshot.state, len(snapshot.owned)))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, name="state-sampler", daemon=True)
    try:
        connector.create_message_streams({topic: 1})
        assert connector.state.state == "STABLE" and len(connector.state.owned) == 4
        sampler.start()
        hosts, _ = split_connect(zk_connect)
        session_id = connector.zookeeper_session
        assert session_id is not None
        twin = KazooClient(hosts=hosts, client_id=session_id)
        twin.start(timeout=10)
        twin.stop()  # closeSession: the server expires the member's session now
        twin.close()
        expired_at = time.monotonic()
        wait_until(lambda: session.first("LOST", expired_at) is not None, 20, "the member to see LOST")
        lost_at = session.first("LOST", expired_at)
        assert lost_at is not None
        wait_until(lambda: connector.state.state == "STABLE" and len(connector.state.owned) == 4, 30,
                   "the member to own its partitions again")
        stable_at = time.monotonic()
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join(5)
        connector.shutdown()
    at_events = [(s, state, owned) for s, t, state, owned in session.events if t >= lost_at]
    assert all(state != "STABLE" for _, state, _ in at_events), f"state at the session events: {at_events}"
    assert at_events[0] == ("LOST", "LOST", 0), at_events  # revoked at once: owns nothing
    assert ("CONNECTED", "LOST", 0) in at_events, at_events
    lies = [(round(t - lost_at, 3), state) for t, state, owned in samples if t >= lost_at and state == "STABLE"
            and owned == 0]
    assert not lies, f"STABLE while owning nothing after the session loss: {lies[:5]}"
    rebalancing = [t - lost_at for t, state, _ in samples if t >= lost_at and state == "REBALANCING"][:1]
    print(f"session loss: LOST {lost_at - expired_at:.3f}s after the expiry, REBALANCING sampled "
          f"{', '.join(f'{t:.3f}s' for t in rebalancing) or 'never'} after LOST, STABLE with 4 partitions within "
          f"{stable_at - lost_at:.2f}s; session events since LOST (event, state, owned): {at_events}")
