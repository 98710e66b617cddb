"""Throwaway TLS material for tests and benchmarks, made with the ``openssl`` command (never committed).

    certs = make_certs(tmp_path)      # CA, server cert (SAN 127.0.0.1, localhost), client cert
    certs.ca, certs.server_cert, certs.server_key, certs.client_cert, certs.client_key   # PEM paths

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


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, signed by the CA."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", DAYS, "-subj", "/O=test/CN=metaq-test-ca", cwd=directory)
    _leaf(directory, "server", "/O=test/CN=localhost",
          "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    _leaf(directory, "client", "/O=test/CN=client", "extendedKeyUsage=clientAuth\n")
    return Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                 directory / "client.pem", directory / "client.key")
