"""Znode ACLs with ``zookeeper.set.acl=true``: which ACL each kind of node is created with.

The model (docs/zookeeper-layout.md, "Znode ACLs"):

* ``group``: ``/consumers/<g>`` and everything under it (``ids``, ``owners``, ``offsets``) -- ALL for the
  creator's identities (the group's own ZooKeeper identity, since its consumers create the nodes) and for the
  ops identities, READ for everyone (lag monitors such as Burrow) unless ``world_read`` is off. Another
  tenant's process can neither claim (create) nor release (delete) an owner node nor rewind an offset.
* ``cluster``: brokers, topics, partition state, controller, cluster id, topic configs, admin markers --
  creator ALL plus the ops identities, world READ (what Kafka does with ``zookeeper.set.acl``).
* ``sensitive``: ``/config/users`` (SCRAM credentials) and ``/kafka-acl*`` -- creator and ops identities only,
  nobody else can even read them.
* ``open``: ``/consumers`` itself (any tenant may start a group), anything else keeps ZooKeeper's
  ``OPEN_ACL_UNSAFE``.

Usage (code that creates nodes)::

    policy = ZnodeAcls(ops_identities=("digest:ops:NB7r...=",))
    client.create(path, data, acl=policy.for_path(path))
    bind(client, policy)          # every ZkLayout(client) then creates its nodes with these ACLs

Without a policy (``zookeeper.set.acl=false``, the default) nothing changes: kazoo's default,
``OPEN_ACL_UNSAFE``. The ACL ``CREATOR_ALL`` needs an authenticated session (ZooKeeper refuses it with
InvalidACL otherwise), which :mod:`metaq.zkclient` checks before connecting.
"""

from __future__ import annotations

import base64
import hashlib
import weakref
from dataclasses import dataclass
from typing import Literal

from kazoo.client import KazooClient
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Id, Permissions

from metaq.errors import ConfigError
from zk_layout import paths

__all__ = ["PathKind", "ZnodeAcls", "acl_for_path", "acls_of", "bind", "digest_identity", "parse_identity",
           "path_kind"]

PathKind = Literal["open", "group", "cluster", "sensitive"]

_SENSITIVE_PREFIXES = (paths.CONFIG_USERS, "/kafka-acl")  # /kafka-acl, /kafka-acl-extended, /kafka-acl-changes...
_CLUSTER_ROOTS = (paths.BROKERS, paths.CONTROLLER, paths.CONTROLLER_EPOCH, paths.CLUSTER, paths.CONFIG, "/admin",
                  paths.ISR_CHANGE_NOTIFICATION, paths.LATEST_PRODUCER_ID_BLOCK, paths.LOG_DIR_EVENT_NOTIFICATION)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def path_kind(path: str) -> PathKind:
    """The ACL kind of ``path`` (relative to the chroot); see the module docstring."""
    if path.startswith(paths.CONSUMERS + "/"):
        return "group"
    if any(path.startswith(prefix) for prefix in _SENSITIVE_PREFIXES):
        return "sensitive"
    if any(_under(path, root) for root in _CLUSTER_ROOTS):
        return "cluster"
    return "open"


def digest_identity(user: str, password: str) -> str:
    """The ZooKeeper id a ``digest`` session with ``user:password`` has: ``digest:user:base64(sha1(user:password))``
    (what ``addauth digest`` yields and what ``setAcl``/superDigest take)."""
    hashed = base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode("ascii")
    return f"digest:{user}:{hashed}"


def parse_identity(text: str, *, key: str = "zookeeper.acl.ops.identity") -> Id:
    """``scheme:id`` (``digest:ops:NB7r...=``, ``sasl:ops``, ``x509:CN=ops``, ``ip:10.0.0.0/8``) as a kazoo Id."""
    scheme, sep, ident = text.strip().partition(":")
    if not sep or not scheme or not ident:
        raise ConfigError(f"config {key!r}: {text!r} is not scheme:id (e.g. digest:ops:<base64 sha1>, "
                          "see `metaq zookeeper digest`)")
    if scheme == "digest":
        user, sep, hashed = ident.partition(":")
        if not sep or not user or len(hashed) != 28 or not hashed.endswith("="):
            raise ConfigError(f"config {key!r}: digest identity for {user or '?'!r} must be digest:user:<28-char "
                              "base64 sha1 of user:password> (print it with `metaq zookeeper digest USER`), "
                              "not a password")
    return Id(scheme, ident)


@dataclass(frozen=True)
class ZnodeAcls:
    """The ACL policy of one process: ``ops_identities`` (``scheme:id`` strings) get ALL on every node it
    creates besides its own identities; ``world_read`` keeps group nodes readable by everyone."""

    ops_identities: tuple[str, ...] = ()
    world_read: bool = True

    def __post_init__(self) -> None:
        for identity in self.ops_identities:
            parse_identity(identity)

    def _ops(self) -> list[ACL]:
        return [ACL(Permissions.ALL, parse_identity(identity)) for identity in self.ops_identities]

    def acl_for(self, kind: PathKind) -> list[ACL]:
        """The ACL list nodes of ``kind`` are created with."""
        if kind == "open":
            return list(OPEN_ACL_UNSAFE)
        owners = list(CREATOR_ALL_ACL) + self._ops()
        if kind == "sensitive" or (kind == "group" and not self.world_read):
            return owners
        return owners + list(READ_ACL_UNSAFE)

    def for_path(self, path: str) -> list[ACL]:
        return self.acl_for(path_kind(path))


_BOUND: weakref.WeakKeyDictionary[KazooClient, ZnodeAcls] = weakref.WeakKeyDictionary()


def bind(client: KazooClient, policy: ZnodeAcls | None) -> None:
    """Make ``policy`` the ACL policy of every :class:`~zk_layout.ZkLayout` built over ``client`` (the
    process's ``zookeeper.set.acl``, set once where the client is made: :func:`metaq.zkclient.connect`)."""
    if policy is None:
        _BOUND.pop(client, None)
    else:
        _BOUND[client] = policy


def acls_of(client: KazooClient) -> ZnodeAcls | None:
    return _BOUND.get(client)


def acl_for_path(client: KazooClient, path: str) -> list[ACL] | None:
    """The ACL to create ``path`` (relative to the chroot) with through ``client``: the bound policy's, or
    None (kazoo's default, OPEN_ACL_UNSAFE) without ``zookeeper.set.acl``. For code that creates nodes with
    the kazoo client itself: ``client.create(path, data, acl=acl_for_path(client, path))``."""
    policy = _BOUND.get(client)
    return None if policy is None else policy.for_path(path)
