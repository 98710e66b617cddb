"""The cost of TLS and SASL for the metaq consumer: fetch throughput over PLAINTEXT, SSL and SASL_SSL (the metaq
consumer's stream iterator and, for comparison, confluent-kafka, in-process, one after the other on the same
pre-produced topic), and the time to open a connection (TCP, TLS handshake, ApiVersions, SASL) with metaq's client.
bench/security.py has confluent-kafka's produce and fetch per listener and the raw SCRAM login time.

    python -m bench.consumer_security [--messages 300000]      # standalone (own ZooKeeper and broker)

One broker serves the three listeners at once (certificates made with openssl at run time). Rates count the
messages after the first delivery, as in bench/consumer.py; ``ratio`` is the rate over the same client's
PLAINTEXT rate (the TLS cost). Under TLS the broker cannot use sendfile, and metaq's client decrypts with
``recv_into`` straight into its frame buffers (metaq/client/frame_reader.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka

from bench.clients import produce
from bench.environment import environment
from bench.tables import print_table
from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.consumer import Consumer
from metaq.testing.broker import topic_leaders
from metaq.testing.certs import make_certs
from metaq.testing.secure import SecureBroker, secure_broker
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

VALUE = b"x" * 100
PARTITIONS = 4
USER, PASSWORD = "bench", "bench-secret"


@dataclass
class Rate:
    protocol: str
    client: str
    messages: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


@dataclass
class Secure:
    zk: str
    layout: ZkLayout
    broker: SecureBroker

    def props(self, protocol: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
        return self.broker.client_properties(protocol, mechanism, USER, PASSWORD)

    def port(self, protocol: str) -> int:
        return self.broker.ports[protocol]


@contextmanager
def secure_environment() -> Iterator[Secure]:
    """bench.environment's ZooKeeper and broker, the broker with SSL and SASL_SSL listeners too."""
    made: list[SecureBroker] = []

    def configure(zk: str, broker: BrokerProcess, work: Path) -> None:
        made.append(secure_broker(zk, work, make_certs(work / "certs"), plain_users={USER: PASSWORD},
                                  listeners=("SSL", "SASL_SSL"), process=broker))

    with environment(configure) as env:
        made[0].add_scram_user(USER, PASSWORD)
        yield Secure(env.zk, env.layout, made[0])


def prepare(env: Secure, messages: int) -> str:
    topic = f"bench-security-{uuid.uuid4().hex[:8]}"
    create_topic(env.layout, topic, PARTITIONS)
    bootstrap = f"127.0.0.1:{env.port('PLAINTEXT')}"
    wait_until(lambda: len(topic_leaders(bootstrap, topic)) == PARTITIONS, 30, f"{topic} has leaders")
    produce({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
             "queue.buffering.max.messages": 1000000}, topic, VALUE, messages, PARTITIONS)
    return topic


def _measured(protocol: str, client: str, messages: int, deliver: Iterator[int]) -> Rate:
    count = first = 0
    t0 = c0 = 0.0
    for n in deliver:
        if count == 0:
            t0, c0, first = time.perf_counter(), time.process_time(), n
        count += n
        if count >= messages:
            break
    return Rate(protocol, client, count - first, time.perf_counter() - t0, time.process_time() - c0)


def metaq_rate(env: Secure, topic: str, messages: int, protocol: str) -> Rate:
    config = {"group.id": f"bench-{uuid.uuid4().hex[:8]}", "zookeeper.connect": env.zk,
              "auto.offset.reset": "smallest", "consumer.timeout.ms": 30000, "auto.commit.enable": "false",
              "metrics.enabled": "false", **env.props(protocol)}
    with Consumer(config) as consumer:
        [stream] = consumer.create_message_streams({topic: 1})[topic]

        def deliver() -> Iterator[int]:
            for message in stream:
                assert len(message.value) == len(VALUE)
                yield 1

        return _measured(protocol, "metaq stream", messages, deliver())


def confluent_rate(env: Secure, topic: str, messages: int, protocol: str) -> Rate:
    conf = {"bootstrap.servers": f"127.0.0.1:{env.port(protocol)}", "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **env.props(protocol)}
    conf["sasl.mechanisms"] = conf.pop("sasl.mechanism", "PLAIN")
    if protocol == "PLAINTEXT" or protocol == "SSL":
        conf.pop("sasl.mechanisms")
    consumer = confluent_kafka.Consumer(conf)
    consumer.subscribe([topic])

    def deliver() -> Iterator[int]:
        while True:
            batch = consumer.consume(1000, 5.0)
            for message in batch:
                if message.error():
                    raise RuntimeError(str(message.error()))
            if batch:
                yield len(batch)

    try:
        return _measured(protocol, "confluent-kafka", messages, deliver())
    finally:
        consumer.close()


def handshake_ms(env: Secure, protocol: str, mechanism: str, reps: int) -> float:
    """Median time of ConnectionSettings.open (TCP + TLS + ApiVersions + SASL) to the broker."""
    settings = ConnectionSettings(security=SecurityConfig.from_properties(env.props(protocol, mechanism)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        conn = settings.open("127.0.0.1", env.port(protocol))
        times.append(time.perf_counter() - t0)
        conn.close()
    return statistics.median(times) * 1000


def run(messages: int = 300_000, repeat: int = 2, handshakes: int = 20) -> tuple[list[Rate], list[list[str]]]:
    with secure_environment() as env:
        topic = prepare(env, messages)
        rates = []
        for _ in range(repeat):
            for protocol in ("PLAINTEXT", "SSL", "SASL_SSL"):
                for measure in (metaq_rate, confluent_rate):
                    rate = measure(env, topic, messages, protocol)
                    print(f"  {protocol} {rate.client}: {rate.rate:,.0f} msgs/s", flush=True)
                    rates.append(rate)
        connects = [[protocol if protocol == "PLAINTEXT" or protocol == "SSL" else f"{protocol} {mechanism}",
                     f"{handshake_ms(env, protocol, mechanism, handshakes):.2f}"]
                    for protocol, mechanism in (("PLAINTEXT", ""), ("SSL", ""), ("SASL_SSL", "PLAIN"),
                                                ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"))]
    return rates, connects


def print_tables(rates: list[Rate], connects: list[list[str]]) -> None:
    best: dict[tuple[str, str], Rate] = {}
    for r in rates:
        key = (r.protocol, r.client)
        if key not in best or r.rate > best[key].rate:
            best[key] = r
    rows = [[client, protocol, f"{r.rate:,.0f}", f"{r.rate / best[('PLAINTEXT', client)].rate:.2f}",
             f"{r.cpu / r.messages * 1e6:.1f}"] for (protocol, client), r in sorted(best.items(), key=lambda kv: (
                 kv[0][1], ("PLAINTEXT", "SSL", "SASL_SSL").index(kv[0][0])))]
    print_table(["client", "security.protocol", "msgs/s", "ratio to PLAINTEXT", "client CPU s/1M"], rows,
                "Consumer throughput by security protocol (100-byte values, best of the runs)")
    print_table(["metaq connection open (TCP, TLS, ApiVersions, SASL)", "median ms"], connects,
                "Connection set-up with metaq's client")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print_tables(*run(args.messages, args.repeat))


if __name__ == "__main__":
    main()
