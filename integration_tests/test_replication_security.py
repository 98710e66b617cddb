"""Inter-broker security (docs/security.md, "Inter-broker traffic"): three brokers whose only listeners are
SASL_SSL (or SSL with required client certificates), ACLs on, an RF-3 topic with min.insync.replicas=3.
Replica fetchers must log in like any client, and as a super user, for acks=all to succeed at all."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.admin
import pytest

from integration_tests import peers
from integration_tests.test_replication import FAST, _replica_logs, _state
from metaq.broker.topics import create_topic
from metaq.testing.certs import SERVER_PRINCIPAL, Certs, make_certs
from metaq.testing.secure import SecureBroker, secure_broker
from metaq.testing.wait import wait_until
from zk_layout import ZkLayout

ACLS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false"}
RECORDS = 50
USERS = {"broker": "broker-pw", "admin": "admin-pw"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def secure_three(zk_connect: str, tmp_path: Path, certs: Certs) -> Iterator[Callable[..., list[SecureBroker]]]:
    started: list[SecureBroker] = []

    def start(listener: str, **properties: Any) -> list[SecureBroker]:
        for i in range(3):
            broker = secure_broker(zk_connect, tmp_path, certs, plain_users=USERS, listeners=(listener,),
                                   plaintext=False, broker_id=i, **{**FAST, **ACLS, **properties})
            started.append(broker)
            broker.process.start()
        return started

    yield start
    for broker in started:
        broker.process.stop()


def _replicates(zk_layout: ZkLayout, brokers: list[SecureBroker], listener: str, client: dict[str, str]) -> None:
    """acks=all with min.insync.replicas=3 succeeds, the ISR stays whole and every replica has every record."""
    create_topic(zk_layout, "secure-rf3", 1, replication_factor=3, config={"min.insync.replicas": "3"})
    for b in brokers:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": b.bootstrap(listener), **client})
        wait_until(lambda admin=admin: bool(getattr(admin.list_topics("secure-rf3", timeout=10).topics.get(
            "secure-rf3"), "partitions", None)), 30, f"secure-rf3 on broker {b.process.broker_id}")
    leader = _state(zk_layout, "secure-rf3").leader
    items = [(b"k", b"v%d" % i, 1_700_000_000_000 + i) for i in range(RECORDS)]
    acked = peers.confluent_produce(brokers[leader].bootstrap(listener), "secure-rf3", 0, items, acks="all",
                                    **{"message.timeout.ms": 30000, **client})
    assert [m.offset for m in acked] == list(range(RECORDS))
    assert sorted(_state(zk_layout, "secure-rf3").isr) == [0, 1, 2]
    for b in brokers:
        b.process.stop()
    logs = _replica_logs([b.process for b in brokers], "secure-rf3")
    want = {i: b"v%d" % i for i in range(RECORDS)}
    assert logs == {0: want, 1: want, 2: want}


def test_sasl_ssl_only_brokers_replicate_as_a_super_user(secure_three, zk_layout: ZkLayout) -> None:
    brokers = secure_three("SASL_SSL", **{"sasl.mechanism.inter.broker.protocol": "PLAIN",
                                          "inter.broker.sasl.username": "broker",
                                          "inter.broker.sasl.password": "broker-pw",
                                          "super.users": "User:broker;User:admin"})
    client = brokers[0].client_properties("SASL_SSL", "PLAIN", "admin", "admin-pw")
    _replicates(zk_layout, brokers, "SASL_SSL", client)


def test_mtls_only_brokers_replicate_with_their_certificate(secure_three, zk_layout: ZkLayout) -> None:
    brokers = secure_three("SSL", **{"ssl.client.auth": "required",
                                     "super.users": f"{SERVER_PRINCIPAL};User:CN=client,O=test"})
    certs = brokers[0].certs
    client = {**brokers[0].client_properties("SSL"), "ssl.certificate.location": str(certs.client_cert),
              "ssl.key.location": str(certs.client_key)}
    _replicates(zk_layout, brokers, "SSL", client)
