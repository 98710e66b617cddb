"""metaq's own clients over TLS and SASL against a real broker process with every kind of listener: the
metaq consumer group, metaq.Producer, ``metaq groups describe --command-config`` and the console tools; and
the fatal failures (a wrong password, an untrusted CA) that must stop a client instead of retrying.

The broker serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL at once; a client finds its listener in the
broker's registration by its ``security.protocol``. Certificates are made at test time
(metaq/testing/certs.py). The Spark batch read over SSL and SASL_SSL is here too (skipped without pyspark).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import metaq.client.connection as connection_module
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer
from metaq.errors import (
    AuthenticationError,
    BrokerConnectionError,
    SaslAuthenticationFailedError,
    TlsHandshakeError,
    UnsupportedSaslMechanismError,
)
from metaq.producer import Producer
from metaq.testing.broker import topic_leaders
from metaq.testing.certs import Certs, make_certs
from metaq.testing.group import drain_values
from metaq.testing.secure import SecureBroker, secure_broker
from metaq.testing.wait import wait_until
from metaq.testing.zookeeper import own_chroot
from metaq.zkclient import connect as zk_connect_client
from zk_layout import ZkLayout

pytestmark = pytest.mark.slow

PLAIN_USERS = {"alice": "alice-secret"}
SCRAM_USERS = {"scram-user": "scram-secret"}
WRONG = "not-the-password"


def topic_on(broker: SecureBroker, name: str, partitions: int = 2) -> str:
    client = zk_connect_client(broker.zk_connect)
    try:
        create_topic(ZkLayout(client), name, partitions)
    finally:
        client.stop()
        client.close()
    return name


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("client-certs"))


@pytest.fixture(scope="module")
def secure(zk_server: Any, certs: Certs, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[SecureBroker]:
    with own_chroot(zk_server, "metaq-client-security") as connect:
        broker = secure_broker(connect, tmp_path_factory.mktemp("client-secure"), certs, plain_users=PLAIN_USERS)
        with broker.process:
            yield broker


@pytest.fixture(scope="module")
def scram_users(secure: SecureBroker) -> dict[str, str]:
    for user, password in SCRAM_USERS.items():
        secure.add_scram_user(user, password)
    return SCRAM_USERS


def security(broker: SecureBroker, protocol: str, mechanism: str | None = None, password: str | None = None
             ) -> dict[str, str]:
    user, real = next(iter((PLAIN_USERS if mechanism == "PLAIN" else SCRAM_USERS).items()))
    return broker.client_properties(protocol, mechanism, user, password or real)


def produce(secure: SecureBroker, topic: str, n: int, props: dict[str, str]) -> dict[tuple[int, int], bytes]:
    with Producer({"zookeeper.connect": secure.zk_connect, "linger.ms": 2, **props}) as producer:
        futures = [producer.send(topic, b"m%d" % i, partition=i % 2) for i in range(n)]
        producer.flush()
        return {(f.result().partition, f.result().offset): b"m%d" % i for i, f in enumerate(futures)}


def consumer(secure: SecureBroker, group: str, props: dict[str, str], **more: object) -> Consumer:
    return Consumer({"group.id": group, "zookeeper.connect": secure.zk_connect, "consumer.timeout.ms": 3000,
                     "auto.offset.reset": "smallest", "zookeeper.session.timeout.ms": 6000, **props, **more})


CASES = [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
         ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN")]


@pytest.mark.parametrize(("protocol", "mechanism"), CASES, ids=[f"{p}-{m or 'tls'}" for p, m in CASES])
def test_producer_and_consumer_group(secure: SecureBroker, protocol: str, mechanism: str | None,
                                     monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if mechanism and mechanism.startswith("SCRAM"):
        request.getfixturevalue("scram_users")
    ports_used: set[int] = set()
    real_connect = connection_module.BrokerConnection.connect

    def spy(conn: Any) -> None:
        ports_used.add(conn.port)
        real_connect(conn)

    monkeypatch.setattr(connection_module.BrokerConnection, "connect", spy)
    props = security(secure, protocol, mechanism)
    topic = topic_on(secure, f"sec-{protocol.lower()}-{(mechanism or 'tls').lower()}")
    sent = produce(secure, topic, 60, props)
    # offsets.storage=kafka: the offsets channel (FindCoordinator, OffsetCommit) goes over the same listener
    storage = "kafka" if protocol == "SASL_SSL" else "zookeeper"
    with consumer(secure, f"g-{topic}", props, **{"offsets.storage": storage}) as c:
        [stream] = c.create_message_streams({topic: 1})[topic]
        assert drain_values(stream, len(sent)) == sent
        c.commit_offsets()
    assert ports_used == {secure.ports[protocol]}, "every connection used the listener of security.protocol"


def test_groups_describe_and_console_tools_with_command_config(secure: SecureBroker, scram_users: Any,
                                                              tmp_path: Path) -> None:
    props = security(secure, "SASL_SSL", "SCRAM-SHA-512")
    topic = topic_on(secure, "sec-describe")
    sent = produce(secure, topic, 40, props)
    group = "g-describe"
    with consumer(secure, group, props) as c:
        [stream] = c.create_message_streams({topic: 1})[topic]
        assert len(drain_values(stream, 30)) >= 30
        c.commit_offsets()
        committed = committed_offsets(secure.zk_connect, group)
    good = tmp_path / "admin.properties"
    good.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    result = metaq_cli("groups", "describe", group, "--zookeeper", secure.zk_connect, "--command-config",
                       str(good), "--json")
    assert result.returncode == 0, result.stderr
    rows = {(p["topic"], p["partition"]): p for p in json.loads(result.stdout)["partitions"]}
    ends = {p: max(o for (q, o) in sent if q == p) + 1 for p in (0, 1)}
    for p in (0, 1):
        row = rows[(topic, p)]
        assert row["log_end_offset"] == ends[p]
        assert row["lag"] == ends[p] - committed[(topic, p)]
    # the file is what reaches the broker: a wrong password there is a clear error, exit 1
    bad = tmp_path / "bad.properties"
    bad.write_text(good.read_text().replace(props["sasl.password"], WRONG))
    refused = metaq_cli("groups", "describe", group, "--zookeeper", secure.zk_connect, "--command-config", str(bad))
    assert refused.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in refused.stderr and WRONG not in refused.stderr
    # console-consumer on one partition and console-producer, with the same file
    produced = subprocess.run([sys.executable, "-m", "metaq", "console-producer", "--zookeeper", secure.zk_connect,
                               "--command-config", str(good), "--topic", topic, "--partition", "0"],
                              input=b"from-console\n", capture_output=True, timeout=120)
    assert produced.returncode == 0, produced.stderr.decode()
    read = metaq_cli("console-consumer", "--zookeeper", secure.zk_connect, "--command-config", str(good),
                     "--topic", topic, "--partition", "0", "--offset", str(ends[0]), "--max-messages", "1",
                     "--timeout-ms", "20000")
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == ["from-console"]


def committed_offsets(zk_connect: str, group: str) -> dict[tuple[str, int], int]:
    client = zk_connect_client(zk_connect)
    try:
        return {k: v for k, v in ZkLayout(client).offsets(group).items() if v is not None}
    finally:
        client.stop()
        client.close()


def metaq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=120)


class _CountingLogins:
    """Counts SASL logins (in this process) to show that a refused one is not retried."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self._lock = threading.Lock()
        real = connection_module.authenticate

        def counting(conn: Any, login: Any) -> None:
            with self._lock:
                self.count += 1
            real(conn, login)

        monkeypatch.setattr(connection_module, "authenticate", counting)


def _stays(value: Callable[[], int], seconds: float) -> bool:
    first = value()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value() != first:
            return False
        time.sleep(0.1)
    return True


def test_wrong_password_is_fatal_for_producer_and_consumer(secure: SecureBroker, scram_users: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    topic = topic_on(secure, "sec-wrong-password")
    produce(secure, topic, 10, security(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256"))
    logins = _CountingLogins(monkeypatch)
    bad = security(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", WRONG)
    with Producer({"zookeeper.connect": secure.zk_connect, **bad}) as producer:
        future = producer.send(topic, b"never", partition=0)
        with pytest.raises(SaslAuthenticationFailedError) as raised:
            future.result(timeout=60)
    assert "scram-user" in str(raised.value) and WRONG not in str(raised.value)
    assert logins.count == 1, "the producer did not retry a refused login"
    logins.count = 0
    with consumer(secure, "g-wrong-password", bad) as c:
        [stream] = c.create_message_streams({topic: 1})[topic]
        with pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
            drain_values(stream, 10)
        # the fetcher stopped: no login attempts after the error reached the stream
        assert _stays(lambda: logins.count, 3.0), f"{logins.count} logins: the consumer kept retrying"
        assert logins.count <= 2  # one per fetcher (partitions may sit on one runner or the leader finder)


def test_untrusted_ca_is_a_clear_tls_error(secure: SecureBroker, tmp_path: Path) -> None:
    other = make_certs(tmp_path / "other-ca")
    topic = topic_on(secure, "sec-untrusted")
    props = {"security.protocol": "SSL", "ssl.ca.location": str(other.ca)}
    with Producer({"zookeeper.connect": secure.zk_connect, **props}) as producer:
        with pytest.raises(TlsHandshakeError) as raised:
            producer.send(topic, b"never", partition=0).result(timeout=60)
    message = str(raised.value)
    assert f"127.0.0.1:{secure.ports['SSL']}" in message and "certificate did not verify" in message
    # the consumer's stream raises it too, instead of fetching forever
    with consumer(secure, "g-untrusted", props) as c:
        [stream] = c.create_message_streams({topic: 1})[topic]
        with pytest.raises(TlsHandshakeError, match="certificate did not verify"):
            drain_values(stream, 1)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    import os

    from pyspark.sql import SparkSession

    import metaq.spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must import metaq from this venv
    session = (SparkSession.builder.master("local[2]").appName("metaq-client-security")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    metaq.spark.register(session)
    yield session
    session.stop()


@pytest.mark.parametrize(("protocol", "mechanism"), [("SSL", None), ("SASL_SSL", "SCRAM-SHA-512"),
                                                     ("SASL_PLAINTEXT", "PLAIN")])
def test_spark_batch_read(secure: SecureBroker, spark: Any, protocol: str, mechanism: str | None,
                          request: pytest.FixtureRequest) -> None:
    if mechanism and mechanism.startswith("SCRAM"):
        request.getfixturevalue("scram_users")
    props = security(secure, protocol, mechanism)
    topic = topic_on(secure, f"sec-spark-{protocol.lower()}")
    sent = produce(secure, topic, 50, props)
    reader = spark.read.format("metaq").option("zookeeper.connect", secure.zk_connect).option("subscribe", topic)
    for key, value in props.items():
        reader = reader.option(key, value)
    df = reader.load()
    rows = df.select("partition", "offset", "value").collect()
    assert {(r.partition, r.offset): bytes(r.value) for r in rows} == sent
    if mechanism is not None:  # the password is nowhere in the plans Spark shows (Spark 4.3 shows no option of
        # a Python data source there; this guards against that changing, the options' repr masks it anyway)
        for mode in ("simple", "extended", "formatted"):
            assert props["sasl.password"] not in df._jdf.queryExecution().explainString(
                spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString(mode))
    # the sink's producer goes through the same listener: copy what was read into another topic, read it back
    copy = topic_on(secure, f"sec-spark-copy-{protocol.lower()}")
    df.select("value").write.format("metaq").options(**{"zookeeper.connect": secure.zk_connect, "topic": copy,
                                                         **props}).mode("append").save()
    copied = spark.read.format("metaq").options(**{"zookeeper.connect": secure.zk_connect, "subscribe": copy,
                                                   **props}).load()
    assert sorted(bytes(r.value) for r in copied.select("value").collect()) == sorted(sent.values())


def test_client_certificate_for_a_broker_that_requires_one(zk_connect: str, certs: Certs, tmp_path: Path) -> None:
    broker = secure_broker(zk_connect, tmp_path, certs, plain_users={}, listeners=("SSL",),
                           **{"ssl.client.auth": "required"})
    ssl_port = broker.ports["SSL"]
    with broker.process:
        topic = topic_on(broker, "sec-mtls", partitions=1)
        anonymous = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
        with Producer({"zookeeper.connect": zk_connect, "retries": 0, **anonymous}) as producer:
            # this broker closes the connection without a TLS alert, so the client cannot tell a refused
            # certificate from a broker going away: a retriable error, with the hint
            with pytest.raises((TlsHandshakeError, BrokerConnectionError), match=f"127.0.0.1:{ssl_port}") as raised:
                producer.send(topic, b"never", partition=0).result(timeout=60)
        assert "certificate" in str(raised.value)
        mutual = {**anonymous, "ssl.certificate.location": str(certs.client_cert),
                  "ssl.key.location": str(certs.client_key)}
        with Producer({"zookeeper.connect": zk_connect, **mutual}) as producer:
            assert producer.send(topic, b"signed", partition=0).result(timeout=60).offset == 0


def test_close_from_another_thread_interrupts_a_blocked_tls_read(secure: SecureBroker) -> None:
    from kafka.protocol.consumer import FetchRequest

    from metaq.client.security import SecurityConfig
    from metaq.client.settings import ConnectionSettings

    topic = topic_on(secure, "sec-close", partitions=1)
    wait_until(lambda: topic_leaders(secure.bootstrap("PLAINTEXT"), topic) == {0: 0}, 30, f"{topic} has a leader")
    settings = ConnectionSettings(request_timeout_ms=120000,
                                  security=SecurityConfig.from_properties(security(secure, "SSL")))
    conn = settings.open("127.0.0.1", secure.ports["SSL"])
    outcome: list[BaseException] = []

    def long_poll() -> None:  # an empty partition: the broker holds the Fetch for max_wait_ms
        try:
            conn.send(FetchRequest, {"replica_id": -1, "max_wait_ms": 60000, "min_bytes": 1, "max_bytes": 1 << 20,
                                     "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                                         {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome.append(e)

    reader = threading.Thread(target=long_poll, name="tls-long-poll")
    reader.start()
    time.sleep(0.5)  # let it block in the read (if it has not, close() still fails the request)
    conn.close()
    reader.join(30)
    assert not reader.is_alive(), "close() did not interrupt the blocked TLS read"
    assert len(outcome) == 1 and isinstance(outcome[0], BrokerConnectionError), outcome


def test_mechanism_not_enabled_and_unknown_user_are_fatal(zk_connect: str, certs: Certs, tmp_path: Path) -> None:
    broker = secure_broker(zk_connect, tmp_path, certs, plain_users={}, listeners=("SASL_PLAINTEXT",),
                           **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    with broker.process:
        topic = topic_on(broker, "sec-mechanisms", partitions=1)
        plain = broker.client_properties("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
        with Producer({"zookeeper.connect": zk_connect, **plain}) as producer:
            with pytest.raises(UnsupportedSaslMechanismError, match="does not enable sasl.mechanism PLAIN; it "
                                                                   "enables SCRAM-SHA-512"):
                producer.send(topic, b"never", partition=0).result(timeout=60)
        nobody = broker.client_properties("SASL_PLAINTEXT", "SCRAM-SHA-512", "nobody", "whatever")
        with Producer({"zookeeper.connect": zk_connect, **nobody}) as producer:
            with pytest.raises(SaslAuthenticationFailedError, match="as 'nobody'"):
                producer.send(topic, b"never", partition=0).result(timeout=60)


def test_wrong_password_with_kafka_offsets_fails_the_first_rebalance_attempt(
        secure: SecureBroker, scram_users: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """offsets.storage=kafka: taking ownership logs in to the coordinator; a refused login is fatal, so the
    rebalance stops at its first attempt instead of trying rebalance.max.retries times (one login, not 4+)."""
    topic = topic_on(secure, "sec-wrong-password-kafka-offsets")
    logins = _CountingLogins(monkeypatch)
    bad = security(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", WRONG)
    with consumer(secure, "g-wrong-password-kafka", bad, **{"offsets.storage": "kafka",
                                                            "rebalance.max.retries": 4,
                                                            "rebalance.backoff.ms": 200}) as c:
        with pytest.raises(AuthenticationError, match="SASL_AUTHENTICATION_FAILED") as raised:
            c.create_message_streams({topic: 1})
    assert WRONG not in str(raised.value)
    assert logins.count == 1, f"{logins.count} logins: the rebalance retried a refused login"
