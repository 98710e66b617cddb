"""TLS material for a broker and its clients, made with the ``openssl`` command: a CA, a server certificate
(for the hosts clients connect to) and a client certificate, signed by the CA. ``metaq certs create`` runs
this; the test harness (:mod:`metaq.testing.certs`) too.

    made = create_certificates(Path("tls"), hosts=["127.0.0.1", "localhost"])
    made.ca, made.server_cert, made.server_key, made.client_cert, made.client_key   # PEM paths
    made.server_pem, made.client_pem   # certificate and key in one file (ZooKeeper's PEM keystores)

The server certificate allows clientAuth too, as a broker's must: its replica fetchers present it to leaders
that ask for client certificates. Private keys are written unencrypted with mode 0600; keep them so.
For production, use your organisation's CA: this is for trying TLS out and for tests.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from metaq.errors import ConfigError, MetaqError

DEFAULT_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class CertificateSet:
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    server_pem: Path  # server_cert + server_key
    client_pem: Path  # client_cert + client_key


def openssl(*args: str | Path, cwd: Path) -> None:
    """Run ``openssl``; MetaqError with its stderr when it fails (or is missing)."""
    exe = shutil.which("openssl")
    if exe is None:
        raise MetaqError("the openssl command is needed to make certificates (apt-get install openssl)")
    done = subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise MetaqError(f"openssl {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")


def make_ca(directory: Path, name: str, subject: str, days: int) -> Path:
    """A self-signed CA: ``<name>.pem`` and ``<name>.key`` in ``directory``."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", str(days), "-subj", subject, cwd=directory)
    (directory / f"{name}.key").chmod(0o600)
    return directory / f"{name}.pem"


def make_leaf(directory: Path, name: str, subject: str, extensions: str, days: int, ca: str = "ca") -> None:
    """``<name>.pem`` and ``<name>.key`` signed by the CA ``<ca>.pem``/``<ca>.key`` in ``directory``."""
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", subject, cwd=directory)
    (directory / f"{name}.key").chmod(0o600)
    (directory / f"{name}.ext").write_text(extensions)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", str(days), "-sha256", "-extfile", f"{name}.ext", cwd=directory)
    for leftover in (f"{name}.csr", f"{name}.ext"):
        (directory / leftover).unlink()


def combined_pem(directory: Path, name: str) -> Path:
    """Certificate and key in one file, mode 0600 (ZooKeeper's PEM keystore format)."""
    combined = directory / f"{name}-combined.pem"
    combined.write_bytes((directory / f"{name}.pem").read_bytes() + (directory / f"{name}.key").read_bytes())
    combined.chmod(0o600)
    return combined


def subject_alt_names(hosts: Sequence[str]) -> str:
    """``IP:`` for addresses, ``DNS:`` for names: what clients check the broker's address against."""
    if not hosts:
        raise ConfigError("give at least one host the server certificate is for")
    names = []
    for host in hosts:
        try:
            names.append(f"IP:{ipaddress.ip_address(host)}")
        except ValueError:
            names.append(f"DNS:{host}")
    return ",".join(names)


def create_certificates(directory: Path, *, hosts: Sequence[str] = DEFAULT_HOSTS, organization: str = "metaq",
                        server_name: str | None = None, client_name: str = "client", days: int = 365,
                        ca_name: str = "metaq-ca", overwrite: bool = False) -> CertificateSet:
    """A CA, a server certificate for ``hosts`` (its CN ``server_name``, default the first name among them)
    and a client certificate (``CN=<client_name>``: Kafka's principal ``User:CN=<client_name>,O=<organization>``),
    signed by the CA, in ``directory``. Refuses to replace an existing CA unless ``overwrite``."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.pem").exists() and not overwrite:
        raise ConfigError(f"{directory / 'ca.pem'} exists: choose another directory (or overwrite)")
    os.chmod(directory, 0o700)
    names = [h for h in hosts if not _is_address(h)]
    cn = server_name or (names[0] if names else hosts[0])
    make_ca(directory, "ca", f"/O={organization}/CN={ca_name}", days)
    make_leaf(directory, "server", f"/O={organization}/CN={cn}",
              f"subjectAltName={subject_alt_names(hosts)}\nextendedKeyUsage=serverAuth,clientAuth\n", days)
    make_leaf(directory, "client", f"/O={organization}/CN={client_name}", "extendedKeyUsage=clientAuth\n", days)
    return CertificateSet(directory / "ca.pem", directory / "ca.key", directory / "server.pem",
                          directory / "server.key", directory / "client.pem", directory / "client.key",
                          combined_pem(directory, "server"), combined_pem(directory, "client"))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
