"""Replication: confluent-kafka produce throughput of 100-byte values to one partition, RF 1
acks=1, RF 3 acks=1 and RF 3 acks=all (msgs/s, CPU seconds per 1M messages of the leader and of a
follower), and failover: SIGKILL of the leader (zookeeper.session.timeout.ms 6000) and a controlled shutdown
(SIGTERM), each timed to the first acks=all produce the new leader acknowledges and to the first record
produced after the kill that a consumer (confluent-kafka) fetches.

Three broker processes on the shared environment's ZooKeeper (the shared broker is broker 0 and leads every
partition measured here; brokers 1 and 2 are started for this section and stopped after it).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import psutil

from bench.clients import confluent_produce
from bench.environment import Environment
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.testing.broker import topic_leaders
from metaq.testing.wait import wait_until

SESSION_MS = 6000
FAST_REPLICAS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
                 "zookeeper.session.timeout.ms": SESSION_MS}
# librdkafka's syslog level for the failover's clients: its lines about the connections the kill refuses
# (level 3 and 6) would bury the table
QUIET = 2


@dataclass
class ThroughputRow:
    setup: str
    messages: int
    seconds: float
    leader_cpu: float
    follower_cpu: float

    def cells(self) -> list[str]:
        per_m = 1e6 / self.messages
        return [self.setup, f"{self.messages:,}", f"{self.messages / self.seconds:,.0f}",
                f"{self.leader_cpu * per_m:.2f}", f"{self.follower_cpu * per_m:.2f}" if self.follower_cpu else "-"]


def _cpu(proc: psutil.Process) -> float:
    return float(sum(proc.cpu_times()[:2]))


def _producer(bootstrap: str, acks: Any, **extra: Any) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": acks,
                                     "enable.idempotence": False, **extra})


def _produce(bootstrap: str, topic: str, n: int, acks: Any) -> None:
    confluent_produce(bootstrap, topic, b"x" * 100, n, acks=acks)


def _topic(env: Environment, brokers: list[BrokerProcess], name: str, replicas: list[int]) -> str:
    create_topic(env.layout, name, 1, assignment={0: replicas},
                 config={"min.insync.replicas": "2"} if len(replicas) > 1 else {})
    for b in brokers:
        wait_until(lambda b=b: topic_leaders(b.bootstrap, name).get(0) == replicas[0], 30, f"{name} on {b.broker_id}")
    return name


def throughput(env: Environment, brokers: list[BrokerProcess], messages: int) -> list[ThroughputRow]:
    leader, follower = (psutil.Process(b.pid) for b in brokers[:2])
    rows = []
    for setup, replicas, acks in (("RF1 acks=1", [0], 1), ("RF3 acks=1", [0, 1, 2], 1),
                                  ("RF3 acks=all", [0, 1, 2], "all")):
        topic = _topic(env, brokers, f"repl-{setup.replace(' ', '-').replace('=', '')}", replicas)
        _produce(env.bootstrap, topic, 1000, acks)  # connections and metadata warm
        cpu0, cpu1, started = _cpu(leader), _cpu(follower), time.monotonic()
        _produce(env.bootstrap, topic, messages, acks)
        # the high watermark (min LEO of the ISR) reaches the end once the followers have everything
        wait_until(lambda topic=topic: _high_watermark(env.bootstrap, topic) == messages + 1000, 60, "followers")
        rows.append(ThroughputRow(setup, messages, time.monotonic() - started, _cpu(leader) - cpu0,
                                  _cpu(follower) - cpu1 if len(replicas) > 1 else 0.0))
        print(f"  {' | '.join(rows[-1].cells())}", flush=True)
    return rows


def _high_watermark(bootstrap: str, topic: str) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hw"})
    try:
        return int(c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


@dataclass
class FailoverTimes:
    """Seconds after the SIGKILL / SIGTERM of the leader."""

    how: str
    elected: float  # a new leader in ZooKeeper
    produced: float  # the first acks=all produce acknowledged
    fetched: float  # the first record produced after the kill, fetched by a consumer


def failover(env: Environment, brokers: list[BrokerProcess], how: str) -> FailoverTimes:
    """``how`` ("kill" or "sigterm") the leader of a fresh RF-3 topic while probes are produced (acks=all)
    and a confluent-kafka consumer, assigned to the partition, reads."""
    leader = brokers[2] if how == "kill" else brokers[1]  # started here, with the 6 s session
    order = [leader.broker_id] + [b.broker_id for b in brokers if b is not leader]
    topic = _topic(env, brokers, f"failover-{how}", order)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    p = _producer(bootstrap, "all", **{"retry.backoff.ms": 50, "message.timeout.ms": 60000,
                                       "topic.metadata.refresh.interval.ms": 500, "log_level": QUIET})
    p.produce(topic, b"warm", partition=0)
    assert p.flush(30) == 0
    c = _reader(bootstrap, topic)
    acked: list[float] = []
    fetched: list[float] = []
    try:
        wait_until(lambda: _read(c) == b"warm", 30, f"the consumer of {topic} to read the warm-up record")
        before = env.layout.partition_state(topic, 0)
        assert before is not None and before.leader == leader.broker_id, before
        started = time.monotonic()
        if how == "kill":
            leader.kill()
        else:
            assert leader.proc is not None
            leader.proc.send_signal(signal.SIGTERM)  # not stop(): it waits for the exit, and we time the move
        elected = 0.0
        while not (acked and fetched) and time.monotonic() - started < 60:
            state = env.layout.partition_state(topic, 0)
            if not elected and state is not None and state.leader not in (leader.broker_id, -1):
                elected = time.monotonic() - started
            if not acked:
                p.produce(topic, b"probe", partition=0,
                          on_delivery=lambda err, _m: acked.append(time.monotonic()) if err is None else None)
            p.poll(0.05)
            if not fetched and _read(c) == b"probe":  # every probe was produced after the kill
                fetched.append(time.monotonic())
        assert acked, f"no acks=all produce acknowledged within 60 s of the {how}"
        assert fetched, f"no record produced after the {how} fetched within 60 s"
    finally:
        c.close()
    p.flush(60)
    leader.stop()  # reaps the SIGTERMed broker (a no-op after the kill)
    leader.start()
    wait_until(lambda: sorted(env.layout.partition_state(topic, 0).isr) == [0, 1, 2], 60, "the ISR back")
    return FailoverTimes(how, elected, acked[0] - started, fetched[0] - started)


def _reader(bootstrap: str, topic: str) -> confluent_kafka.Consumer:
    """A consumer of partition 0 from its beginning that follows the leader quickly (short fetch wait and
    metadata refresh, as the producer's)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-failover",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 50,
                                  "topic.metadata.refresh.interval.ms": 500, "retry.backoff.ms": 50,
                                  "reconnect.backoff.max.ms": 200, "log_level": QUIET})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    return c


def _read(c: confluent_kafka.Consumer) -> bytes | None:
    """The value of the next record, if one is there within 50 ms (errors while the leader moves: None)."""
    msg = c.poll(0.05)
    if msg is None or msg.error() is not None:
        return None
    value = msg.value()
    return bytes(value) if value is not None else None


def run(env: Environment, messages: int) -> tuple[list[ThroughputRow], list[FailoverTimes]]:
    brokers = [env.broker]
    try:
        for i in (1, 2):
            brokers.append(BrokerProcess(env.zk, i, env.work_dir, log_level="WARNING",
                                         properties=FAST_REPLICAS).start())
        rows = throughput(env, brokers, messages)
        times = [failover(env, brokers, how) for how in ("kill", "sigterm")]
    finally:
        for b in brokers[1:]:
            b.stop()
    return rows, times


def tables(rows: list[ThroughputRow], times: list[FailoverTimes]) -> list[tuple[str, Any]]:
    base = rows[0].messages / rows[0].seconds
    header = ["setup", "messages", "msgs/s", "leader CPU s/1M", "follower CPU s/1M"]
    ratio = [[r.setup, "", f"{r.messages / r.seconds / base:.2f}x RF1 acks=1", "", ""] for r in rows[1:]]
    failovers = [[f"SIGKILL (session {SESSION_MS} ms)" if t.how == "kill" else "SIGTERM (controlled shutdown)",
                  f"{t.elected:.2f}", f"{t.produced:.2f}", f"{t.fetched:.2f}"] for t in times]
    return [("9. Replication: confluent-kafka produce, 100-byte values, one partition (target: RF3 acks=all "
             ">= 0.5x RF1 acks=1)", (header, [r.cells() for r in rows] + ratio)),
            ("   Failover of the leader (targets: SIGKILL <= session + 1 s; controlled shutdown <= 1 s)",
             (["how", "new leader after s", "first acks=all produce after s", "first fetched record after s"],
              failovers))]
