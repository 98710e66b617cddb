"""The embedded ZooKeeper with digest authentication, enforce.auth and a TLS client port (certificates made
at test time with openssl), reached through metaq.zkclient with the zookeeper.auth/zookeeper.ssl.* keys."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.security import CREATOR_ALL_ACL

from metaq.errors import ZooKeeperAuthError, ZooKeeperUnavailableError
from metaq.testing.certs import Certs, make_certs
from metaq.zkclient import session
from metaq.zksecurity import security_from_properties
from metaq.zkserver import ZooKeeperServer, ZooKeeperTls, server_mode
from zk_layout import ZkLayout
from zk_layout.znode_acls import digest_identity

SUPER = ("super", "super-pw")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure_zk(pki: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    log_path = tmp_path_factory.mktemp("secure-zk") / "zookeeper.log"
    server = ZooKeeperServer(tick_time_ms=200, force_sync=False, log_path=log_path,
                             super_digest=digest_identity(*SUPER), enforce_auth=True,
                             tls=ZooKeeperTls(pki.server_pem, pki.ca, client_auth="want"))
    server.start()
    yield server
    server.stop()


def _auth(user: str, password: str | None = None) -> dict[str, str]:
    return {"zookeeper.auth": f"digest:{user}:{password or user + '-pw'}"}


def test_unauthenticated_session_is_refused_clearly(secure_zk: ZooKeeperServer) -> None:
    with pytest.raises(ZooKeeperAuthError, match="requires authentication .* set zookeeper.auth"):
        with session(secure_zk.connect_string, connection_timeout_ms=10000):
            pass
    with pytest.raises(ZooKeeperAuthError, match="requires authentication"):  # a chroot: same answer
        with session(secure_zk.connect_string + "/metaq", connection_timeout_ms=10000):
            pass


def test_tls_port_with_digest_and_acls(secure_zk: ZooKeeperServer, pki: Certs) -> None:
    tls = {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": str(pki.ca)}
    alice = security_from_properties({**tls, **_auth("alice"), "zookeeper.set.acl": "true"})
    with session(secure_zk.secure_connect_string + "/tls", security=alice, connection_timeout_ms=10000) as client:
        ZkLayout(client).write_offset("g", "t", 0, 5)
        assert ZkLayout(client).read_offset("g", "t", 0) == 5
    # with a client certificate too (ssl.clientAuth=want accepts one)
    mutual = security_from_properties({**tls, **_auth("alice"), "zookeeper.ssl.keystore.location": str(pki.client_pem)})
    with session(secure_zk.secure_connect_string + "/tls", security=mutual, connection_timeout_ms=10000) as client:
        assert ZkLayout(client).read_offset("g", "t", 0) == 5
    bob = security_from_properties({**tls, **_auth("bob")})
    with session(secure_zk.secure_connect_string + "/tls", security=bob, connection_timeout_ms=10000) as client:
        assert ZkLayout(client).read_offset("g", "t", 0) == 5
        with pytest.raises(ZooKeeperAuthError, match="cannot write /tls/consumers/g/offsets/t/0"):
            ZkLayout(client).write_offset("g", "t", 0, 0)


# kazoo does not close the TLS socket whose handshake failed (kazoo.handlers.utils.create_tcp_connection)
@pytest.mark.filterwarnings("ignore:unclosed <ssl.SSLSocket:ResourceWarning")
def test_tls_with_an_untrusted_server_certificate_fails_naming_tls(secure_zk: ZooKeeperServer, pki: Certs) -> None:
    wrong_ca = security_from_properties({"zookeeper.ssl.client.enable": "true", **_auth("alice"),
                                         "zookeeper.ssl.truststore.location": str(pki.other_ca)})
    with pytest.raises(ZooKeeperUnavailableError, match="over TLS .*zookeeper.ssl"):
        with session(secure_zk.secure_connect_string, security=wrong_ca, connection_timeout_ms=2000):
            pass
    gc.collect()


def test_super_user_passes_every_acl(secure_zk: ZooKeeperServer) -> None:
    with session(secure_zk.connect_string, security=security_from_properties(_auth("alice"))) as alice:
        alice.create("/private-to-alice", b"a", acl=CREATOR_ALL_ACL)
    with session(secure_zk.connect_string, security=security_from_properties(_auth(*SUPER))) as admin:
        admin.set("/private-to-alice", b"fixed by the admin")
        admin.delete("/private-to-alice")


def test_cli_starts_a_secure_server(pki: Certs, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "metaq", "zookeeper", "start", "--tick-time", "200", "--enforce-auth",
               "--super-digest", digest_identity(*SUPER), "--tls-keystore", str(pki.server_pem),
               "--tls-truststore", str(pki.ca)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as cli:
        try:
            assert cli.stdout is not None and cli.stderr is not None
            connect_string = cli.stdout.readline().strip()
            note = cli.stderr.readline()
            while "TLS client port" not in note and note:
                note = cli.stderr.readline()
            secure = note.rsplit(" ", 1)[-1].strip()
            tls = security_from_properties({"zookeeper.ssl.client.enable": "true", **_auth(*SUPER),
                                            "zookeeper.ssl.truststore.location": str(pki.ca)})
            with session(secure, security=tls, connection_timeout_ms=10000) as client:
                assert client.exists("/zookeeper") is not None
            with pytest.raises(ZooKeeperAuthError):
                with session(connect_string, connection_timeout_ms=10000):
                    pass
            cli.send_signal(signal.SIGTERM)
            assert cli.wait(30) == 0
        finally:
            if cli.poll() is None:
                cli.kill()
    host, _, port = connect_string.partition(":")
    assert server_mode(host, int(port), timeout=0.5) is None


def test_digest_cli_prints_the_identity() -> None:
    result = subprocess.run([sys.executable, "-m", "metaq", "zookeeper", "digest", "alice"], input="pw\n",
                            capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "digest:alice:V55/p2T0OpjQ+low3NVAH4aLvm0="
