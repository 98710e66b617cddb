"""ZooKeeper authentication, znode ACLs and TLS end to end: a real broker and consumer group authenticated
with zookeeper.auth and zookeeper.set.acl, ops commands run as other identities, and a ZooKeeper that
enforces authentication and serves TLS (certificates made at test time with openssl)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metaq.broker.process import BrokerProcess
from metaq.broker.topics import create_topic
from metaq.consumer import Consumer, ConsumerTimeoutError
from metaq.errors import MetaqError, ZooKeeperAuthError
from metaq.producer import Producer
from metaq.testing.broker import topic_leaders
from metaq.testing.certs import Certs, make_certs
from metaq.testing.wait import wait_until
from metaq.zkclient import session
from metaq.zksecurity import security_from_properties
from metaq.zkserver import ZooKeeperServer, ZooKeeperTls
from zk_layout import ZkLayout
from zk_layout.znode_acls import digest_identity

OPS = digest_identity("ops", "ops-pw")
BROKER = digest_identity("broker", "broker-pw")


def _auth(user: str, **extra: Any) -> dict[str, Any]:
    return {"zookeeper.auth": f"digest:{user}:{user}-pw", **extra}


BROKER_PROPS = _auth("broker", **{"zookeeper.set.acl": "true", "zookeeper.acl.ops.identity": OPS})
OPS_PROPS = _auth("ops", **{"zookeeper.set.acl": "true", "zookeeper.acl.ops.identity": BROKER})
ALICE_PROPS = _auth("alice", **{"zookeeper.set.acl": "true", "zookeeper.acl.ops.identity": OPS})


def _metaq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", *args], capture_output=True, text=True, timeout=120)


def _write_properties(path: Path, props: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _create_topic_as_ops(zk_connect: str, topic: str, partitions: int, broker: BrokerProcess,
                         **tls: Any) -> None:
    with session(zk_connect, security=security_from_properties({**OPS_PROPS, **tls})) as client:
        create_topic(ZkLayout(client), topic, partitions)
    wait_until(lambda: len(topic_leaders(broker.bootstrap, topic)) == partitions, 30, f"{topic} served")


def _produce(zk_connect: str, topic: str, count: int, **props: Any) -> None:
    with Producer({"zookeeper.connect": zk_connect, "linger.ms": 2, **props}) as producer:
        futures = [producer.send(topic, b"m%d" % i, partition=i % 2) for i in range(count)]
        producer.flush(30)
        for future in futures:
            future.result()


def _consume(consumer: Consumer, topic: str, expected: int) -> set[bytes]:
    [stream] = consumer.create_message_streams({topic: 1})[topic]
    got: set[bytes] = set()
    try:
        for message in stream:
            got.add(message.value)
            if len(got) >= expected:
                break
    except ConsumerTimeoutError:
        pass
    consumer.commit_offsets()
    return got


def _consumer(zk_connect: str, group: str, **props: Any) -> Consumer:
    return Consumer({"group.id": group, "zookeeper.connect": zk_connect, "consumer.timeout.ms": 5000,
                     "auto.offset.reset": "smallest", "zookeeper.session.timeout.ms": 3000, **props})


def test_group_with_set_acl_runs_and_other_identities_can_only_read(zk_connect: str, tmp_path: Path) -> None:
    broker = BrokerProcess(zk_connect, 0, tmp_path, properties=BROKER_PROPS).start()
    try:
        _create_topic_as_ops(zk_connect, "secure", 2, broker)
        _produce(zk_connect, "secure", 100)
        with _consumer(zk_connect, "etl", **ALICE_PROPS) as alice:
            assert _consume(alice, "secure", 100) == {b"m%d" % i for i in range(100)}

            # a Burrow-style reader without credentials: describe (lag) works, read-only
            described = _metaq("groups", "describe", "etl", "--zookeeper", zk_connect, "--json")
            assert described.returncode == 0, described.stderr
            rows = {r["partition"]: r for r in json.loads(described.stdout)["partitions"]}
            assert {p: (r["offset"], r["lag"]) for p, r in rows.items()} == {0: (50, 0), 1: (50, 0)}

            # another tenant cannot rewind the group, even with --force
            bob = _write_properties(tmp_path / "bob.properties", _auth("bob"))
            reset = _metaq("offsets", "reset", "etl", "--topic", "secure", "--to-earliest", "--execute", "--force",
                           "--zookeeper", zk_connect, "--zk-config", str(bob))
            assert reset.returncode != 0
            assert "not allowed by its ACL" in reset.stderr and "/consumers/etl/offsets/secure/" in reset.stderr
            assert "authenticated as digest:bob" in reset.stderr
            assert "Traceback" not in reset.stderr and "bob-pw" not in reset.stderr

            # nor join it: its registration node cannot be created
            with pytest.raises(ZooKeeperAuthError, match="cannot create .*/consumers/etl/ids/"):
                with _consumer(zk_connect, "etl", **_auth("bob")) as intruder:
                    intruder.create_message_streams({"secure": 1})

        with session(zk_connect) as reader:  # nothing was rewound
            assert ZkLayout(reader).offsets("etl") == {("secure", 0): 50, ("secure", 1): 50}

        # ops (its identity is in the group's ACL) may reset the group once its members are gone
        ops = _write_properties(tmp_path / "ops.properties", OPS_PROPS)
        reset = _metaq("offsets", "reset", "etl", "--topic", "secure", "--to-earliest", "--execute",
                       "--zookeeper", zk_connect, "--zk-config", str(ops))
        assert reset.returncode == 0, reset.stderr
        with session(zk_connect) as reader:
            assert ZkLayout(reader).offsets("etl") == {("secure", 0): 0, ("secure", 1): 0}
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_zk(pki: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """Digest authentication enforced on both ports; TLS on the secure one."""
    server = ZooKeeperServer(tick_time_ms=200, force_sync=False, enforce_auth=True,
                             log_path=tmp_path_factory.mktemp("secure-zk") / "zookeeper.log",
                             tls=ZooKeeperTls(pki.server_pem, pki.ca))
    server.start()
    yield server
    server.stop()


def test_broker_and_group_over_tls_with_enforced_auth(secure_zk: ZooKeeperServer, pki: Certs, tmp_path: Path) -> None:
    connect = f"{secure_zk.secure_connect_string}/tls-{uuid.uuid4().hex}"
    tls = {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": str(pki.ca),
           "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty"}
    broker = BrokerProcess(connect, 0, tmp_path, properties={**BROKER_PROPS, **tls}).start()
    try:
        _create_topic_as_ops(connect, "over-tls", 2, broker, **tls)
        _produce(connect, "over-tls", 40, **_auth("producer"), **tls)
        with _consumer(connect, "tls-group", **ALICE_PROPS, **tls) as alice:
            assert _consume(alice, "over-tls", 40) == {b"m%d" % i for i in range(40)}
        with session(connect, security=security_from_properties({**_auth("reader"), **tls})) as reader:
            assert ZkLayout(reader).offsets("tls-group") == {("over-tls", 0): 20, ("over-tls", 1): 20}
    finally:
        broker.stop()


def test_unauthenticated_broker_and_consumer_get_a_clear_error(secure_zk: ZooKeeperServer, tmp_path: Path) -> None:
    connect = f"{secure_zk.connect_string}/plain-{uuid.uuid4().hex}"
    with pytest.raises(MetaqError, match="exited") as e:
        BrokerProcess(connect, 0, tmp_path).start()
    assert "requires authentication" in str(e.value) and "zookeeper.auth" in str(e.value)
    with pytest.raises(ZooKeeperAuthError, match="requires authentication .*set zookeeper.auth"):
        _consumer(connect, "etl")
