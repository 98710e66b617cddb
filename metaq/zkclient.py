"""Connecting to ZooKeeper: one place that turns a ``zookeeper.connect`` string into a started KazooClient.

Usage::

    client = connect("127.0.0.1:2181/kafka", session_timeout_ms=6000)   # creates /kafka if missing
    ...
    client.stop(); client.close()

    with session("127.0.0.1:2181/kafka") as client:   # stopped and closed on exit
        ...

A connection that cannot be made within ``connection_timeout_ms`` raises :class:`ZooKeeperUnavailableError`
(retriable); a malformed connect string raises :class:`ConfigError`; credentials the server refuses raise
:class:`ZooKeeperAuthError`.

``security`` (:class:`metaq.zksecurity.ZooKeeperSecurity`, from the ``zookeeper.auth``/``zookeeper.ssl.*``/
``zookeeper.set.acl`` keys) adds the digest credentials and TLS, and binds the process's znode ACL policy to
the client, so that every :class:`~zk_layout.ZkLayout` built over it creates nodes with those ACLs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import select
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    SessionClosedRequireSaslError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd
from kazoo.retry import KazooRetry

from metaq.errors import ConfigError, ZooKeeperAuthError, ZooKeeperError, ZooKeeperUnavailableError
from metaq.zklease import track_negotiated_timeout
from metaq.zksecurity import NO_SECURITY, ZooKeeperSecurity
from zk_layout import znode_acls
from zk_layout.paths import split_connect

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

F = TypeVar("F", bound="FileDescriptorLike")
"""What kazoo's connection thread waits on: sockets and pipe descriptors."""

log = logging.getLogger(__name__)

__all__ = ["close", "connect", "session"]


class _RedactAuth(logging.Filter):
    """kazoo logs every request it sends at DEBUG, the Auth request with its credential in clear
    (``Auth(auth_type=0, scheme='digest', auth='user:password')``): keep the user, mask the password."""

    _CREDENTIAL = re.compile(r"(auth=(?:b?)'[^':]*:)[^']*'")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "auth=" in message:
            record.msg, record.args = self._CREDENTIAL.sub(r"\1***'", message), None
        return True


logging.getLogger("kazoo.client").addFilter(_RedactAuth())  # kazoo's default logger, used by its connection too


_READABLE = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLERR | select.POLLHUP | select.POLLNVAL


class PollHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler with a cheaper ``select``.

    kazoo's connection thread calls ``select`` once per request sent and once per reply read, and kazoo's
    own implementation builds (and closes) an epoll selector each time: four system calls and several
    objects per call, about a third of a busy client's CPU in the scale benchmark (bench/scale.py). A
    ``poll`` object is one call and has no descriptor limit either (why kazoo left ``select.select``)."""

    def select(self, rlist: Sequence[F], wlist: Sequence[F], xlist: Sequence[F],
               timeout: float | None = None) -> tuple[list[F], list[F], list[F]]:
        poller = select.poll()
        wanted: dict[int, int] = {}
        for objects, mask in ((rlist, select.POLLIN | select.POLLPRI), (wlist, select.POLLOUT)):
            for obj in objects:
                fd = fileobj_to_fd(obj)
                wanted[fd] = wanted.get(fd, 0) | mask
        for fd, mask in wanted.items():
            poller.register(fd, mask)
        ready = dict(poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))))
        readable = [obj for obj in rlist if ready.get(fileobj_to_fd(obj), 0) & _READABLE]
        writable = [obj for obj in wlist if ready.get(fileobj_to_fd(obj), 0) & _WRITABLE]
        return readable, writable, []


def reconnect_policy(session_timeout_ms: int) -> KazooRetry:
    """How often kazoo tries to reconnect after losing ZooKeeper: forever, with a delay capped well below
    the session timeout. A ZooKeeper server that comes back (a restart, the end of a partition) keeps each
    session for one more session timeout; kazoo's default backoff doubles up to an hour, so after an outage
    of a few seconds a client would reconnect too late and lose a session (its registration, its
    partitions) that the server had kept for it, and after a long outage stay away about as long again."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.4,
                      max_delay=min(1.0, session_timeout_ms / 4000.0))


def connect(
    connect_string: str,
    *,
    session_timeout_ms: int = 6000,
    connection_timeout_ms: int = 6000,
    read_only: bool = False,
    security: ZooKeeperSecurity | None = None,
    **kazoo_options: object,
) -> KazooClient:
    """Start a KazooClient rooted at the chroot of ``connect_string``, creating the chroot if it is missing.

    The client is first started without the chroot so that a missing chroot (possibly several levels deep) can
    be created; kazoo only warns about a missing chroot and then fails every call with NoNodeError.
    ``kazoo_options`` go to :class:`KazooClient` (``connection_retry``, ``auth_data``, ...).
    """
    hosts, chroot = split_connect(connect_string)
    security = security or NO_SECURITY
    kazoo_options.setdefault("connection_retry", reconnect_policy(session_timeout_ms))
    kazoo_options = {**security.kazoo_options(), **kazoo_options}
    kazoo_options.setdefault("handler", PollHandler())
    try:
        client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000.0, read_only=read_only, **kazoo_options)
    except (ValueError, KazooException) as e:
        raise ConfigError(f"config 'zookeeper.connect': {connect_string!r}: {e}") from e
    track_negotiated_timeout(client)  # for session leases (metaq.zklease)
    znode_acls.bind(client, security.acls)
    try:
        client.start(timeout=connection_timeout_ms / 1000.0)
    except KazooTimeoutError as e:  # start() has already stopped and closed the client
        tls = " over TLS (check zookeeper.ssl.* and that the port is the server's secureClientPort)" \
            if security.use_ssl else ""
        raise ZooKeeperUnavailableError(
            f"cannot connect to ZooKeeper at {hosts}{tls} within {connection_timeout_ms} ms"
        ) from e
    except AuthFailedError as e:
        _close(client)
        raise ZooKeeperAuthError(f"ZooKeeper at {hosts} refused the credentials of zookeeper.auth "
                                 f"({', '.join(security.identities) or 'none given'})") from e
    try:
        _enter_chroot(client, chroot, read_only, probe=not security.auth_data)
    except SessionClosedRequireSaslError as e:
        _close(client)
        raise ZooKeeperAuthError(f"ZooKeeper at {hosts} requires authentication (enforce.auth.enabled) and "
                                 "this client has none: set zookeeper.auth=digest:user:password") from e
    except BaseException:
        _close(client)
        raise
    log.debug("connected to ZooKeeper %s (session 0x%x)", connect_string, client.client_id[0])
    return client


def _enter_chroot(client: KazooClient, chroot: str, read_only: bool, *, probe: bool = False) -> None:
    """Create the chroot if missing. ``probe``: without a chroot, still send one request, so that a server
    that refuses unauthenticated sessions says so now rather than at the first real call."""
    if not chroot:
        if probe:
            with contextlib.suppress(ConnectionLoss, ConnectionClosedError):
                client.exists("/")
        return
    try:
        if not read_only:
            client.ensure_path(chroot)
        elif client.exists(chroot) is None:
            log.warning("chroot %s does not exist and a read-only client cannot create it", chroot)
    except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as e:
        raise ZooKeeperUnavailableError(f"lost ZooKeeper while creating chroot {chroot}: {e!r}") from e
    except SessionClosedRequireSaslError:
        raise
    except KazooException as e:
        raise ZooKeeperError(f"cannot create chroot {chroot}: {e!r}") from e
    # kazoo reads ``chroot`` on every call; nothing has been sent through this client with a path yet.
    client.chroot = chroot


def close(client: KazooClient) -> None:
    """Stop and close ``client``, best effort (its session, and so its ephemeral nodes, end now)."""
    _close(client)


def _close(client: KazooClient) -> None:
    with contextlib.suppress(Exception):  # closing is best effort: the session dies with its timeout anyway
        client.stop()
    with contextlib.suppress(Exception):
        client.close()


@contextlib.contextmanager
def session(
    connect_string: str,
    *,
    session_timeout_ms: int = 6000,
    connection_timeout_ms: int = 6000,
    read_only: bool = False,
    security: ZooKeeperSecurity | None = None,
    **kazoo_options: object,
) -> Iterator[KazooClient]:
    """:func:`connect` as a context manager: the session is closed on exit, so its ephemeral nodes vanish."""
    client = connect(
        connect_string,
        session_timeout_ms=session_timeout_ms,
        connection_timeout_ms=connection_timeout_ms,
        read_only=read_only,
        security=security,
        **kazoo_options,
    )
    try:
        yield client
    finally:
        _close(client)
