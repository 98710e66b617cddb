"""pytest fixtures: one real ZooKeeper per test session, a fresh chroot per test.

Enable with ``pytest_plugins = ["metaq.testing.zookeeper"]`` in the root ``conftest.py``. Then::

    def test_x(zk_layout, zk_connect, make_zk_client):
        zk_layout.write_offset("g", "t", 0, 42)       # lands under /metaq-test-<uuid>/consumers/...
        other = make_zk_client()                        # a second session on the same chroot
        expire_session(other)                           # a real server-side expiry

``zk_server`` is an embedded :class:`ZooKeeperServer` (tickTime 200 ms, so sessions of 0.4-4 s, and no fsync,
and a super user ``TEST_SUPER_AUTH`` who passes every znode ACL, so that the chroot of a test that created
nodes with ``zookeeper.set.acl`` can still be deleted), or the server named by ``$ZOOKEEPER_CONNECT``.
Each test's chroot is deleted afterwards. When
a test that used ZooKeeper fails, the tail of the server log is added to its report.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from metaq.errors import MetaqError
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperServer
from zk_layout import ZkLayout, split_connect
from zk_layout.znode_acls import digest_identity

log = logging.getLogger(__name__)

ENV_CONNECT = "ZOOKEEPER_CONNECT"
TEST_SESSION_TIMEOUT_MS = 3000  # within 2x..20x of tickTime=200; expiry tests stay fast
TEST_SUPER_AUTH = ("super", "metaq-test-super")
"""(user, password) of the embedded test server's ZooKeeper super user (a test-only server on loopback)."""


class ZooKeeperEndpoint(Protocol):
    """What tests may rely on from ``zk_server`` whether it is embedded or external."""

    @property
    def connect_string(self) -> str: ...

    def log_tail(self, lines: int = 40) -> str: ...


@dataclass(frozen=True)
class ExternalZooKeeper:
    """A server we did not start (``$ZOOKEEPER_CONNECT``): no log, no fault injection."""

    connect_string: str

    def log_tail(self, lines: int = 40) -> str:
        return ""


def expire_session(client: KazooClient, timeout_s: float = 10.0) -> None:
    """Expire ``client``'s session on the server, as a long partition would (Kafka's QuorumTestHarness trick):
    a second client joins the same session and closes it. The server deletes the session's ephemeral nodes at
    once; ``client`` then goes LOST and reconnects with a new session.

    (``KazooTestHarness.expire_session`` is client-side only: the server keeps the old ephemerals alive until
    the session times out.)"""
    session = client.client_id
    if session is None:
        raise RuntimeError("the client has no session to expire")
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    twin = KazooClient(hosts=hosts, client_id=session)
    twin.start(timeout=timeout_s)
    twin.stop()
    twin.close()


def _close_quietly(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # teardown must not mask the test's own result
        log.exception("closing a test ZooKeeper client")


@contextlib.contextmanager
def embedded_server(tmp_path_factory: pytest.TempPathFactory, *, tick_time_ms: int = 200,
                    ) -> Iterator[ZooKeeperServer]:
    """A test ZooKeeper (no fsync, the :data:`TEST_SUPER_AUTH` super user) for the block; a module whose
    brokers need sessions longer than 4 s overrides ``zk_server`` with a larger ``tick_time_ms``."""
    log_path = tmp_path_factory.mktemp("zookeeper") / "zookeeper.log"  # kept after the run for post-mortems
    server = ZooKeeperServer(tick_time_ms=tick_time_ms, force_sync=False, log_path=log_path,
                             super_digest=digest_identity(*TEST_SUPER_AUTH))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEndpoint]:
    external = os.environ.get(ENV_CONNECT)
    if external:
        yield ExternalZooKeeper(external)
        return
    with embedded_server(tmp_path_factory) as server:
        yield server


def delete_chroot(zk_server: ZooKeeperEndpoint, chroot: str) -> None:
    """Delete a test's chroot (relative to the server's own base chroot) with a client connected for that
    only, as the super user: the test may have created nodes only their creator may delete. A failure is
    logged, not raised (cleanup must not fail the test)."""
    _, base = split_connect(zk_server.connect_string)
    try:
        admin = connect(zk_server.connect_string, session_timeout_ms=10000,
                        auth_data=[("digest", ":".join(TEST_SUPER_AUTH))])
    except MetaqError as e:
        log.warning("could not connect to delete test chroot %s%s: %r", base, chroot, e)
        return
    try:
        admin.delete(chroot, recursive=True)  # relative to the admin client's own chroot (``base``)
    except (KazooException, KazooTimeoutError) as e:
        log.warning("could not delete test chroot %s%s: %r", base, chroot, e)
    finally:
        _close_quietly(admin)


@contextlib.contextmanager
def own_chroot(zk_server: ZooKeeperEndpoint, prefix: str = "metaq-test") -> Iterator[str]:
    """A connect string with a fresh chroot ``<hosts>[/base]/<prefix>-<uuid hex>``, deleted on exit
    (:func:`delete_chroot`), for fixtures of any scope."""
    hosts, base = split_connect(zk_server.connect_string)
    chroot = f"/{prefix}-{uuid.uuid4().hex}"
    try:
        yield f"{hosts}{base}{chroot}"
    finally:
        delete_chroot(zk_server, chroot)


@pytest.fixture
def zk_connect(zk_server: ZooKeeperEndpoint) -> Iterator[str]:
    """A connect string with a chroot of its own, ``<hosts>[/base]/metaq-test-<uuid hex>``.

    The chroot is deleted afterwards by a client connected for that only: a session-long client would keep
    a kazoo connection thread alive through every test, and that thread draws from the global ``random``
    module (its ping jitter), which hypothesis reports as randomness inside strategies."""
    with own_chroot(zk_server) as connect_string:
        yield connect_string


@pytest.fixture
def make_zk_client(zk_connect: str) -> Iterator[Callable[..., KazooClient]]:
    """Factory of extra started clients on the test's chroot; all are closed after the test."""
    clients: list[KazooClient] = []

    def make(**options: Any) -> KazooClient:
        options.setdefault("session_timeout_ms", TEST_SESSION_TIMEOUT_MS)
        client = connect(zk_connect, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        _close_quietly(client)


@pytest.fixture
def zk(make_zk_client: Callable[..., KazooClient]) -> KazooClient:
    """A started KazooClient rooted at the test's chroot."""
    return make_zk_client()


@pytest.fixture
def zk_layout(zk: KazooClient) -> ZkLayout:
    return ZkLayout(zk, stale_node_wait_s=5.0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        server = getattr(item, "funcargs", {}).get("zk_server")
        tail = server.log_tail(60) if server is not None else ""
        if tail:
            report.sections.append(("ZooKeeper server log (tail)", tail))
    return report
