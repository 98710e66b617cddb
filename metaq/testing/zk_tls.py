"""Throwaway certificates for ZooKeeper TLS tests, made with ``openssl`` at test time (never committed).

    pki = make_pki(tmp_path)
    ZooKeeperServer(tls=ZooKeeperTls(keystore=pki.server_pem, truststore=pki.ca_pem))
    {"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": str(pki.ca_pem)}

The server certificate is for ``127.0.0.1`` and ``localhost`` (subjectAltName), so host-name checking
(``zookeeper.ssl.endpoint.identification.algorithm=HTTPS``) passes; ``client_pem`` is a client certificate
and key signed by the same CA (for ``ssl.clientAuth=need``); ``other_ca_pem`` is a CA that signed nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from metaq.errors import ConfigError


@dataclass(frozen=True)
class Pki:
    ca_pem: Path
    server_pem: Path
    client_pem: Path
    other_ca_pem: Path


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ConfigError("openssl is not installed; it makes the test certificates")
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _self_signed_ca(directory: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN=metaq test {name}", cwd=directory)


def _signed(directory: Path, name: str, subject: str, extensions: str) -> Path:
    (directory / f"{name}.ext").write_text(extensions + "\n", encoding="ascii")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=directory)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)
    combined = directory / f"{name}.pem"
    combined.write_bytes((directory / f"{name}.crt").read_bytes() + (directory / f"{name}.key").read_bytes())
    combined.chmod(0o600)
    return combined


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    _self_signed_ca(directory, "ca")
    _self_signed_ca(directory, "other-ca")
    server = _signed(directory, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    client = _signed(directory, "client", "/CN=metaq-client", "extendedKeyUsage=clientAuth")
    return Pki(directory / "ca.pem", server, client, directory / "other-ca.pem")
