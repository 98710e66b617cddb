"""What TLS and SASL cost: confluent-kafka produce and fetch over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256),
and the time of a full SASL/SCRAM authentication.

    python -m bench.security [--messages 100000]      # own ZooKeeper and one broker with the three listeners

Throughput rows: one producer writes ``--messages`` values of 100 bytes (and a quarter as many of 1 KiB) to a
fresh one-partition topic through the listener, then one consumer reads them all back from offset 0; msgs/s,
MB/s, and the ratio to PLAINTEXT. Under TLS the broker cannot use sendfile: record slices are read (preadv)
into one 64 KiB buffer per batch and encrypted from it (metaq/broker/network.py, ``_send_fetch``).

Handshake rows: raw socket, from connect to SaslAuthenticate success (SaslHandshake v1 + two
SaslAuthenticate round trips), SCRAM-SHA-256 and -512 at 4096 iterations, client PBKDF2 included (the broker's
own work is one HMAC chain, its PBKDF2 was done by ``metaq users add``); median and p99 of ``--handshakes``.
"""

from __future__ import annotations

import argparse
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from bench.clients import send_all
from bench.environment import environment
from bench.tables import print_table
from metaq.broker.auth.scram import client_final
from metaq.broker.process import BrokerProcess, free_port
from metaq.broker.topics import create_topic
from metaq.testing.broker import call, topic_leaders
from metaq.testing.certs import make_certs
from metaq.testing.wait import wait_until

USER, PASSWORD = "bench", "bench-secret"


def _conf(protocol: str, ca: Path) -> dict[str, str]:
    conf = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(ca)
    if protocol.startswith("SASL"):
        conf.update({"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def _produce(bootstrap: str, conf: dict[str, str], topic: str, count: int, size: int) -> float:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1000000,
                                         "queue.buffering.max.messages": 1000000, **conf})
    value = b"x" * size
    producer.list_topics(topic, timeout=30)  # connect and authenticate outside the timing
    started = time.perf_counter()
    send_all(producer, topic, value, count)
    return time.perf_counter() - started


def _fetch(bootstrap: str, conf: dict[str, str], topic: str, count: int) -> float:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-security",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 50, **conf})
    consumer.list_topics(topic, timeout=30)
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        for msg in consumer.consume(min(10000, count - got), 1.0):
            assert msg.error() is None, msg.error()
            got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def _scram_login(port: int, mechanism: str) -> float:
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert call(sock, SaslHandshakeRequest[1](mechanism=mechanism), SaslHandshakeResponse, 1, 1).error_code == 0
        bare = f"n={USER},r={secrets.token_urlsafe(18)}"
        first = call(sock, SaslAuthenticateRequest[1](auth_bytes=f"n,,{bare}".encode()),
                      SaslAuthenticateResponse, 1, 2)
        assert first.error_code == 0, first.error_message
        final = client_final(mechanism, PASSWORD, bare, first.auth_bytes.decode())
        done = call(sock, SaslAuthenticateRequest[1](auth_bytes=final.encode()), SaslAuthenticateResponse, 1, 3)
        assert done.error_code == 0, done.error_message
    return time.perf_counter() - started


def _listeners(ports: dict[str, int]) -> Callable[[str, BrokerProcess, Path], None]:
    """Configure the bench broker with the four listeners, TLS material and a SCRAM user."""

    def configure(zk: str, broker: BrokerProcess, work: Path) -> None:
        certs = make_certs(work / "certs")
        ports.update({"PLAINTEXT": broker.port, "SSL": free_port(), "SASL_PLAINTEXT": free_port(),
                      "SASL_SSL": free_port()})
        broker.properties.update({
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.certificate.location": certs.server_cert, "ssl.key.location": certs.server_key,
        })
        (work / "pw").write_text(PASSWORD)
        subprocess.run([sys.executable, "-m", "metaq", "users", "add", USER, "--iterations", "4096",
                        "--password-file", str(work / "pw"), "--zookeeper", zk], check=True, capture_output=True)

    return configure


def run(messages: int, handshakes: int) -> None:
    ports: dict[str, int] = {}
    with environment(_listeners(ports)) as env:
        ca = env.work_dir / "certs" / "ca.pem"
        rows = []
        base: dict[tuple[str, int], float] = {}
        for size, count in ((100, messages), (1024, max(1, messages // 4))):
            for protocol in ("PLAINTEXT", "SSL", "SASL_SSL"):
                topic = f"sec-{protocol.lower()}-{size}"
                create_topic(env.layout, topic, 1)
                wait_until(lambda t=topic: len(topic_leaders(env.bootstrap, t)) == 1, 15, f"topic {topic}")
                bootstrap = f"127.0.0.1:{ports[protocol]}"
                conf = _conf(protocol, ca)
                for job, seconds in (("produce", _produce(bootstrap, conf, topic, count, size)),
                                     ("fetch", _fetch(bootstrap, conf, topic, count))):
                    rate = count / seconds
                    base.setdefault((job, size), rate)
                    rows.append([protocol, job, str(size), f"{count:,}", f"{rate:,.0f}", f"{rate * size / 1e6:,.1f}",
                                 f"{rate / base[(job, size)]:.2f}"])
                    print("  " + " | ".join(rows[-1]), flush=True)
        print_table(["listener", "job", "bytes", "messages", "msgs/s", "MB/s", "vs PLAINTEXT"], rows,
                    "confluent-kafka throughput by listener")
        hs_rows = []
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            times = sorted(_scram_login(ports["SASL_PLAINTEXT"], mechanism) * 1000 for _ in range(handshakes))
            hs_rows.append([mechanism, str(handshakes), f"{statistics.median(times):.2f}",
                            f"{times[max(0, int(len(times) * 0.99) - 1)]:.2f}"])
        print_table(["mechanism", "logins", "median ms", "p99 ms"], hs_rows,
                    "full SASL/SCRAM authentication (connect + SaslHandshake + 2 SaslAuthenticate, 4096 iterations)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100000)
    parser.add_argument("--handshakes", type=int, default=50)
    args = parser.parse_args()
    run(args.messages, args.handshakes)


if __name__ == "__main__":
    main()
