"""Throwaway TLS material for tests and benchmarks, made with the ``openssl`` command (never committed).

    certs = make_certs(tmp_path)      # CA, server cert (SAN 127.0.0.1, localhost), client cert
    certs.ca, certs.server_cert, certs.server_key, certs.client_cert, certs.client_key   # PEM paths
    certs.server_pem, certs.client_pem   # certificate and key in one file (ZooKeeper's PEM keystores)
    certs.other_ca                       # a CA that signed nothing (an untrusted server)

For ZooKeeper TLS: ``ZooKeeperServer(tls=ZooKeeperTls(keystore=certs.server_pem, truststore=certs.ca))`` and
``{"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": str(certs.ca)}``.

The client certificate's subject is ``/O=test/CN=client``, so Kafka's principal for it is
``User:CN=client,O=test`` (:data:`CLIENT_PRINCIPAL`). The server certificate also allows clientAuth, as a
broker's must: its replica fetchers present it to leaders that ask for client certificates.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from metaq.errors import MetaqError

CLIENT_PRINCIPAL = "User:CN=client,O=test"
SERVER_PRINCIPAL = "User:CN=localhost,O=test"
"""The server certificate's principal: a broker's, when its replica fetchers present it (mTLS)."""
DAYS = "2"


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    server_pem: Path  # server_cert + server_key
    client_pem: Path  # client_cert + client_key
    other_ca: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise MetaqError("the openssl command is needed to make test certificates")
    done = subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise MetaqError(f"openssl {args[0]} failed: {done.stderr.decode(errors='replace')}")


def _leaf(directory: Path, name: str, subject: str, extensions: str) -> None:
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=directory)
    (directory / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", DAYS, "-sha256", "-extfile", f"{name}.ext", cwd=directory)


def _ca(directory: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", DAYS, "-subj", f"/O=test/CN=metaq-test-{name}", cwd=directory)


def _combined(directory: Path, name: str) -> Path:
    combined = directory / f"{name}-combined.pem"
    combined.write_bytes((directory / f"{name}.pem").read_bytes() + (directory / f"{name}.key").read_bytes())
    combined.chmod(0o600)
    return combined


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, signed by the CA; and a
    second CA that signed nothing."""
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _leaf(directory, "server", "/O=test/CN=localhost",
          "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    _leaf(directory, "client", "/O=test/CN=client", "extendedKeyUsage=clientAuth\n")
    return Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                 directory / "client.pem", directory / "client.key", _combined(directory, "server"),
                 _combined(directory, "client"), directory / "other-ca.pem")
