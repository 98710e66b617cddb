"""How a metaq process authenticates to ZooKeeper, encrypts the connection and protects the nodes it creates.

Every ZooKeeper client of metaq (consumer, broker, ops tools, Spark driver and tasks) takes the same keys;
they are documented in docs/zookeeper-layout.md ("Authentication, TLS and znode ACLs")::

    zookeeper.auth=digest:etl:s3cret            # or file:/etc/metaq/zk-auth (a file holding digest:user:password)
    zookeeper.set.acl=true                      # create nodes with ACLs (zk_layout.znode_acls); needs zookeeper.auth
    zookeeper.acl.ops.identity=digest:ops:NB7r...=   # ids granted ALL too (comma-separated); `metaq zookeeper digest`
    zookeeper.acl.world.read=true               # group nodes readable by everyone (lag monitors)
    zookeeper.ssl.client.enable=true            # Kafka 2.5+'s ZooKeeper TLS keys
    zookeeper.ssl.truststore.location=/etc/metaq/zk-ca.pem
    zookeeper.ssl.keystore.location=/etc/metaq/client.pem   # certificate and key (for ssl.clientAuth=need)

``ZooKeeperClientConfig`` is the typed mixin of these keys (the consumer's and the broker's configs extend
it); :meth:`ZooKeeperClientConfig.zookeeper_security` resolves them (reads the auth file, checks the TLS files)
into a :class:`ZooKeeperSecurity` that :func:`metaq.zkclient.connect` applies. Secrets (the password, the
key's passphrase) never appear in ``repr()``, logs or error messages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from metaq.config import Config, Properties, Secret, prop, read_small_file
from metaq.errors import ConfigError
from zk_layout.znode_acls import ZnodeAcls

__all__ = ["ZooKeeperClientConfig", "ZooKeeperSecurity", "security_from_properties"]

_MAX_AUTH_FILE_BYTES = 4096


def _pem_only(value: str) -> str | None:
    if value.upper() == "PEM":
        return None
    return ("is not supported by metaq's ZooKeeper client, which reads PEM files only: convert the store with "
            "`openssl pkcs12 -in store.p12 -out store.pem` (JKS: `keytool -importkeystore -deststoretype PKCS12` "
            "first) and set the type to PEM")


def _identification(value: str) -> str | None:
    return None if value.upper() in ("HTTPS", "") else "must be HTTPS (check the host name) or empty (do not)"


@dataclass(frozen=True)
class ZooKeeperClientConfig(Config):
    """The ZooKeeper security keys shared by every metaq config with ``zookeeper.connect``."""

    zookeeper_auth: Secret | None = prop("zookeeper.auth", None,
                                         doc="digest:user:password, or file:/path to a file holding it")
    zookeeper_set_acl: bool = prop("zookeeper.set.acl", False,
                                   doc="create nodes with ACLs (docs/zookeeper-layout.md); needs zookeeper.auth")
    zookeeper_acl_ops_identity: tuple[str, ...] = prop(
        "zookeeper.acl.ops.identity", (), doc="scheme:id list also granted ALL on created nodes")
    zookeeper_acl_world_read: bool = prop("zookeeper.acl.world.read", True,
                                          doc="false: group nodes readable only by their owners")
    zookeeper_ssl_client_enable: bool = prop("zookeeper.ssl.client.enable", False)
    zookeeper_client_cnxn_socket: str | None = prop(
        "zookeeper.clientCnxnSocket", None, doc="accepted for Kafka files (Java's Netty socket); no effect")
    zookeeper_ssl_keystore_location: str | None = prop("zookeeper.ssl.keystore.location", None,
                                                       doc="PEM file with the client certificate and its key")
    zookeeper_ssl_keystore_password: Secret | None = prop("zookeeper.ssl.keystore.password", None,
                                                          doc="the key's passphrase, if it is encrypted")
    zookeeper_ssl_keystore_type: str = prop("zookeeper.ssl.keystore.type", "PEM", check=_pem_only)
    zookeeper_ssl_truststore_location: str | None = prop("zookeeper.ssl.truststore.location", None,
                                                         doc="PEM file with the CA certificates to trust")
    zookeeper_ssl_truststore_password: Secret | None = prop("zookeeper.ssl.truststore.password", None,
                                                            doc="accepted for Kafka files; PEM needs none")
    zookeeper_ssl_truststore_type: str = prop("zookeeper.ssl.truststore.type", "PEM", check=_pem_only)
    zookeeper_ssl_endpoint_identification_algorithm: str = prop(
        "zookeeper.ssl.endpoint.identification.algorithm", "HTTPS", check=_identification)

    def _check_values(self) -> None:
        super()._check_values()
        self.zookeeper_security()  # a bad auth file or set.acl without auth is refused with the config

    def zookeeper_security(self) -> ZooKeeperSecurity:
        """Resolve the keys (read the auth file, check the files exist); ConfigError naming the key at fault."""
        auth = _auth_data(self.zookeeper_auth.reveal() if self.zookeeper_auth else None)
        acls = None
        if self.zookeeper_set_acl:
            if not auth:
                raise ConfigError("config 'zookeeper.set.acl': true needs 'zookeeper.auth' (nodes are created "
                                  "writable by the creator's identity, and an unauthenticated session has none)")
            acls = ZnodeAcls(self.zookeeper_acl_ops_identity, world_read=self.zookeeper_acl_world_read)
        elif self.zookeeper_acl_ops_identity:
            ZnodeAcls(self.zookeeper_acl_ops_identity)  # still checked, so a typo shows before set.acl is turned on
        if not self.zookeeper_ssl_client_enable:
            return ZooKeeperSecurity(auth, acls)
        ca = _existing("zookeeper.ssl.truststore.location", self.zookeeper_ssl_truststore_location)
        cert = _existing("zookeeper.ssl.keystore.location", self.zookeeper_ssl_keystore_location)
        return ZooKeeperSecurity(auth, acls, use_ssl=True, ca=ca, certfile=cert,
                                 keyfile_password=(self.zookeeper_ssl_keystore_password.reveal()
                                                   if self.zookeeper_ssl_keystore_password else None),
                                 check_hostname=self.zookeeper_ssl_endpoint_identification_algorithm.upper() == "HTTPS")


ZOOKEEPER_CLIENT_KEYS = frozenset(ZooKeeperClientConfig.keys())
"""The property names :class:`ZooKeeperClientConfig` takes (to pick them out of a larger file)."""


def security_from_properties(values: Properties) -> ZooKeeperSecurity:
    """The ZooKeeper security of a properties file or options map, ignoring keys that are not about it
    (an ops tool reading the consumer's file, the Spark source's options)."""
    picked = {k: v for k, v in values.items() if k in ZOOKEEPER_CLIENT_KEYS}
    return ZooKeeperClientConfig.from_properties(picked).zookeeper_security()


def _existing(key: str, location: str | None) -> str | None:
    if location is None:
        return None
    if not Path(location).is_file():
        raise ConfigError(f"config {key!r}: {location} is not a readable file")
    return location


def _auth_data(value: str | None) -> tuple[tuple[str, str], ...]:
    """``digest:user:password`` (or the same read from ``file:/path``) as kazoo's auth_data."""
    if not value:
        return ()
    source = "config 'zookeeper.auth'"
    if value.startswith("file:"):
        path = Path(value[len("file:"):])
        source = f"config 'zookeeper.auth' file {path}"
        raw = read_small_file(path, _MAX_AUTH_FILE_BYTES, source, "it should hold one digest:user:password line")
        value = raw.decode("utf-8", "replace").strip()
    scheme, _, credential = value.partition(":")
    user, sep, password = credential.partition(":")
    if scheme != "digest" or not sep or not user or not password:
        # never echo the value: it holds a password
        raise ConfigError(f"{source}: expected digest:user:password (the only scheme metaq's ZooKeeper client "
                          f"sends), got a value starting with {scheme[:10]!r}")
    return (("digest", credential),)


class KazooSecurityOptions(TypedDict, total=False):
    """The keyword arguments of kazoo's ``KazooClient`` that carry a :class:`ZooKeeperSecurity` (its
    :meth:`~ZooKeeperSecurity.kazoo_options`); absent when not used."""

    auth_data: list[tuple[str, str]]
    use_ssl: bool
    ca: str | None
    certfile: str | None
    keyfile: str | None
    keyfile_password: str | None
    verify_certs: bool
    check_hostname: bool


@dataclass(frozen=True)
class ZooKeeperSecurity:
    """Resolved ZooKeeper client security: kazoo's auth data, TLS options and the znode ACL policy (None:
    ``zookeeper.set.acl=false``). ``repr()`` shows the user names, never the passwords."""

    auth_data: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    acls: ZnodeAcls | None = None
    use_ssl: bool = False
    ca: str | None = None
    certfile: str | None = None
    keyfile_password: str | None = dataclasses.field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def identities(self) -> list[str]:
        """``digest:user`` for each credential: who this client is, for messages."""
        return [f"{scheme}:{credential.partition(':')[0]}" for scheme, credential in self.auth_data]

    def kazoo_options(self) -> KazooSecurityOptions:
        """The keyword arguments of KazooClient that carry this security."""
        options: KazooSecurityOptions = {}
        if self.auth_data:
            options["auth_data"] = list(self.auth_data)
        if self.use_ssl:
            options.update({"use_ssl": True, "ca": self.ca, "certfile": self.certfile, "keyfile": self.certfile,
                            "keyfile_password": self.keyfile_password, "verify_certs": True,
                            "check_hostname": self.check_hostname})
        return options

    def __str__(self) -> str:
        parts = [f"auth={','.join(self.identities) or 'none'}", f"set.acl={self.acls is not None}",
                 f"tls={self.use_ssl}"]
        return " ".join(parts)


NO_SECURITY = ZooKeeperSecurity()
