"""A consumer group of separate processes on a 12-partition topic under a steady producer, with a real
broker process and a real ZooKeeper: joins and clean leaves, SIGKILL, a GC zombie (SIGSTOP past the
session timeout), a real server-side session expiry, and ZooKeeper restarts (reliability
matrix rows 1, 2, 4, 5 and 12, invariants I1, I2, I4, I5, I6).

After every change: ownership exclusive, complete and balanced within 1 (``wait_stable``) and every
partition consumed again. At the end: every acknowledged message consumed at least once, duplicates only
inside a failed member's uncommitted window (none at all when nobody failed), committed offsets never
moving backwards (in the members' reports and as polled from ZooKeeper).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.consumer.offset_store import ZooKeeperOffsetStore
from metaq.errors import ZooKeeperUnavailableError
from metaq.testing.broker import topic_leaders
from metaq.testing.group import (
    ConsumerProcess,
    DeliveryReport,
    Event,
    GatedProxy,
    GroupHarness,
    OffsetMonitor,
    SteadyProducer,
    check_delivery,
    log_end_offsets,
    wait_consuming,
    wait_drained,
)
from metaq.testing.wait import wait_until
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout, paths, split_connect

TOPIC = "events"
GROUP = "group-test"
PARTITIONS = 12
RATE = 300.0  # messages per second
SESSION_S = 3.0
RETRIES = 10
BACKOFF_S = 0.5
PROPERTIES = {"zookeeper.session.timeout.ms": int(SESSION_S * 1000), "auto.commit.interval.ms": 300,
              "rebalance.backoff.ms": int(BACKOFF_S * 1000), "rebalance.max.retries": RETRIES}
I6_BOUND_S = 2 * SESSION_S + RETRIES * BACKOFF_S + 5  # liveness after healing (reliability matrix I6)
TAKEOVER_BOUND_S = SESSION_S + RETRIES * BACKOFF_S  # a dead member's partitions: its session, then one round
CONSUMING_TIMEOUT_S = 15.0
DRAIN_TIMEOUT_S = 60.0

pytestmark = pytest.mark.timeout(180)


class Scenario:
    """A group harness, a steady producer and an offset monitor on one ZooKeeper chroot and broker."""

    def __init__(self, zk_connect: str, layout: ZkLayout, bootstrap: str, work_dir: Path) -> None:
        self.layout = layout
        self.bootstrap = bootstrap
        self.group = GroupHarness(zk_connect, GROUP, TOPIC, work_dir / "group", PROPERTIES)
        self.producer = SteadyProducer(zk_connect, TOPIC, rate=RATE)
        self.monitor = OffsetMonitor(layout, GROUP)
        self.acked: dict[tuple[int, int], bytes] = {}

    def start(self) -> None:
        self.producer.start()
        self.monitor.start()

    def add(self, count: int = 1) -> list[ConsumerProcess]:
        members = [self.group.add_member() for _ in range(count)]
        for member in members:
            member.wait_started()
        return members

    def stable(self, members: int, timeout: float = I6_BOUND_S) -> dict[int, str]:
        """Exclusive, complete, balanced ownership by ``members`` live members; partition -> thread id."""
        return self.group.wait_stable(self.layout, PARTITIONS, members=members, timeout=timeout)

    def stable_and_consuming(self, members: int, timeout: float = I6_BOUND_S) -> dict[int, str]:
        owners = self.stable(members, timeout)
        wait_consuming(self.group, range(PARTITIONS), time.monotonic(), CONSUMING_TIMEOUT_S)
        return owners

    @staticmethod
    def partitions_of(member: ConsumerProcess, owners: dict[int, str]) -> set[int]:
        """The partitions ``member`` owns in an owner map from :meth:`stable`."""
        consumer_id = member.consumer_id()
        return {p for p, tid in owners.items() if tid.rsplit("-", 1)[0] == consumer_id}

    def finish(self, failed: Iterable[str] = (), *, producer_must_not_fail: bool = True) -> DeliveryReport:
        """Stop producing, let the group drain, stop every live member cleanly, check delivery (I1, I2, I5)."""
        self.acked = self.producer.finish()
        if producer_must_not_fail:
            assert self.producer.failed == 0, f"{self.producer.failed} sends failed (broker trouble?)"
        assert len(self.acked) > RATE, f"only {len(self.acked)} messages acknowledged"
        drained = wait_drained(self.group, self.acked, DRAIN_TIMEOUT_S)
        assert not drained.missing, (
            f"{len(drained.missing)} acknowledged messages not consumed within {DRAIN_TIMEOUT_S}s, "
            f"e.g. {drained.missing[:5]}")
        for member in self.group.members:
            if member.alive:
                assert member.stop() == 0, f"{member.name} did not exit cleanly; see {member.log_path}"
        self.monitor.stop()
        events = self.group.events()
        report = check_delivery(events, self.acked, failed_members=failed)
        report.assert_ok()
        # rebalance.max.retries x backoff > session timeout: no round of retries may run out (issue §10.4)
        failures = [f"{e['member']}: {e['error']}" for e in events if e["name"] == "rebalance_failed"]
        assert not failures, failures
        assert not self.monitor.backwards, self.monitor.backwards[:5]
        assert self.monitor.polls > 0
        return report

    def close(self) -> None:
        self.producer.stop_event.set()
        for member in self.group.members:
            member.kill()
        self.monitor.stop()


@pytest.fixture
def scenario(broker: BrokerProcess, make_topic: Callable[..., str], zk_connect: str, zk_layout: ZkLayout,
             tmp_path: Path) -> Iterator[Scenario]:
    make_topic(TOPIC, partitions=PARTITIONS)
    s = Scenario(zk_connect, zk_layout, broker.bootstrap, tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.close()


def _ephemeral_owner(client: KazooClient, path: str) -> int | None:
    stat = client.exists(path)
    return None if stat is None else stat.ephemeralOwner


def _session_nodes(layout: ZkLayout) -> dict[str, int]:
    """Every consumer registration and owner node of the group -> the session that owns it."""
    client = layout.client
    nodes = {}
    for member in layout.consumer_ids(GROUP):
        path = paths.consumer_id_path(GROUP, member)
        nodes[path] = _ephemeral_owner(client, path)
    for topic, partition in layout.owners(GROUP):
        path = paths.owner_path(GROUP, topic, partition)
        nodes[path] = _ephemeral_owner(client, path)
    return {path: owner for path, owner in nodes.items() if owner is not None}


def _brokers(layout: ZkLayout) -> list[int]:
    try:
        return layout.broker_ids()
    except ZooKeeperUnavailableError:
        return []


def _member_events(member: ConsumerProcess, name: str) -> list[Event]:
    return [e for e in member.events() if e["name"] == name]


def _rebalanced_since(members: Iterable[ConsumerProcess], since: float) -> list[str]:
    return [f"{e['member']}: {e['name']} at {e['time'] - since:+.2f}s" for m in members for e in m.events()
            if e["time"] > since and e["name"] in ("partitions_assigned", "partitions_revoked")]


# -- 1. joins and clean leaves ---------------------------------------------------------------------


def test_joins_and_clean_leaves(scenario: Scenario) -> None:
    """Members join one by one, one leaves with SIGTERM: no loss, zero duplicates, final offsets = log end."""
    s = scenario
    a, = s.add()
    s.stable_and_consuming(1)
    b, = s.add()
    s.stable_and_consuming(2)
    c, = s.add()
    owners = s.stable_and_consuming(3)
    assert sorted(len(s.partitions_of(m, owners)) for m in (a, b, c)) == [4, 4, 4]

    assert b.stop() == 0, f"{b.name} did not exit cleanly; see {b.log_path}"
    assert _member_events(b, "shutdown_complete")
    owners = s.stable_and_consuming(2)
    assert sorted(len(s.partitions_of(m, owners)) for m in (a, c)) == [6, 6]

    report = s.finish()
    assert report.duplicates == 0, f"{report.duplicates} duplicates although no member failed"
    # Every clean stop committed exactly what it handed out: the group's offsets are the log end.
    end = log_end_offsets(s.bootstrap, TOPIC, PARTITIONS)
    assert s.layout.offsets(GROUP) == {(TOPIC, p): end[p] for p in range(PARTITIONS)}
    assert s.layout.owners(GROUP) == {} and s.layout.consumer_ids(GROUP) == []


# -- 2. SIGKILL ------------------------------------------------------------------------------------


def test_sigkill_of_a_member(scenario: Scenario) -> None:
    """The others take over within the session timeout plus one round of rebalance retries; the victim's
    orphan owner nodes vanish with its session; duplicates only inside its uncommitted window."""
    s = scenario
    members = s.add(3)
    owners = s.stable_and_consuming(3)
    victim = members[0]
    victim_id = victim.consumer_id()
    orphans = s.partitions_of(victim, owners)
    assert len(orphans) == 4

    killed_at = time.monotonic()
    victim.kill()

    def orphans_gone() -> bool:
        live = s.layout.consumer_ids(GROUP)
        owned_by_victim = [p for (_, p), tid in s.layout.owners(GROUP).items() if tid.rsplit("-", 1)[0] == victim_id]
        return victim_id not in live and not owned_by_victim

    # The session expires on the server after the session timeout (rounded up to ZooKeeper's tick buckets).
    wait_until(orphans_gone, SESSION_S + 2.0, f"{victim.name}'s registration and owner nodes to vanish")
    owners = s.stable(2)
    took_over = time.monotonic() - killed_at
    assert took_over <= TAKEOVER_BOUND_S, f"take-over took {took_over:.1f}s"
    assert all(s.partitions_of(m, owners) for m in members[1:])
    wait_consuming(s.group, orphans, time.monotonic(), CONSUMING_TIMEOUT_S)

    report = s.finish(failed=[victim.name])
    print(f"SIGKILL: take-over {took_over:.2f}s after the kill; {report.duplicates} duplicates "
          f"(all in {victim.name}'s uncommitted window)")


# -- 3. a GC zombie: SIGSTOP past the session timeout ----------------------------------------------


def test_paused_member_past_session_timeout_commits_nothing_it_lost(scenario: Scenario) -> None:
    """A member paused for 2.5x the session timeout loses its partitions; after SIGCONT it commits nothing
    for them (until it legitimately owns them again), re-registers, and the group is stable again."""
    s = scenario
    members = s.add(3)
    owners = s.stable_and_consuming(3)
    zombie = members[1]
    zombie_id = zombie.consumer_id()
    session = zombie.session()
    assert session is not None
    lost = s.partitions_of(zombie, owners)
    assert len(lost) == 4

    paused_at = time.monotonic()
    zombie.pause()
    try:
        wait_until(lambda: zombie_id not in s.layout.consumer_ids(GROUP), SESSION_S + 5,
                 f"{zombie.name}'s session to expire")
        expired_by = time.monotonic()  # the server expired the session before this (its ephemeral node is gone)
        s.stable(2)  # the two others own everything
        wait_consuming(s.group, lost, time.monotonic(), CONSUMING_TIMEOUT_S)
        time.sleep(max(0.0, paused_at + 2.5 * SESSION_S - time.monotonic()))  # the fault: stay paused
    finally:
        resumed_at = time.monotonic()
        zombie.resume()

    s.stable_and_consuming(3)
    assert zombie_id in s.layout.consumer_ids(GROUP)
    new_owner = _ephemeral_owner(s.layout.client, paths.consumer_id_path(GROUP, zombie_id))
    assert new_owner not in (None, session[0]), "the zombie must re-register with a new session"

    report = s.finish(failed=[zombie.name])

    # I5: after SIGCONT, nothing committed for a lost partition before the zombie was assigned it again.
    reassigned: dict[int, float] = {}
    for e in _member_events(zombie, "partitions_assigned"):
        if e["time"] > resumed_at:
            for part in e["partitions"]:
                reassigned.setdefault(part["partition"], e["time"])
    bad = [(o["partition"], o["offset"]) for e in _member_events(zombie, "offsets_committed")
           if e["started"] >= resumed_at for o in e["offsets"]
           if o["partition"] in lost and not reassigned.get(o["partition"], float("inf")) < e["started"]]
    assert not bad, f"the zombie committed partitions it had lost: {bad}"
    assert "session lost" in zombie.log_path.read_text(), "the zombie never noticed its expired session"
    fenced = sorted({part["partition"] for e in _member_events(zombie, "offsets_committed")
                     if e["started"] >= resumed_at for part in e["lost"]})
    # The session lease: resumed after its session expired, the zombie delivers not one record (of any
    # partition) until a rebalance on its new session assigns it partitions again, although its fetchers bring
    # back everything produced during the pause before kazoo notices the expiry.
    states = [(e["state"], e["time"]) for e in zombie.events() if e["name"] == "session_state"]
    lost_at = min((t for state, t in states if state == "LOST" and t > resumed_at), default=None)
    assert lost_at is not None, f"the zombie never reported its lost session: {states}"
    late = [(part["partition"], part["minOffset"], part["count"], round(part["firstTime"] - resumed_at, 3))
            for e in zombie.events() if e["name"] == "records_consumed" for part in e["partitions"]
            if part["lastTime"] > expired_by and part["firstTime"] < reassigned.get(part["partition"], float("inf"))]
    assert not late, (f"the zombie delivered records after its session expired (partition, offset, count, seconds "
                      f"after SIGCONT): {late}")
    print(f"zombie: lost {sorted(lost)}, session expired before +{expired_by - paused_at:.2f}s, LOST seen "
          f"{lost_at - resumed_at:.3f}s after SIGCONT, reassigned {sorted(reassigned)}, fenced commits refused for "
          f"{fenced}, 0 records delivered after the expiry; {report.duplicates} duplicates")


# -- 4. real server-side session expiry -------------------------------------------------------------


def test_server_side_session_expiry(scenario: Scenario, zk_connect: str) -> None:
    """A twin client closes the member's session on the server: its ephemerals vanish at once, it
    re-registers with a new session, a rebalance completes, and nothing is lost."""
    s = scenario
    members = s.add(3)
    s.stable_and_consuming(3)
    victim = members[2]
    victim_id = victim.consumer_id()
    session = victim.session()
    assert session is not None
    old_session = session[0]
    assert old_session in _session_nodes(s.layout).values()

    hosts, _chroot = split_connect(zk_connect)
    twin = KazooClient(hosts=hosts, client_id=session)
    twin.start(timeout=10)
    twin.stop()  # sends closeSession: the server expires the victim's session now
    twin.close()
    expired_at = time.monotonic()

    wait_until(lambda: old_session not in _session_nodes(s.layout).values(), 5.0,
             "the expired session's ephemeral nodes to vanish")

    def re_registered() -> bool:
        owner = _ephemeral_owner(s.layout.client, paths.consumer_id_path(GROUP, victim_id))
        return owner is not None and owner != old_session

    wait_until(re_registered, I6_BOUND_S, f"{victim.name} to re-register with a new session")
    owners = s.stable(3)
    stable_after = time.monotonic() - expired_at
    assert stable_after <= I6_BOUND_S, f"stable only {stable_after:.1f}s after the expiry"
    wait_consuming(s.group, range(PARTITIONS), time.monotonic(), CONSUMING_TIMEOUT_S)
    assert s.partitions_of(victim, owners), f"{victim.name} owns nothing after re-registering"
    assert old_session not in _session_nodes(s.layout).values()
    assert any(e["time"] > expired_at for e in _member_events(victim, "partitions_assigned"))

    report = s.finish(failed=[victim.name])
    print(f"session expiry: stable {stable_after:.2f}s after it; {report.duplicates} duplicates "
          f"(all in {victim.name}'s uncommitted window)")


# -- fencing must not turn on its owner --------------------------------------------------------------


def test_a_commit_whose_reply_was_lost_is_not_taken_for_a_fence(zk_layout: ZkLayout,
                                                                   make_zk_client: Callable[..., KazooClient],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A fenced commit that ZooKeeper applied but whose reply was lost (the connection dropped, as in the
    restart test) leaves the store one version behind. The next commit must recognise its own write, not
    report the partition as fenced by a newer owner (a spurious revoke and rebalance); a real fence by a
    new owner must still be reported."""
    store = ZooKeeperOffsetStore(zk_layout, GROUP)
    mine, taken = (TOPIC, 0), (TOPIC, 1)
    store.take_ownership([mine, taken])
    assert set(store.commit({mine: 10, taken: 10}).committed) == {mine, taken}
    real_commit = zk_layout.commit_fenced_offsets

    def applied_then_reply_lost(group: str, offsets: dict) -> tuple[dict, set]:
        real_commit(group, offsets)
        raise ZooKeeperUnavailableError("connection lost before the reply")

    def lost_before_applied(group: str, offsets: dict) -> tuple[dict, set]:
        raise ZooKeeperUnavailableError("connection lost before the request")

    monkeypatch.setattr(zk_layout, "commit_fenced_offsets", lost_before_applied)
    with pytest.raises(ZooKeeperUnavailableError):
        store.commit({mine: 15, taken: 15})
    monkeypatch.setattr(zk_layout, "commit_fenced_offsets", applied_then_reply_lost)
    with pytest.raises(ZooKeeperUnavailableError):
        store.commit({mine: 20, taken: 20})
    monkeypatch.setattr(zk_layout, "commit_fenced_offsets", real_commit)
    assert zk_layout.offsets(GROUP) == {mine: 20, taken: 20}

    ZkLayout(make_zk_client()).fence_offsets(GROUP, [taken])  # a new owner takes one partition meanwhile
    result = store.commit({mine: 30, taken: 30})
    assert set(result.committed) == {mine} and result.lost == {taken}
    assert zk_layout.offsets(GROUP) == {mine: 30, taken: 20}
    assert set(store.commit({mine: 31}).committed) == {mine}


# -- 5. ZooKeeper restart ----------------------------------------------------------------------------


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own (the shared one must not be restarted), with a persistent data dir."""
    server = ZooKeeperServer(data_dir=tmp_path / "zk-data", log_path=tmp_path / "zookeeper.log",
                             tick_time_ms=200, force_sync=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_zookeeper_restart(own_zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """ZooKeeper crashes and restarts with its data: the sessions it restores get a fresh session timeout, so
    members that reconnect in time keep their sessions and ownership, with no rebalance, after a short and
    (last) after a long (> session timeout) outage alike. In between ZooKeeper is paused past the session
    timeout: it expires the sessions when it resumes, and the group is stable again within the I6 bound
    (counted from when the broker, whose own session may have expired too, is registered again)."""
    server = own_zookeeper
    # Every client (members, broker, producer, this test) reaches ZooKeeper through a gate that we open only
    # once a restarted server serves: see GatedProxy for the ZooKeeper start-up race it keeps out.
    proxy = GatedProxy(server.host, server.port)
    zk = f"127.0.0.1:{proxy.port}/metaq-zk-restart"
    # kazoo's default reconnect backoff grows without bound (max_delay=3600 s); this client must be back soon.
    client = connect(zk, session_timeout_ms=4000, connection_retry=KazooRetry(max_tries=-1, max_delay=0.5))
    broker = BrokerProcess(zk, 0, tmp_path / "broker")
    s: Scenario | None = None
    try:
        layout = ZkLayout(client)
        broker.start()
        create_topic(layout, TOPIC, PARTITIONS)
        wait_until(lambda: len(topic_leaders(broker.bootstrap, TOPIC)) == PARTITIONS, 10, "the topic on the broker")
        s = Scenario(zk, layout, broker.bootstrap, tmp_path)
        s.start()
        members = s.add(3)
        owners = s.stable_and_consuming(3)
        downtimes = []

        def crash_and_restart(outage: float) -> None:
            """ZooKeeper crashes, stays down ``outage`` seconds, restarts with its data: sessions kept, no
            rebalance, the same owners, consuming again."""
            sessions = _session_nodes(layout)
            down_at = time.monotonic()
            proxy.close()
            server.kill()
            time.sleep(outage)  # the fault: ZooKeeper stays down
            server.start()
            proxy.open()
            healed_at = time.monotonic()
            downtimes.append(healed_at - down_at)
            wait_consuming(s.group, range(PARTITIONS), time.monotonic(), CONSUMING_TIMEOUT_S)
            wait_until(lambda: all(any(e["started"] > healed_at and e["offsets"]
                                     for e in _member_events(m, "offsets_committed")) for m in members),
                     CONSUMING_TIMEOUT_S, "every member to commit again")
            refused = [(e["member"], e["lost"]) for m in members for e in _member_events(m, "offsets_committed")
                       if e["started"] > down_at and e["lost"]]
            assert not refused, f"commits refused as fenced although nobody else owned the partitions: {refused}"
            assert s.stable(3, timeout=5) == owners
            assert _session_nodes(layout) == sessions, (
                f"a member lost its session over a {downtimes[-1]:.1f}s outage (not reconnected within the "
                f"session timeout after ZooKeeper was back)")
            assert not _rebalanced_since(members, down_at), _rebalanced_since(members, down_at)

        crash_and_restart(0.0)

        # Paused past the session timeout: on SIGCONT the server expires the sessions it has not heard from.
        paused_at = time.monotonic()
        server.pause()
        try:
            time.sleep(2.5 * SESSION_S)  # the fault: ZooKeeper answers nothing
        finally:
            server.resume()
        resumed_at = time.monotonic()
        # Members cannot rebalance onto partitions without a registered broker (kafka-969), and the broker's
        # own ZooKeeper client may take long to come back; I6 counts from when the cluster is whole again.
        wait_until(lambda: _brokers(layout) == [broker.broker_id], 60, "the broker to be registered again")
        healed_at = time.monotonic()
        owners = s.stable(3)  # I6: stable within the bound after healing (raises otherwise)
        reconverged = time.monotonic() - healed_at
        wait_consuming(s.group, range(PARTITIONS), time.monotonic(), CONSUMING_TIMEOUT_S)
        lost = [m.name for m in members if "session lost" in m.log_path.read_text()]
        rebalances = len(_rebalanced_since(members, paused_at))

        # Last (the broker's own ZooKeeper client backs off without bound and may need long to come back
        # after this one; the members must not need it): a long outage, well past the session timeout.
        crash_and_restart(2.5 * SESSION_S)
        print(f"ZooKeeper: crash-restarts {', '.join(f'{d:.1f}s' for d in downtimes)} down kept every session "
              f"without a rebalance; paused {2.5 * SESSION_S:.1f}s: {len(lost)} members lost their session, "
              f"broker registered {healed_at - resumed_at:.1f}s after SIGCONT, group stable {reconverged:.1f}s "
              f"later ({rebalances} rebalance events)")
        s.finish(failed=[m.name for m in members], producer_must_not_fail=False)
    finally:
        if s is not None:
            s.close()
        broker.stop()
        client.stop()
        client.close()
        proxy.stop()
