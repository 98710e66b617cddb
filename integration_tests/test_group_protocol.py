"""The group membership protocol on a metaq broker, with standard clients unmodified: kcat -G, confluent-kafka
and kafka-python group consumers (each member a separate process) join, split the partitions, rebalance when
a member leaves or is SIGKILLed, and resume from their commits; plus the state machine and its error codes
driven with raw requests (kafka-python's codec).

The broker runs with group.min.session.timeout.ms lowered so that a dead member is noticed in ~2 s.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from integration_tests.peers import KCAT
from metaq.client.request_codec import build_request
from metaq.producer import Producer
from metaq.testing.broker import request
from metaq.testing.wait import wait_until

PARTITIONS = 6
SESSION_MS = 2000
HEARTBEAT_MS = 300
BROKER = {"group.min.session.timeout.ms": 1000, "offsets.topic.num.partitions": 4}
REBALANCE_TIMEOUT_S = 5.0  # what _join asks for

# error codes
REBALANCE_IN_PROGRESS = 27
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
INVALID_SESSION_TIMEOUT = 26
INCONSISTENT_GROUP_PROTOCOL = 23


@pytest.fixture
def group_broker(broker_cluster):
    return broker_cluster.add(0, **BROKER)


def _produce(zk_connect: str, topic: str, per_partition: int, tag: str) -> set[tuple[int, int]]:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, f"{tag}-{i}".encode(), partition=i % PARTITIONS)
                   for i in range(per_partition * PARTITIONS)]
        producer.flush()
        return {(f.result().partition, f.result().offset) for f in futures}


# ---- a group member in a child process ------------------------------------------------------------------

_MEMBER = r"""
import json, signal, sys, time
client, bootstrap, group, topic, conf = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
def emit(ev, **kw):
    sys.stdout.write(json.dumps({"ev": ev, "t": time.monotonic(), **kw}) + "\n")
    sys.stdout.flush()
if client == "confluent":
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **conf})
    c.subscribe([topic], on_assign=lambda _, ps: emit("assigned", partitions=sorted(p.partition for p in ps)),
                on_revoke=lambda _, ps: emit("revoked", partitions=sorted(p.partition for p in ps)))
    emit("started")
    while not stopping:
        got = [[m.partition(), m.offset()] for m in c.consume(500, 0.05) if m.error() is None]
        if got:
            emit("msgs", msgs=got)
else:
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, ps):
            emit("assigned", partitions=sorted(p.partition for p in ps),
                 member=c._coordinator._generation.member_id)
        def on_partitions_revoked(self, ps):
            emit("revoked", partitions=sorted(p.partition for p in ps))
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **conf)
    c.partitions_for_topic(topic)  # metadata first: no metadata-triggered rejoin right after the first join
    c.subscribe([topic], listener=Listener())
    emit("started")
    while not stopping:  # poll long enough to finish a join in one call (see the note above CLIENT_CONF)
        got = [[r.partition, r.offset] for rs in c.poll(timeout_ms=1000).values() for r in rs]
        if got:
            emit("msgs", msgs=got)
emit("closing")
c.close()
emit("closed")
"""

# kafka-python 3.0.12 client race (not the broker's): when poll(timeout_ms) runs out while JoinGroup/SyncGroup
# is in flight, the join task is left to finish in the background; if that join was started by a metadata change
# (the first join of a consumer that had no topic metadata yet assigns nothing, then rejoins), need_rejoin() is
# False by the time of the next poll, so the completion step (enable heartbeats, on_partitions_assigned) never
# runs: the member stops heartbeating, is removed after its session timeout, and never rejoins. Seen in ~1 of 10
# runs with poll(timeout_ms=50) on a loaded machine. The child therefore fetches the topic's metadata before
# subscribing and polls with 1 s (poll returns as soon as records arrive).
CLIENT_CONF: dict[str, dict[str, Any]] = {
    "confluent": {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                  "auto.commit.interval.ms": 200, "fetch.wait.max.ms": 50},
    "kafka-python": {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS,
                     "auto_commit_interval_ms": 200, "fetch_max_wait_ms": 50, "enable_auto_commit": True},
}


@dataclass
class Member:
    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    _pos: int = 0

    def poll(self) -> list[dict[str, Any]]:
        with open(self.out, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._pos += len(complete)
        self.events += [json.loads(line) for line in complete.splitlines() if line.strip()]
        return self.events

    def assignment(self) -> set[int] | None:
        """The current assignment (None while revoked / not assigned yet)."""
        current: set[int] | None = None
        for e in self.poll():
            if e["ev"] == "assigned":
                current = set(e["partitions"])
            elif e["ev"] in ("revoked", "closed"):
                current = None
        return current

    def assigned_at(self) -> float | None:
        times = [e["t"] for e in self.poll() if e["ev"] == "assigned"]
        return times[-1] if times else None

    def consumed(self) -> list[tuple[int, int]]:
        return [tuple(m) for e in self.poll() if e["ev"] == "msgs" for m in e["msgs"]]  # type: ignore[misc]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 20) -> float:
        """SIGTERM: the member closes its consumer (commit, LeaveGroup). Returns when it began to close."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout) == 0, self.out.with_suffix(".err").read_text()[-2000:]
        return next(e["t"] for e in self.poll() if e["ev"] == "closing")

    def kill(self) -> float:
        sent = time.monotonic()
        self.proc.kill()
        self.proc.wait(10)
        return sent


class Members:
    def __init__(self, client: str, bootstrap: str, group: str, topic: str, work: Path) -> None:
        self.args = (client, bootstrap, group, topic)
        self.work = work
        self.all: list[Member] = []

    def add(self, **conf: Any) -> Member:
        client, bootstrap, group, topic = self.args
        name = f"{client}-{len(self.all)}"
        out = self.work / f"{name}.jsonl"
        merged = {**CLIENT_CONF[client], **conf}
        with open(out, "wb") as stdout, open(out.with_suffix(".err"), "wb") as stderr:
            proc = subprocess.Popen([sys.executable, "-c", _MEMBER, client, bootstrap, group, topic,
                                     json.dumps(merged)], stdout=stdout, stderr=stderr)
        member = Member(name, proc, out)
        self.all.append(member)
        return member

    def live(self) -> list[Member]:
        return [m for m in self.all if m.alive]

    def split(self) -> dict[str, set[int]] | None:
        """Each live member's assignment if they are disjoint, cover every partition and nobody is idle."""
        assignments = {m.name: m.assignment() for m in self.live()}
        if any(a is None for a in assignments.values()):
            return None
        parts = [p for a in assignments.values() for p in a]  # type: ignore[union-attr]
        if sorted(parts) != list(range(PARTITIONS)) or not all(assignments.values()):
            return None
        return assignments  # type: ignore[return-value]

    def wait_split(self, timeout: float) -> dict[str, set[int]]:
        wait_until(lambda: self.split() is not None, timeout,
                   f"{len(self.live())} members to split {PARTITIONS} partitions: "
                   f"{ {m.name: m.assignment() for m in self.live()} }")
        split = self.split()
        assert split is not None
        return split

    def consumed(self) -> list[tuple[int, int]]:
        return [pm for m in self.all for pm in m.consumed()]

    def stop(self) -> None:
        for m in self.all:
            if m.alive:
                m.kill()


@pytest.fixture
def members_factory(tmp_path: Path) -> Iterator[Any]:
    created: list[Members] = []

    def make(client: str, bootstrap: str, group: str, topic: str) -> Members:
        work = tmp_path / f"{client}-{len(created)}"
        work.mkdir()
        m = Members(client, bootstrap, group, topic, work)
        created.append(m)
        return m

    yield make
    for m in created:
        m.stop()


def _settled_after(members: list[Member], since: float) -> float:
    """Seconds from ``since`` to the last of these members' newest assignment."""
    times = [m.assigned_at() for m in members]
    assert all(t is not None for t in times)
    return max(times) - since  # type: ignore[type-var,operator]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_standard_group_consumers(client, group_broker, make_topic, zk_connect, members_factory) -> None:
    """Join and split, a clean leave, a SIGKILL, resume from commits; rebalance times are printed and bounded."""
    topic = make_topic(f"grp-{client}", partitions=PARTITIONS)
    sent = _produce(zk_connect, topic, 20, "a")
    group = f"group-{client}"
    members = members_factory(client, group_broker.bootstrap, group, topic)
    a, b, c = (members.add() for _ in range(3))
    members.wait_split(30)
    wait_until(lambda: set(members.consumed()) >= sent, 20, "the group to consume everything")

    # a clean leave: LeaveGroup, the others learn it at their next heartbeat and rejoin at once
    closed_at = c.close()
    split = members.wait_split(10)
    leave_s = _settled_after([a, b], closed_at)
    assert sorted(len(p) for p in split.values()) == [3, 3]

    # a death: noticed after the session timeout, then the same rebalance
    killed_at = b.kill()
    members.wait_split(15)
    death_s = _settled_after([a], killed_at)
    assert members.split() == {a.name: set(range(PARTITIONS))}

    more = _produce(zk_connect, topic, 10, "b")
    wait_until(lambda: set(members.consumed()) >= sent | more, 20, "the survivor to consume the new messages")
    a.close()
    # resume from commits: a new member gets only what was produced after every commit
    later = _produce(zk_connect, topic, 5, "c")
    before = len(members.consumed())
    d = members.add()
    members.wait_split(30)
    wait_until(lambda: set(d.consumed()) >= later, 20, "the new member to consume the newest messages")
    time.sleep(0.5)
    assert set(d.consumed()) == later, f"re-delivered {sorted(set(d.consumed()) - later)[:10]}"
    assert len(members.consumed()) == before + len(later)
    d.close()
    print(f"{client}: rebalance after a clean leave settled in {leave_s:.2f}s, after SIGKILL in {death_s:.2f}s "
          f"(session {SESSION_MS} ms, heartbeat {HEARTBEAT_MS} ms)")
    # a leave is noticed at the next heartbeat; then the join completes as soon as everyone rejoined
    assert leave_s < 2.0 + HEARTBEAT_MS / 1000, f"clean-leave rebalance took {leave_s:.2f}s"
    assert death_s < SESSION_MS / 1000 + 2.5, f"rebalance after SIGKILL took {death_s:.2f}s"


def test_confluent_defaults_rebalance_promptly(group_broker, make_topic, zk_connect, members_factory) -> None:
    """With librdkafka's default timers (session 45 s, heartbeat 3 s) a clean leave is still handled within
    one heartbeat interval plus the rejoin; no extra delay comes from the broker."""
    topic = make_topic("grp-defaults", partitions=PARTITIONS)
    members = members_factory("confluent", group_broker.bootstrap, "defaults", topic)
    defaults = {"session.timeout.ms": 45000, "heartbeat.interval.ms": 3000}
    first = members.add(**defaults)
    members.wait_split(20)
    joined_at = time.monotonic()
    second = members.add(**defaults)
    members.wait_split(20)
    join_s = _settled_after([first, second], joined_at)
    closed_at = second.close()
    members.wait_split(10)
    leave_s = _settled_after([first], closed_at)
    first.close()
    print(f"confluent defaults: a second member joined in {join_s:.2f}s (includes process start), "
          f"a clean leave settled in {leave_s:.2f}s")
    assert leave_s < 3.0 + 1.5 and join_s < 3.0 + 4.0


def test_group_survives_a_coordinator_sigkill(broker_cluster, make_topic, zk_connect, members_factory) -> None:
    """Two brokers; the group's coordinator is SIGKILLed and restarted: the members find it again, rejoin,
    consume everything, and the commits they made (before and after) are all there at the end."""
    b0 = broker_cluster.add(0, **BROKER)
    b1 = broker_cluster.add(1, **BROKER)
    topic = make_topic("grp-crash", partitions=PARTITIONS)

    def coordinator(group: str) -> int:
        resp = _req(b1.bootstrap, FindCoordinatorRequest, FindCoordinatorResponse, 1, key=group, key_type=0)
        return resp.node_id if resp.error_code == 0 else -1

    wait_until(lambda: coordinator("probe") >= 0, 15, "the offsets topic")
    group = next(g for g in (f"crash-{i}" for i in range(50)) if coordinator(g) == 0)
    members = members_factory("confluent", b1.bootstrap, group, topic)
    a, b = members.add(), members.add()
    members.wait_split(30)
    sent = _produce(zk_connect, topic, 20, "a")
    wait_until(lambda: set(members.consumed()) >= sent, 20, "everything consumed")
    time.sleep(0.5)  # a few auto-commits
    b0.kill()
    time.sleep(1.0)
    b0.start()
    more = _produce(zk_connect, topic, 20, "b")
    wait_until(lambda: set(members.consumed()) >= sent | more, 45, "everything consumed after the restart")
    members.wait_split(30)
    a.close()
    b.close()
    committed = _committed(b1.bootstrap, group, topic)
    ends = {p: 1 + max(o for pp, o in sent | more if pp == p) for p in range(PARTITIONS)}
    assert committed == ends, f"committed {committed}, log ends {ends}"


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


# ---- kcat -G ------------------------------------------------------------------------------------------------


class Kcat:
    """``kcat -G`` as a child process; messages on stdout as ``partition offset``, rebalances on stderr.

    ``auto.offset.reset=earliest`` rather than ``-o beginning``: with -G, kcat applies ``-o`` to every
    assigned partition, overriding the committed offsets, so a restarted group would start over.
    """

    def __init__(self, bootstrap: str, group: str, topic: str, work: Path, name: str) -> None:
        self.out = work / f"{name}.out"
        self.err = work / f"{name}.err"
        with open(self.out, "wb") as stdout, open(self.err, "wb") as stderr:
            self.proc = subprocess.Popen(
                [KCAT, "-b", bootstrap, "-G", group, topic, "-f", "%p %o\n", "-u",
                 "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
                 "-X", "auto.commit.interval.ms=500", "-X", "fetch.wait.max.ms=50"],
                stdout=stdout, stderr=stderr)

    def consumed(self) -> list[tuple[int, int]]:
        lines = self.out.read_text().splitlines()
        return [(int(p), int(o)) for p, o in (line.split() for line in lines if line.count(" ") == 1)]

    def assignment(self) -> set[int] | None:
        current: set[int] | None = None
        for line in self.err.read_text().splitlines():
            if "rebalanced" in line and "assigned:" in line:
                current = {int(part.split("[")[1].rstrip("]")) for part in line.split("assigned:")[1].split(",")
                           if "[" in part}
            elif "rebalanced" in line and "revoked:" in line:
                current = None
        return current

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # kcat commits and leaves the group on SIGINT/SIGTERM
            self.proc.wait(20)


def _kcat_split(members: list[Kcat]) -> dict[int, set[int]] | None:
    assignments = {i: k.assignment() for i, k in enumerate(members)}
    if any(not a for a in assignments.values()):
        return None
    parts = sorted(p for a in assignments.values() for p in a)  # type: ignore[union-attr]
    return assignments if parts == list(range(PARTITIONS)) else None  # type: ignore[return-value]


def test_kcat_group_splits_partitions_and_resumes(group_broker, make_topic, zk_connect, tmp_path) -> None:
    topic = make_topic("grp-kcat", partitions=PARTITIONS)
    members = [Kcat(group_broker.bootstrap, "kcat-group", topic, tmp_path, f"kcat-{i}") for i in range(3)]
    try:
        wait_until(lambda: _kcat_split(members) is not None, 30,
                   f"3 kcat members to split the partitions: {[k.assignment() for k in members]}")
        sent = _produce(zk_connect, topic, 20, "a")
        wait_until(lambda: len([m for k in members for m in k.consumed()]) >= len(sent), 20, "everything consumed")
        split = _kcat_split(members)
        assert split is not None and all(len(p) == 2 for p in split.values()), split
        consumed = [m for k in members for m in k.consumed()]
        assert sorted(consumed) == sorted(sent)  # each message once: the members' subsets are disjoint
        for i, k in enumerate(members):
            assert {p for p, _ in k.consumed()} <= split[i]
    finally:
        for k in members:
            k.stop()
    more = _produce(zk_connect, topic, 10, "b")
    again = [Kcat(group_broker.bootstrap, "kcat-group", topic, tmp_path, f"kcat-again-{i}") for i in range(3)]
    try:
        wait_until(lambda: len([m for k in again for m in k.consumed()]) >= len(more), 30, "the new messages")
        time.sleep(1.0)
        resumed = [m for k in again for m in k.consumed()]
        assert sorted(resumed) == sorted(more), f"re-delivered {sorted(set(resumed) - more)[:10]}"
    finally:
        for k in again:
            k.stop()


# ---- the state machine with raw requests --------------------------------------------------------------------


def _req(bootstrap: str, cls: Any, resp_cls: Any, version: int, timeout: float = 20.0, **fields: Any) -> Any:
    return request(bootstrap, build_request(cls, version, fields), resp_cls, version, timeout=timeout)


def _join(bootstrap: str, group: str, member: str = "", instance: str | None = None, session_ms: int = 3000,
          protocol_type: str = "consumer", protocols: tuple[str, ...] = ("range",)) -> Any:
    return _req(bootstrap, JoinGroupRequest, JoinGroupResponse, 5, group_id=group, session_timeout_ms=session_ms,
                rebalance_timeout_ms=int(REBALANCE_TIMEOUT_S * 1000), member_id=member, group_instance_id=instance,
                protocol_type=protocol_type, protocols=[{"name": p, "metadata": b"m"} for p in protocols])


def _sync(bootstrap: str, group: str, generation: int, member: str, assignments: dict[str, bytes],
          instance: str | None = None) -> Any:
    return _req(bootstrap, SyncGroupRequest, SyncGroupResponse, 3, group_id=group, generation_id=generation,
                member_id=member, group_instance_id=instance,
                assignments=[{"member_id": m, "assignment": a} for m, a in assignments.items()])


def _heartbeat(bootstrap: str, group: str, generation: int, member: str, instance: str | None = None) -> int:
    return _req(bootstrap, HeartbeatRequest, HeartbeatResponse, 3, group_id=group, generation_id=generation,
                member_id=member, group_instance_id=instance).error_code


def _commit(bootstrap: str, group: str, generation: int, member: str, offset: int = 1) -> int:
    resp = _req(bootstrap, OffsetCommitRequest, OffsetCommitResponse, 7, group_id=group,
                generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
                topics=[{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                      "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    return resp.topics[0].partitions[0].error_code


def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn(*args, **kwargs)), daemon=True)
    t.start()
    return t, box


def test_group_state_machine_with_raw_requests(group_broker, make_topic) -> None:
    bs, g = group_broker.bootstrap, "raw"
    make_topic("t")  # the topic _commit commits to: offsets of unknown partitions are refused
    wait_until(lambda: _req(bs, FindCoordinatorRequest, FindCoordinatorResponse, 1, key=g,
                            key_type=0).error_code == 0, 15, "a coordinator")
    wait_until(lambda: _heartbeat(bs, g, 0, "x") != 14, 15, "the offsets partition to load")
    # bad joins
    assert _join(bs, g, session_ms=500).error_code == INVALID_SESSION_TIMEOUT
    assert _join(bs, "").error_code == 24
    # KIP-394: a first join gets a member id to come back with
    first = _join(bs, g)
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
    a = _join(bs, g, first.member_id)
    assert a.error_code == 0 and a.leader == a.member_id and len(a.members) == 1
    gen = a.generation_id
    assert _sync(bs, g, gen, a.member_id, {a.member_id: b"all"}).assignment == b"all"
    assert _heartbeat(bs, g, gen, a.member_id) == 0
    assert _commit(bs, g, gen, a.member_id) == 0
    # wrong protocol type, unknown member, stale generation
    assert _join(bs, g, protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL
    assert _heartbeat(bs, g, gen, "nobody") == UNKNOWN_MEMBER_ID
    assert _heartbeat(bs, g, gen + 5, a.member_id) == ILLEGAL_GENERATION
    assert _commit(bs, g, gen + 5, a.member_id) == ILLEGAL_GENERATION
    assert _commit(bs, g, gen, "nobody") == UNKNOWN_MEMBER_ID
    assert _commit(bs, g, -1, "") == UNKNOWN_MEMBER_ID  # the group has members: no outside commits
    assert _sync(bs, g, gen, "nobody", {}).error_code == UNKNOWN_MEMBER_ID

    # a second member joins: A learns of the rebalance by heartbeat, and the join completes the moment A rejoins
    b_id = _join(bs, g).member_id
    t, box = _in_thread(_join, bs, g, b_id)
    wait_until(lambda: _heartbeat(bs, g, gen, a.member_id) == REBALANCE_IN_PROGRESS, 5, "REBALANCE_IN_PROGRESS")
    assert _commit(bs, g, gen, a.member_id) == 0  # commits of the current generation are still accepted
    started = time.monotonic()
    a2 = _join(bs, g, a.member_id)
    t.join(10)
    took = time.monotonic() - started
    b = box[0]
    assert a2.error_code == 0 and b.error_code == 0 and a2.generation_id == b.generation_id == gen + 1
    # not held until the 5 s rebalance timeout (speed itself is measured in bench/, not asserted here)
    assert took < REBALANCE_TIMEOUT_S / 2, f"the join completed {took:.2f}s after the last member rejoined"
    leader, follower = (a2, b) if a2.leader == a2.member_id else (b, a2)
    assert len(leader.members) == 2 and follower.members == []
    gen += 1
    # the follower's SyncGroup waits for the leader's assignment
    t, box = _in_thread(_sync, bs, g, gen, follower.member_id, {})
    time.sleep(0.2)
    assert _commit(bs, g, gen, follower.member_id) == REBALANCE_IN_PROGRESS  # CompletingRebalance
    assert _sync(bs, g, gen, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"}).assignment == b"L"
    t.join(10)
    assert box[0].error_code == 0 and box[0].assignment == b"F"
    assert _heartbeat(bs, g, gen - 1, leader.member_id) == ILLEGAL_GENERATION

    # LeaveGroup: the other member is told to rejoin and is alone in the next generation at once
    assert _req(bs, LeaveGroupRequest, LeaveGroupResponse, 1, group_id=g,
                member_id=follower.member_id).error_code == 0
    assert _heartbeat(bs, g, gen, follower.member_id) == UNKNOWN_MEMBER_ID
    assert _heartbeat(bs, g, gen, leader.member_id) == REBALANCE_IN_PROGRESS
    started = time.monotonic()
    alone = _join(bs, g, leader.member_id)
    assert alone.error_code == 0 and alone.generation_id == gen + 1
    assert time.monotonic() - started < REBALANCE_TIMEOUT_S / 2  # the departed member is not waited for
    gen += 1
    _sync(bs, g, gen, leader.member_id, {leader.member_id: b"all"})

    # a member that stops heartbeating is removed after its session timeout (3 s here)
    # (polled by an outside commit, which does not count as the member's heartbeat: accepted once the group
    # is empty again)
    wait_until(lambda: _commit(bs, g, -1, "") == 0, 20, "the silent member to be removed")
    assert _heartbeat(bs, g, gen, leader.member_id) == UNKNOWN_MEMBER_ID

    # a burst of new members (KIP-394): the first to come back with its id waits for the others still pending
    # (docs/broker-coordinated-consumer.md, "Joins wait for pending members"): one generation, not one per arrival
    burst = "burst"
    ids = [_join(bs, burst, session_ms=10_000).member_id for _ in range(4)]
    joins = []
    for member_id in ids:
        joins.append(_in_thread(_join, bs, burst, member_id, session_ms=10_000))
        time.sleep(0.2)
    for t, _ in joins:
        t.join(10)
    results = [box[0] for _, box in joins]
    assert [r.error_code for r in results] == [0, 0, 0, 0]
    assert {r.generation_id for r in results} == {1}, [r.generation_id for r in results]
    assert sorted(m.member_id for m in next(r for r in results if r.leader == r.member_id).members) == sorted(ids)


def test_static_membership(group_broker) -> None:
    """group.instance.id: a restarted static member takes its place without a rebalance; the old id is fenced."""
    bs, g = group_broker.bootstrap, "static"
    wait_until(lambda: _req(bs, FindCoordinatorRequest, FindCoordinatorResponse, 1, key=g,
                            key_type=0).error_code == 0, 15, "a coordinator")
    wait_until(lambda: _heartbeat(bs, g, 0, "x") != 14, 15, "the offsets partition to load")
    leader = _join(bs, g, instance="i-leader")  # static members get no MEMBER_ID_REQUIRED
    assert leader.error_code == 0
    _sync(bs, g, leader.generation_id, leader.member_id, {leader.member_id: b"x"}, instance="i-leader")
    t, box = _in_thread(_join, bs, g, instance="i-follower")
    wait_until(lambda: _heartbeat(bs, g, leader.generation_id, leader.member_id, "i-leader") == 27, 5, "rebalance")
    leader = _join(bs, g, leader.member_id, instance="i-leader")
    t.join(10)
    follower = box[0]
    gen = leader.generation_id
    assert follower.generation_id == gen
    t, box = _in_thread(_sync, bs, g, gen, follower.member_id, {}, instance="i-follower")
    _sync(bs, g, gen, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"}, instance="i-leader")
    t.join(10)
    # the follower restarts with a new member id: same generation, same assignment, no rebalance
    again = _join(bs, g, instance="i-follower")
    assert again.error_code == 0 and again.generation_id == gen and again.member_id != follower.member_id
    assert _sync(bs, g, gen, again.member_id, {}, instance="i-follower").assignment == b"F"
    assert _heartbeat(bs, g, gen, leader.member_id, "i-leader") == 0
    assert _heartbeat(bs, g, gen, follower.member_id, "i-follower") in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID)


def test_initial_rebalance_delay_batches_the_first_joins(broker_cluster) -> None:
    """group.initial.rebalance.delay.ms: members that join an empty group within the delay all land in the
    first generation (one rebalance, not one per member), and the delay is not cut short by the second one."""
    b = broker_cluster.add(0, **{**BROKER, "group.initial.rebalance.delay.ms": 1000})
    bs, g = b.bootstrap, "delayed"
    wait_until(lambda: _req(bs, FindCoordinatorRequest, FindCoordinatorResponse, 1, key=g,
                            key_type=0).error_code == 0, 15, "a coordinator")
    wait_until(lambda: _heartbeat(bs, g, 0, "x") != 14, 15, "the offsets partition to load")
    ids = [_join(bs, g).member_id for _ in range(3)]  # MEMBER_ID_REQUIRED: ids to join with
    started = time.monotonic()
    joins = []
    for member_id in ids:
        joins.append(_in_thread(_join, bs, g, member_id))
        time.sleep(0.3)
    for t, _ in joins:
        t.join(10)
    took = time.monotonic() - started
    results = [box[0] for _, box in joins]
    assert [r.error_code for r in results] == [0, 0, 0]
    assert {r.generation_id for r in results} == {1}, [r.generation_id for r in results]
    leader = next(r for r in results if r.leader == r.member_id)
    assert len(leader.members) == 3
    assert 1.0 <= took < 3.0, f"the first generation took {took:.2f}s"

