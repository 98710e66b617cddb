"""A ZooKeeper server's TLS client port (docs/zookeeper-layout.md, "Authentication, TLS and znode ACLs").

TLS uses ZooKeeper's Netty connection factory with PEM files (ZooKeeper 3.6+; the Netty jars ship with pyspark's jars
and the Debian package); the plain port stays open for the four-letter words.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from metaq.errors import ZooKeeperServerError


@dataclass(frozen=True)
class ZooKeeperTls:
    """A TLS client port (``secureClientPort``): ``keystore`` is a PEM file with the server certificate and
    its (unencrypted) key, ``truststore`` a PEM file with the CA certificates client certificates must chain
    to; ``client_auth`` is ``none``, ``want`` or ``need`` (ZooKeeper's ``ssl.clientAuth``)."""

    keystore: Path
    truststore: Path
    client_auth: str = "none"

    def __post_init__(self) -> None:
        if self.client_auth not in ("none", "want", "need"):
            raise ZooKeeperServerError(f"TLS client_auth must be none, want or need, not {self.client_auth!r}")

    def config_lines(self, secure_port: int) -> list[str]:
        return [
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"secureClientPort={secure_port}",
            f"ssl.keyStore.location={Path(self.keystore).absolute()}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={Path(self.truststore).absolute()}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
        ]
