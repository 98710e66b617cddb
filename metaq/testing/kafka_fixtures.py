"""The pytest side of the real-Kafka harness: the version matrix (``kafka_matrix``, ``kafka_params``), the Kafka
brokers' ZooKeeper and the module-scoped broker and cluster fixtures, and the log tails a failed test's report carries
(metaq/testing/apache_kafka.py's docstring shows a test).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from metaq.testing.apache_kafka import ApacheKafkaBroker, ApacheKafkaCluster, _tail
from metaq.testing.kafka_versions import (
    REQUIRED_VERSIONS,
    catalogue_entry,
)
from metaq.testing.zookeeper import ENV_CONNECT, ExternalZooKeeper, ZooKeeperEndpoint, delete_chroot, embedded_server
from metaq.zkclient import close as close_zk
from metaq.zkclient import connect as connect_zk
from zk_layout import ZkLayout


def kafka_params(capability: str, versions: Sequence[str] = REQUIRED_VERSIONS) -> list[Any]:
    """``pytest.param`` per version, each marked ``apache_kafka(version)`` and ``compat(capability, "Kafka
    <version>")`` (a cell of docs/compatibility.md); for a parametrization of your own."""
    return [pytest.param(v, id=f"kafka-{v}", marks=[pytest.mark.apache_kafka(v),
                                                      pytest.mark.compat(capability, catalogue_entry(v).peer)])
            for v in versions]


def kafka_matrix(capability: str, versions: Sequence[str] = REQUIRED_VERSIONS) -> pytest.MarkDecorator:
    """Run the test once per version with ``kafka_broker`` (or ``kafka_cluster``) of that version, each run a cell
    ``(capability, "Kafka <version>")`` of docs/compatibility.md::

        @kafka_matrix("consume from a ZooKeeper group")
        def test_group(kafka_broker): ...
    """
    return pytest.mark.parametrize("kafka_version", kafka_params(capability, versions))


KAFKA_ZK_TICK_MS = 500


@pytest.fixture(scope="session")
def kafka_zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEndpoint]:
    """The ZooKeeper of the real Kafka brokers (started on first use): like ``zk_server`` but with tickTime
    500 ms, so that it grants sessions of up to 10 s (``zk_server``: 4 s): a broker JVM starved of CPU for a few
    seconds on the loaded test machine keeps its session and registration, and a SIGKILLed broker's registration
    still goes within 10 s. ``$ZOOKEEPER_CONNECT`` names an external server instead, as for ``zk_server``."""
    external = os.environ.get(ENV_CONNECT)
    if external:
        yield ExternalZooKeeper(external)
        return
    with embedded_server(tmp_path_factory, tick_time_ms=KAFKA_ZK_TICK_MS) as server:
        yield server


def _zk_hosts(zk_server: ZooKeeperEndpoint) -> str:
    return str(zk_server.connect_string)


@pytest.fixture(scope="module")
def apache_kafka(kafka_zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Callable[..., ApacheKafkaBroker]]:
    """Module-scoped factory: ``apache_kafka(version, properties=None)`` returns a started broker, the same one
    for the same arguments within the module; all are stopped when the module ends."""
    brokers: dict[tuple[str, tuple[tuple[str, str], ...]], ApacheKafkaBroker] = {}

    def get(version: str, properties: Mapping[str, object] | None = None) -> ApacheKafkaBroker:
        key = (catalogue_entry(version).version, tuple(sorted((k, str(v)) for k, v in (properties or {}).items())))
        if key not in brokers:
            base = tmp_path_factory.mktemp(f"kafka-{key[0]}")
            broker = ApacheKafkaBroker(key[0], zk_hosts=_zk_hosts(kafka_zk_server), base_dir=base,
                                       properties=properties)
            brokers[key] = broker.start()
        return brokers[key]

    yield get
    for broker in brokers.values():
        broker.stop()
        delete_chroot(kafka_zk_server, broker.chroot)


@pytest.fixture(scope="module")
def apache_kafka_cluster(kafka_zk_server: ZooKeeperEndpoint, tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[Callable[..., ApacheKafkaCluster]]:
    """Module-scoped factory: ``apache_kafka_cluster(version, size=3, properties=None)``, one per arguments."""
    clusters: dict[tuple[str, int, tuple[tuple[str, str], ...]], ApacheKafkaCluster] = {}

    def get(version: str, size: int = 3, properties: Mapping[str, object] | None = None) -> ApacheKafkaCluster:
        key = (catalogue_entry(version).version, size,
               tuple(sorted((k, str(v)) for k, v in (properties or {}).items())))
        if key not in clusters:
            base = tmp_path_factory.mktemp(f"kafka-cluster-{key[0]}")
            cluster = ApacheKafkaCluster(key[0], zk_hosts=_zk_hosts(kafka_zk_server), base_dir=base, size=size,
                                         properties=properties)
            clusters[key] = cluster.start()
        return clusters[key]

    yield get
    for cluster in clusters.values():
        cluster.stop()
        delete_chroot(kafka_zk_server, cluster.brokers[0].chroot)


@pytest.fixture
def kafka_version(request: pytest.FixtureRequest) -> str:
    """The version of the test's ``apache_kafka(version)`` marker (set directly or by :func:`kafka_matrix`)."""
    marker = request.node.get_closest_marker("apache_kafka")
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{request.node.nodeid}: needs @pytest.mark.apache_kafka(version) or kafka_matrix")
    return catalogue_entry(str(marker.args[0])).version


_used_brokers = pytest.StashKey[list[ApacheKafkaBroker]]()


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest, kafka_version: str,
                 apache_kafka: Callable[..., ApacheKafkaBroker]) -> ApacheKafkaBroker:
    """The module's shared single broker of the test's version (see :func:`kafka_version`)."""
    broker = apache_kafka(kafka_version)
    request.node.stash.setdefault(_used_brokers, []).append(broker)
    return broker


@pytest.fixture
def kafka_zk_layout(kafka_broker: ApacheKafkaBroker) -> Iterator[ZkLayout]:
    """A :class:`ZkLayout` on the ZooKeeper chroot of the test's ``kafka_broker`` (its own session)."""
    zk = connect_zk(kafka_broker.zk_connect, session_timeout_ms=10000, connection_timeout_ms=15000)
    try:
        yield ZkLayout(zk)
    finally:
        close_zk(zk)


@pytest.fixture
def kafka_cluster(request: pytest.FixtureRequest, kafka_version: str,
                  apache_kafka_cluster: Callable[..., ApacheKafkaCluster]) -> ApacheKafkaCluster:
    """The module's shared 3-broker cluster of the test's version."""
    cluster = apache_kafka_cluster(kafka_version)
    request.node.stash.setdefault(_used_brokers, []).extend(cluster.brokers)
    return cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test's report carries the state and log tails of the Kafka brokers it used (pytest's tmp
    directories of a shared machine are soon deleted by other runs)."""
    report: pytest.TestReport = yield
    if report.failed:
        for broker in item.stash.get(_used_brokers, []):
            code = broker.proc.poll() if broker.proc else None
            state = "running" if broker.proc and code is None else f"exited with {code}"
            report.sections.append((f"Kafka {broker.version} broker {broker.broker_id} ({state}) server.log tail",
                                    broker.log_tail(60)))
            report.sections.append((f"Kafka {broker.version} broker {broker.broker_id} JVM output tail",
                                    _tail(broker.stdout_path, 30)))
    return report
