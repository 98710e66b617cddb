"""metaq's clients over TLS and SASL/SCRAM against real Apache Kafka brokers configured by Kafka's own property
names, with SCRAM credentials created by Kafka's own ``kafka-configs`` (``kafka.admin.ConfigCommand --zookeeper``,
2.8.2) — the same ZooKeeper nodes (`/config/users/<user>`) the metaq broker reads (test_kafka_java_peers.py logs in
to a metaq broker with a user made this way).

Each version runs one broker with four listeners (PLAINTEXT for the harness, SSL, SASL_PLAINTEXT, SASL_SSL); its
certificates are PEM files made at test time (Kafka reads PEM key stores since 2.7, KIP-651). A metaq client finds
its listener in the broker's registration by ``security.protocol``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metaq.broker.process import free_port
from metaq.consumer import Consumer
from metaq.errors import SaslAuthenticationFailedError
from metaq.producer import Producer
from metaq.testing.apache_kafka import ApacheKafkaBroker
from metaq.testing.certs import Certs, make_certs
from metaq.testing.group import drain_values
from metaq.testing.kafka_fixtures import kafka_params
from metaq.testing.kafka_tools import run_kafka_class
from metaq.testing.kafka_versions import V2_8, V3_9
from metaq.testing.zookeeper import ZooKeeperEndpoint, delete_chroot

USER, PASSWORD = "kafka-user", "kafka-user-secret"
WRONG = "not-the-password"
KEY_PASSWORD = "test-key-password"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SecuredKafka:
    """A real Kafka broker with a listener per security protocol, and the SCRAM user made by ConfigCommand."""

    broker: ApacheKafkaBroker
    certs: Certs

    def client(self, protocol: str, mechanism: str | None = None, password: str = PASSWORD) -> dict[str, str]:
        """librdkafka-style client keys, as metaq's consumer and producer take them."""
        props = {"security.protocol": protocol}
        if protocol.endswith("SSL"):
            props["ssl.ca.location"] = str(self.certs.ca)
        if mechanism:
            props.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": password})
        return props


def _pem_key_store(certs: Certs, directory: Path) -> Path:
    """The server's key, encrypted (Kafka 2.8 requires ``ssl.key.password`` with a PEM key store; a PBES1 scheme
    Java decrypts), followed by its certificate: one PEM key store file."""
    encrypted = directory / "server-key-encrypted.pem"
    subprocess.run(["openssl", "pkcs8", "-topk8", "-in", str(certs.server_key), "-out", str(encrypted),
                    "-v1", "PBE-SHA1-3DES", "-passout", f"pass:{KEY_PASSWORD}"], check=True, capture_output=True)
    store = directory / "server-keystore.pem"
    store.write_text(encrypted.read_text() + certs.server_cert.read_text())
    return store


def _properties(certs: Certs, key_store: Path, ports: dict[str, int]) -> dict[str, str]:
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    props = {"listeners": listeners, "advertised.listeners": listeners,
             "inter.broker.listener.name": "PLAINTEXT",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": str(key_store), "ssl.key.password": KEY_PASSWORD,
             "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca), "ssl.client.auth": "none",
             "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"}
    for listener in ("sasl_plaintext", "sasl_ssl"):
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            props[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = SCRAM_LOGIN
    return props


def _add_scram_user(zk_connect: str) -> None:
    """Kafka 2.8.2's ``kafka-configs --zookeeper`` writes the credentials and a change notification."""
    done = run_kafka_class(V2_8, "kafka.admin.ConfigCommand", [
        "--zookeeper", zk_connect, "--alter", "--entity-type", "users", "--entity-name", USER,
        "--add-config", f"SCRAM-SHA-256=[iterations=8192,password={PASSWORD}],SCRAM-SHA-512=[password={PASSWORD}]"])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def secured(kafka_zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Callable[[str], SecuredKafka]]:
    certs_dir = tmp_path_factory.mktemp("kafka-certs")
    certs = make_certs(certs_dir)
    key_store = _pem_key_store(certs, certs_dir)
    started: dict[str, SecuredKafka] = {}

    def get(version: str) -> SecuredKafka:
        if version not in started:
            ports = {"PLAINTEXT": free_port(), **{protocol: free_port() for protocol in PROTOCOLS}}
            broker = ApacheKafkaBroker(version, zk_hosts=kafka_zk_server.connect_string,
                                       base_dir=tmp_path_factory.mktemp(f"kafka-secure-{version}"),
                                       port=ports["PLAINTEXT"], properties=_properties(certs, key_store, ports))
            started[version] = SecuredKafka(broker.start(), certs)
            _add_scram_user(broker.zk_connect)
        return started[version]

    yield get
    for secured_kafka in started.values():
        secured_kafka.broker.stop()
        delete_chroot(kafka_zk_server, secured_kafka.broker.chroot)


def _produce(kafka: SecuredKafka, topic: str, n: int, props: dict[str, str]) -> dict[tuple[int, int], bytes]:
    with Producer({"zookeeper.connect": kafka.broker.zk_connect, "linger.ms": 2, **props}) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 2) for i in range(n)]
        producer.flush()
        return {(f.result().partition, f.result().offset): b"v%d" % i for i, f in enumerate(futures)}


def _consume(kafka: SecuredKafka, group: str, topic: str, expected: int, props: dict[str, str],
             **more: object) -> dict[tuple[int, int], bytes]:
    config: dict[str, Any] = {"group.id": group, "zookeeper.connect": kafka.broker.zk_connect,
                              "consumer.timeout.ms": 3000, "auto.offset.reset": "smallest", **props, **more}
    with Consumer(config) as consumer:
        [stream] = consumer.create_message_streams({topic: 1})[topic]
        got = drain_values(stream, expected)
        consumer.commit_offsets()
    return got


CASES = [("SSL", None, "zookeeper"), ("SASL_PLAINTEXT", "SCRAM-SHA-512", "zookeeper"),
         ("SASL_SSL", "SCRAM-SHA-256", "kafka")]


@pytest.mark.parametrize("version", kafka_params("metaq producer and consumer group over TLS and SASL/SCRAM "
                                                 "(credentials from kafka-configs --zookeeper)", (V3_9, V2_8)))
def test_metaq_clients_over_every_secured_listener(secured: Callable[[str], SecuredKafka], version: str) -> None:
    kafka = secured(version)
    for protocol, mechanism, storage in CASES:
        props = kafka.client(protocol, mechanism)
        topic = f"secure-{protocol.lower()}"
        kafka.broker.create_topic(topic, partitions=2)
        sent = _produce(kafka, topic, 40, props)
        # offsets.storage=kafka: the offsets channel reaches the real coordinator over the same listener
        got = _consume(kafka, f"g-{topic}", topic, len(sent), props, **{"offsets.storage": storage})
        assert got == sent, f"{protocol} {mechanism}: read {len(got)} of {len(sent)}"


@pytest.mark.parametrize("version", kafka_params("a refused SCRAM login is fatal, the password never shown",
                                                 (V3_9, V2_8)))
def test_a_wrong_password_is_fatal(secured: Callable[[str], SecuredKafka], version: str) -> None:
    kafka = secured(version)
    kafka.broker.create_topic("secure-wrong-password")
    bad = kafka.client("SASL_SSL", "SCRAM-SHA-256", password=WRONG)
    with Producer({"zookeeper.connect": kafka.broker.zk_connect, **bad}) as producer:
        future = producer.send("secure-wrong-password", b"never", partition=0)
        with pytest.raises(SaslAuthenticationFailedError) as raised:
            future.result(timeout=60)
    assert WRONG not in str(raised.value) and PASSWORD not in str(raised.value)
