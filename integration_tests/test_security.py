"""Listeners, TLS and SASL against real broker processes and real clients (kcat, confluent-kafka,
kafka-python). One broker with every kind of listener serves the whole module (certificates made with
openssl at test time, see metaq/testing/certs.py)."""

from __future__ import annotations

import contextlib
import gc
import json
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from integration_tests import peers
from metaq.broker.process import BrokerProcess
from metaq.testing.broker import call, read_frame, request
from metaq.testing.certs import Certs, make_certs
from metaq.testing.secure import SecureBroker, secure_broker
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import own_chroot
from metaq.zkclient import connect as zk_connect_client
from zk_layout import ZkLayout

# kafka-python (whose clients several tests here make fail on purpose: wrong passwords, refused certificates) leaves
# the sockets of failed connection attempts to the garbage collector; they are collected at the end of this module
pytestmark = pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")


@pytest.fixture(scope="module", autouse=True)
def _collect_client_leftovers() -> Iterator[None]:
    yield
    gc.collect()


N = 20


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure(zk_server: Any, certs: Certs, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[SecureBroker]:
    with own_chroot(zk_server, "metaq-test") as connect:
        data_dir = tmp_path_factory.mktemp("secure")
        # At the level `metaq broker start` logs at by default: failed logins must show there (WARNING).
        broker = secure_broker(connect, data_dir, certs,
                               plain_users={"alice": "alice-secret", "bob": "b0b:with:colons"},
                               process=BrokerProcess(connect, 0, data_dir, log_level="WARNING"))
        with broker.process:
            yield broker


def _ssl_conf(certs: Certs) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}


def _topic(secure: SecureBroker, name: str, partitions: int = 1) -> str:
    client = zk_connect_client(secure.zk_connect)
    try:
        from metaq.broker.topics import create_topic
        create_topic(ZkLayout(client), name, partitions)
    finally:
        client.stop()
        client.close()
    wait_until(lambda: _leaders(secure.bootstrap("PLAINTEXT"), name) == partitions, 15, f"topic {name} visible")
    return name


def _leaders(bootstrap: str, topic: str) -> int:
    req = MetadataRequest[4](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                             allow_auto_topic_creation=False)
    resp = request(bootstrap, req, MetadataResponse, 4)
    return sum(1 for t in resp.topics for p in t.partitions if p.error_code == 0)


def _confluent_roundtrip(bootstrap: str, topic: str, conf: dict[str, str]) -> list[bytes]:
    items = [(b"k%d" % i, b"v%d" % i, 0) for i in range(N)]
    acked = peers.confluent_produce(bootstrap, topic, 0, [(k, v, 1700000000000 + i) for i, (k, v, _) in
                                                          enumerate(items)], **conf)
    assert [m.offset for m in acked][-N:] == sorted(m.offset for m in acked)[-N:]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100, **conf})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, acked[0].offset)])
        got = peers._confluent_read(consumer, N, 30)
    finally:
        consumer.close()
    return [m.value for m in got]


def _kcat(bootstrap: str, conf: dict[str, str], *args: str, data: bytes | None = None) -> bytes:
    extra = [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]
    done = subprocess.run([peers.KCAT, "-b", bootstrap, *extra, *args], input=data, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def _kcat_roundtrip(bootstrap: str, topic: str, conf: dict[str, str]) -> list[str]:
    _kcat(bootstrap, conf, "-P", "-t", topic, "-p", "0", data=b"".join(b"kcat-%d\n" % i for i in range(N)))
    out = _kcat(bootstrap, conf, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%s\\n")
    return out.decode().splitlines()


def _kafka_python_roundtrip(bootstrap: str, topic: str, conf: dict[str, Any]) -> list[bytes]:
    items = [(b"k%d" % i, b"kp-%d" % i, 1700000000000 + i) for i in range(N)]
    acked = peers.kafka_python_produce(bootstrap, topic, 0, items, **conf)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                   fetch_max_wait_ms=100, consumer_timeout_ms=10000, **conf)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, acked[0].offset)
        return [r.value for r in peers.kafka_python_read(consumer, N)]
    finally:
        consumer.close()


# ---- listeners ---------------------------------------------------------------------------------------


def test_registration_lists_every_endpoint_as_kafka_does(secure: SecureBroker) -> None:
    client = zk_connect_client(secure.zk_connect)
    try:
        data, _ = client.get("/brokers/ids/0")
    finally:
        client.stop()
        client.close()
    node = json.loads(data)
    assert node["endpoints"] == [f"{name}://127.0.0.1:{port}" for name, port in secure.ports.items()]
    assert node["listener_security_protocol_map"] == {name: name for name in secure.ports}
    assert (node["host"], node["port"]) == ("127.0.0.1", secure.ports["PLAINTEXT"])


def test_metadata_answers_the_endpoints_of_the_listener_used(secure: SecureBroker) -> None:
    resp = request(secure.bootstrap("PLAINTEXT"), MetadataRequest[1](topics=[]), MetadataResponse, 1)
    assert [(b.node_id, b.port) for b in resp.brokers] == [(0, secure.ports["PLAINTEXT"])]
    # over SSL, kafka-python's admin metadata names the SSL port
    admin = kafka.KafkaAdminClient(bootstrap_servers=secure.bootstrap("SSL"), security_protocol="SSL",
                                   ssl_cafile=str(secure.certs.ca))
    try:
        ports = {b["port"] for b in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()
    assert ports == {secure.ports["SSL"]}


def test_find_coordinator_answers_the_listener_used(secure: SecureBroker) -> None:
    context = ssl.create_default_context(cafile=str(secure.certs.ca))
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=30) as plain, \
            context.wrap_socket(plain, server_hostname="localhost") as tls:
        def coordinator() -> Any:
            return call(tls, FindCoordinatorRequest[1](key="g-ssl", key_type=0), FindCoordinatorResponse, 1)
        wait_until(lambda: coordinator().error_code == 0, 30, "the offsets topic created")
        resp = coordinator()
    assert (resp.host, resp.port) == ("127.0.0.1", secure.ports["SSL"])


# ---- TLS ---------------------------------------------------------------------------------------------


def test_ssl_produce_and_consume_with_every_client(secure: SecureBroker) -> None:
    bootstrap = secure.bootstrap("SSL")
    conf = _ssl_conf(secure.certs)
    assert _confluent_roundtrip(bootstrap, _topic(secure, "ssl-confluent"), conf) == [b"v%d" % i for i in range(N)]
    assert _kcat_roundtrip(bootstrap, _topic(secure, "ssl-kcat"), conf) == [f"kcat-{i}" for i in range(N)]
    kp = {"security_protocol": "SSL", "ssl_cafile": str(secure.certs.ca)}
    got = _kafka_python_roundtrip(bootstrap, _topic(secure, "ssl-kafka-python"), kp)
    assert got == [b"kp-%d" % i for i in range(N)]


def test_large_fetch_over_ssl_is_complete(secure: SecureBroker) -> None:
    """Slices above the sendfile threshold take the TLS batch path and arrive whole."""
    topic = _topic(secure, "ssl-large")
    value = bytes(range(256)) * 1024  # 256 KiB
    peers.confluent_produce(secure.bootstrap("PLAINTEXT"), topic, 0, [(b"k", value, 0)] * 8,
                            **{"message.max.bytes": 2000000})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": secure.bootstrap("SSL"), "group.id": "g-large",
                                         **_ssl_conf(secure.certs)})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = peers._confluent_read(consumer, 8, 30)
    finally:
        consumer.close()
    assert [m.value for m in got] == [value] * 8


def test_plaintext_client_on_the_ssl_port_is_refused_and_broker_serves_on(secure: SecureBroker) -> None:
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x0c" + b"\x00" * 12)
        s.settimeout(10)
        with contextlib.suppress(OSError):  # the TLS server answers garbage with an alert and closes
            while s.recv(100):
                pass
    assert _leaders(secure.bootstrap("PLAINTEXT"), _topic(secure, "after-garbage")) == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_client_certificate_required(zk_connect: str, tmp_path: Path, certs: Certs) -> None:
    broker = secure_broker(zk_connect, tmp_path, certs, plain_users={}, listeners=("SSL",),
                           **{"ssl.client.auth": "required"})
    process, port = broker.process, broker.ports["SSL"]
    with process:
        bootstrap = broker.bootstrap("SSL")
        meta_conf = {"bootstrap.servers": bootstrap, **_ssl_conf(certs)}
        without = AdminClient(meta_conf)
        with pytest.raises(confluent_kafka.KafkaException):
            without.list_topics(timeout=5)
        with_cert = AdminClient({**meta_conf, "ssl.certificate.location": str(certs.client_cert),
                                                       "ssl.key.location": str(certs.client_key)})
        assert with_cert.list_topics(timeout=15).brokers[0].port == port
        assert "Failed authentication with 127.0.0.1" in process.log_tail(200)
        assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in process.log_tail(200)


# ---- SASL --------------------------------------------------------------------------------------------

SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret-1"


def _users_cli(secure: SecureBroker, *args: str, password: str | None = None, tmp: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    extra: list[str] = []
    if password is not None:
        assert tmp is not None
        secret = tmp / f"pw-{uuid.uuid4().hex}"
        secret.write_text(password + "\n")
        extra = ["--password-file", str(secret)]
    return subprocess.run([sys.executable, "-m", "metaq", "users", *args, *extra, "--zookeeper", secure.zk_connect],
                          capture_output=True, text=True, timeout=60)


def _sasl_conf(protocol: str, mechanism: str, user: str, password: str, certs: Certs) -> dict[str, str]:
    conf = {"security.protocol": protocol, "sasl.mechanisms": mechanism, "sasl.username": user,
            "sasl.password": password}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(certs.ca)
    return conf


def _kafka_python_conf(librdkafka: dict[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = {"security_protocol": librdkafka["security.protocol"],
                            "sasl_mechanism": librdkafka["sasl.mechanisms"],
                            "sasl_plain_username": librdkafka["sasl.username"],
                            "sasl_plain_password": librdkafka["sasl.password"]}
    if "ssl.ca.location" in librdkafka:
        conf["ssl_cafile"] = librdkafka["ssl.ca.location"]
    return conf


def _can_login(bootstrap: str, conf: dict[str, str]) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    try:
        admin.list_topics(timeout=5)
        return True
    except confluent_kafka.KafkaException:
        return False


@pytest.fixture(scope="module")
def scram_user(secure: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> str:
    done = _users_cli(secure, "add", SCRAM_USER, "--iterations", "4096", password=SCRAM_PASSWORD,
                      tmp=tmp_path_factory.mktemp("pw"))
    assert done.returncode == 0, done.stderr
    assert SCRAM_PASSWORD not in done.stdout + done.stderr
    conf = _sasl_conf("SASL_PLAINTEXT", "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD, secure.certs)
    wait_until(lambda: _can_login(secure.bootstrap("SASL_PLAINTEXT"), conf), 30, "SCRAM user usable")
    return SCRAM_USER


def test_users_cli_writes_kafka_format_and_lists(secure: SecureBroker, scram_user: str) -> None:
    client = zk_connect_client(secure.zk_connect)
    try:
        node = json.loads(client.get(f"/config/users/{scram_user}")[0])
        changes = [json.loads(client.get(f"/config/changes/{c}")[0]) for c in client.get_children("/config/changes")]
    finally:
        client.stop()
        client.close()
    assert node["version"] == 1 and set(node["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    fields = dict(part.split("=", 1) for part in node["config"]["SCRAM-SHA-256"].split(","))
    assert list(fields) == ["salt", "stored_key", "server_key", "iterations"] and fields["iterations"] == "4096"
    assert SCRAM_PASSWORD not in json.dumps(node)
    assert {"version": 2, "entity_path": f"users/{scram_user}"} in changes
    listed = _users_cli(secure, "list", "--json")
    assert {"user": scram_user, "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]} in json.loads(listed.stdout)["users"]


@pytest.mark.parametrize(("protocol", "mechanism"), [
    ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN"),
])
def test_sasl_produce_and_consume_with_every_client(secure: SecureBroker, scram_user: str, protocol: str,
                                                    mechanism: str) -> None:
    user, password = ("bob", "b0b:with:colons") if mechanism == "PLAIN" else (scram_user, SCRAM_PASSWORD)
    conf = _sasl_conf(protocol, mechanism, user, password, secure.certs)
    bootstrap = secure.bootstrap(protocol)
    tag = f"{protocol}-{mechanism}".lower()
    assert _confluent_roundtrip(bootstrap, _topic(secure, f"c-{tag}"), conf) == [b"v%d" % i for i in range(N)]
    assert _kcat_roundtrip(bootstrap, _topic(secure, f"k-{tag}"), conf) == [f"kcat-{i}" for i in range(N)]
    got = _kafka_python_roundtrip(bootstrap, _topic(secure, f"p-{tag}"), _kafka_python_conf(conf))
    assert got == [b"kp-%d" % i for i in range(N)]


def _failed_logins(secure: SecureBroker) -> int:
    return secure.process.log_path.read_text(errors="replace").count("Failed authentication with")


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "not-alice-secret"), ("PLAIN", "mallory", "mallory-pw-1"),
    ("SCRAM-SHA-256", SCRAM_USER, "carol-wrong-pw"), ("SCRAM-SHA-512", "mallory", "mallory-pw-2"),
])
def test_bad_credentials_are_refused_and_others_still_served(secure: SecureBroker, scram_user: str,
                                                             mechanism: str, user: str, password: str) -> None:
    before = _failed_logins(secure)
    bootstrap = secure.bootstrap("SASL_PLAINTEXT")
    bad = _sasl_conf("SASL_PLAINTEXT", mechanism, user, password, secure.certs)
    assert not _can_login(bootstrap, bad)
    wait_until(lambda: _failed_logins(secure) > before, 10, "the refusal logged")
    assert password not in secure.process.log_path.read_text(errors="replace")
    good = _sasl_conf("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", secure.certs)
    assert _can_login(bootstrap, good)


# kafka-python does not close its client's wake-up socket pair when its constructor fails: collected here
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
def test_kafka_python_wrong_scram_password_is_refused(secure: SecureBroker, scram_user: str) -> None:
    bad = _sasl_conf("SASL_PLAINTEXT", "SCRAM-SHA-512", scram_user, "wrong", secure.certs)
    producer = None
    with pytest.raises(kafka.errors.KafkaError):  # kafka-python gives up bootstrapping, it does not hang
        producer = kafka.KafkaProducer(bootstrap_servers=secure.bootstrap("SASL_PLAINTEXT"),
                                       **_kafka_python_conf(bad), max_block_ms=5000)
        producer.partitions_for("never")
    if producer is not None:
        producer.close(timeout=1)
    gc.collect()


class _Raw:
    """One open socket speaking raw requests (kafka-python's codec)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def call(self, req: Any, response_cls: Any, version: int) -> Any:
        return call(self.sock, req, response_cls, version)

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def test_request_before_authentication_closes_the_connection(secure: SecureBroker) -> None:
    raw = _Raw(secure.ports["SASL_PLAINTEXT"])
    try:
        versions = raw.call(ApiVersionsRequest[0](), ApiVersionsResponse, 0)  # allowed before authentication
        ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert ranges[17] == (0, 1) and ranges[36] == (0, 2)
        req = MetadataRequest[1](topics=[])
        req.with_header(correlation_id=2, client_id="raw")
        raw.sock.sendall(req.encode(header=True, framed=True))
        assert raw.closed()
    finally:
        raw.close()
    wait_until(lambda: "METADATA request before SASL authentication" in secure.process.log_tail(400), 10,
               "the refusal logged")


def test_disabled_mechanism_is_answered_33_and_closed(secure: SecureBroker) -> None:
    raw = _Raw(secure.ports["SASL_PLAINTEXT"])
    try:
        resp = raw.call(SaslHandshakeRequest[1](mechanism="GSSAPI"), SaslHandshakeResponse, 1)
        assert resp.error_code == 33
        assert resp.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert raw.closed()
    finally:
        raw.close()


def test_wrong_password_answers_58_with_a_message(secure: SecureBroker) -> None:
    raw = _Raw(secure.ports["SASL_PLAINTEXT"])
    try:
        assert raw.call(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse, 1).error_code == 0
        resp = raw.call(SaslAuthenticateRequest[1](auth_bytes=b"\0alice\0nope"), SaslAuthenticateResponse, 1)
        assert resp.error_code == 58 and "Invalid username or password" in resp.error_message
        assert raw.closed()
    finally:
        raw.close()


def test_handshake_v0_then_raw_token(secure: SecureBroker) -> None:
    raw = _Raw(secure.ports["SASL_PLAINTEXT"])
    try:
        assert raw.call(SaslHandshakeRequest[0](mechanism="PLAIN"), SaslHandshakeResponse, 0).error_code == 0
        token = b"\0alice\0alice-secret"
        raw.sock.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(raw.sock) == b""  # PLAIN's empty server answer
        resp = raw.call(MetadataRequest[1](topics=[]), MetadataResponse, 1)
        assert [b.port for b in resp.brokers] == [secure.ports["SASL_PLAINTEXT"]]
    finally:
        raw.close()


def test_scram_password_change_applies_to_new_connections(secure: SecureBroker, scram_user: str,
                                                          tmp_path: Path) -> None:
    bootstrap = secure.bootstrap("SASL_SSL")
    old = _sasl_conf("SASL_SSL", "SCRAM-SHA-256", scram_user, SCRAM_PASSWORD, secure.certs)
    new = {**old, "sasl.password": "carol-secret-2"}
    assert _can_login(bootstrap, old)
    try:
        assert _users_cli(secure, "add", scram_user, password="carol-secret-2", tmp=tmp_path).returncode == 0
        wait_until(lambda: _can_login(bootstrap, new), 30, "the new password accepted")
        assert not _can_login(bootstrap, old)
    finally:
        assert _users_cli(secure, "add", scram_user, password=SCRAM_PASSWORD, tmp=tmp_path).returncode == 0
        wait_until(lambda: _can_login(bootstrap, old), 30, "the first password back")
