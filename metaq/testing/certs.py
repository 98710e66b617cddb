"""Throwaway TLS material for tests and benchmarks, made with the ``openssl`` command (never committed); the
making is :mod:`metaq.certs` (as ``metaq certs create``), with short-lived certificates and a second CA.

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

from dataclasses import dataclass
from pathlib import Path

from metaq.certs import CertificateSet, create_certificates, make_ca

CLIENT_PRINCIPAL = "User:CN=client,O=test"
SERVER_PRINCIPAL = "User:CN=localhost,O=test"
"""The server certificate's principal: a broker's, when its replica fetchers present it (mTLS)."""
DAYS = 2


@dataclass(frozen=True)
class Certs(CertificateSet):
    """What :func:`metaq.certs.create_certificates` makes, and a second CA that signed nothing."""

    other_ca: Path


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, signed by the CA; and a
    second CA that signed nothing."""
    made = create_certificates(directory, organization="test", server_name="localhost", days=DAYS,
                               ca_name="metaq-test-ca", overwrite=True)
    other = make_ca(directory, "other-ca", "/O=test/CN=metaq-test-other-ca", DAYS)
    return Certs(**vars(made), other_ca=other)
