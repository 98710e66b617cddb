"""Kazoo plumbing under :class:`zk_layout.store.ZkLayout`: the one place kazoo errors are translated, and
the node primitives (read, list, ensure, upsert, delete, ephemeral create) the concept modules build on."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionClosedRequireSaslError,
    SessionExpiredError,
    ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.serialization import (
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.security import ACL

from metaq.errors import ConfigError, StaleVersionError, ZooKeeperAuthError, ZooKeeperError, ZooKeeperUnavailableError
from zk_layout.znode_acls import ZnodeAcls, acls_of

log = logging.getLogger(__name__)


_UNAVAILABLE = (
    ConnectionLoss,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
    ZookeeperStoppedError,
)


_ACTIONS = {"Create": "create", "Create2": "create", "SetData": "write", "Delete": "delete", "CheckVersion": "check"}

Watch = Callable[[WatchedEvent], None]
"""A one-shot kazoo watch. It runs on kazoo's event thread and must not block."""

K = TypeVar("K", bound=Hashable)

MULTI_MAX_OPS = 1000
"""Keys (one or two operations each) per ZooKeeper multi-op at most. A multi is one request, and a request
larger than the server's ``jute.maxbuffer`` (1 MB by default) is refused by closing the connection, so big
batches are split."""
MULTI_MAX_BYTES = 512 * 1024
"""Estimated request bytes per multi-op at most: half of the default ``jute.maxbuffer``."""
MULTI_OP_OVERHEAD = 64
"""Bytes per operation besides path and data in the estimate: op header, version, flags, an ACL."""


def multi_chunks(keys: Sequence[K], size: Callable[[K], int], *, max_ops: int | None = None,
                 max_bytes: int | None = None) -> list[list[K]]:
    """``keys`` split, in order, into runs of at most ``max_ops`` (default :data:`MULTI_MAX_OPS`) whose
    estimated sizes (``size(key)`` plus :data:`MULTI_OP_OVERHEAD` each) add up to at most ``max_bytes``
    (default :data:`MULTI_MAX_BYTES`): one multi-op each."""
    max_ops = MULTI_MAX_OPS if max_ops is None else max_ops
    max_bytes = MULTI_MAX_BYTES if max_bytes is None else max_bytes
    chunks: list[list[K]] = []
    current: list[K] = []
    used = 0
    for key in keys:
        cost = size(key) + MULTI_OP_OVERHEAD
        if current and (len(current) >= max_ops or used + cost > max_bytes):
            chunks.append(current)
            current, used = [], 0
        current.append(key)
        used += cost
    if current:
        chunks.append(current)
    return chunks


class _MultiRead:
    """ZooKeeper's ``multiRead`` request (opcode 22, servers 3.6+): many getData in one request and one
    reply, where pipelined ``get_async`` calls cost kazoo a request, a reply and two passes of its
    connection loop each. kazoo 2.11 does not offer it; this is its jute encoding, as kazoo's own
    ``Transaction`` is written. Each result is (data, stat) or the exception of that path (NoNodeError)."""

    type = 22

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths

    def serialize(self) -> bytearray:
        b = bytearray()
        for path in self.paths:
            b.extend(MultiHeader(GetData.type, False, -1).serialize())
            b.extend(write_string(path))
            b.extend(b"\0")  # no watch
        b.extend(multiheader_struct.pack(-1, True, -1))
        return b

    @staticmethod
    def deserialize(data: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | Exception]:
        results: list[tuple[bytes, ZnodeStat] | Exception] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GetData.type:
                value, offset = read_buffer(data, offset)
                results.append((value or b"", ZnodeStat._make(stat_struct.unpack_from(data, offset))))
                offset += stat_struct.size
            else:  # -1: an error result
                results.append(EXCEPTIONS[int_struct.unpack_from(data, offset)[0]]())
                offset += int_struct.size
            header, offset = MultiHeader.deserialize(data, offset)
        return results


class _Nodes:
    """The client, the chroot-aware paths in messages and the node primitives every concept module uses."""


    _multi_read = True  # the server answers multiRead; False once one did not (see _read_many)

    def __init__(self, client: KazooClient, *, stale_node_wait_s: float = 10.0,
                 acls: ZnodeAcls | None = None) -> None:
        self._client = client
        self._stale_node_wait_s = stale_node_wait_s
        self._acls = acls if acls is not None else acls_of(client)  # zookeeper.set.acl (zk_layout.znode_acls)

    @property
    def client(self) -> KazooClient:
        return self._client

    def full_path(self, path: str) -> str:
        """The path as seen without the chroot, for messages an operator can paste into zkCli."""
        chroot = self._client.chroot or ""
        return chroot + path if path != "/" or not chroot else chroot

    # -- plumbing ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _translated(self, action: str, path: str) -> Iterator[None]:
        """Translate kazoo errors at this one boundary."""
        try:
            yield
        except _UNAVAILABLE as e:
            raise ZooKeeperUnavailableError(f"cannot {action} {self.full_path(path)}: {e!r}") from e
        except NoAuthError as e:
            raise self._no_auth(action, path) from e
        except SessionClosedRequireSaslError as e:
            raise ZooKeeperAuthError(f"cannot {action} {self.full_path(path)}: the server requires authentication "
                                     "(enforce.auth.enabled); set zookeeper.auth", self.full_path(path)) from e
        except BadVersionError as e:
            raise StaleVersionError(f"cannot {action} {self.full_path(path)}: it changed since it was read") from e
        except KazooException as e:
            raise ZooKeeperError(f"cannot {action} {self.full_path(path)}: {e!r}") from e

    def _acl(self, path: str) -> list[ACL] | None:
        """The ACL to create ``path`` with: None (kazoo's default, OPEN_ACL_UNSAFE) without zookeeper.set.acl."""
        return None if self._acls is None else self._acls.for_path(path)

    def _no_auth(self, action: str, path: str, *, full: str | None = None, context: str = "") -> ZooKeeperAuthError:
        """NoAuth as a MetaqError naming the node (``full``: its path already with the chroot) and who we are
        (user names only, never a password)."""
        full = full or self.full_path(path)
        who = ", ".join(scheme + ":" + cred.partition(":")[0] for scheme, cred in self._client.auth_data) or "nobody"
        return ZooKeeperAuthError(f"{context}cannot {action} {full}: not allowed by its ACL (or its parent's) for "
                                  f"this session (authenticated as {who}); set zookeeper.auth to an identity the "
                                  f"ACL grants (see `getAcl {full}` in zkCli)", full)

    def _raise_if_no_auth(self, txn: TransactionRequest, results: list[object], context: str = "") -> None:
        """A transaction reports failures in its results instead of raising: raise an ACL refusal among them,
        naming the node of the refused operation; no retry could fix it."""
        for operation, result in zip(txn.operations, results, strict=False):
            if isinstance(result, NoAuthError):
                action = _ACTIONS.get(type(operation).__name__, "change")
                raise self._no_auth(action, "", full=operation.path, context=context) from result

    def _read(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat] | None:
        """Data and stat, or None if the node does not exist. With ``watch``, a missing node gets an exists
        watch instead (ZooKeeper sets no data watch on a missing node), so its creation is noticed too."""
        with self._translated("read", path):
            while True:
                try:
                    return self._client.get(path, watch=watch)  # type: ignore[no-any-return]
                except NoNodeError:
                    if watch is None or self._client.exists(path, watch=watch) is None:
                        return None
                    # created in between: read it (the loop ends when it is found or stays gone)

    def _children(self, path: str, watch: Watch | None = None) -> list[str]:
        """Sorted child names, or [] if the node does not exist (then ``watch`` fires on its creation)."""
        with self._translated("list", path):
            while True:
                try:
                    return sorted(self._client.get_children(path, watch=watch))
                except NoNodeError:
                    if watch is None or self._client.exists(path, watch=watch) is None:
                        return []

    def _ensure(self, path: str) -> None:
        with self._translated("create", path):
            self._client.ensure_path(path, acl=self._acl(path))

    def _ensure_paths(self, paths: Iterable[str], acl: Sequence[ACL] | None = None) -> None:
        """``ensure_path`` of each (nodes it creates get ``acl``; None: the ACL policy's for each node) in one
        round trip rather than up to five each (kazoo's exists, create, and again for a missing parent): the
        per-topic directories of a new group, which its members all create at once. Every ancestor and path
        is created, parents first, pipelined: ZooKeeper applies one session's requests in order, so a parent
        exists before its children's creates arrive; most answer NodeExists. A create can also be refused
        for a node that exists (ZooKeeper checks the parent's CREATE permission first): a node whose create
        failed otherwise is looked up before its error is raised. Errors are raised (callers translate them)."""
        wanted: set[str] = set()
        for path in paths:
            parts = path.strip("/").split("/")
            wanted.update("/" + "/".join(parts[:depth]) for depth in range(1, len(parts) + 1))
        ordered = sorted(wanted, key=lambda path: (path.count("/"), path))
        creates = [(path, self._client.create_async(path, b"", acl=acl if acl is not None else self._acl(path)))
                   for path in ordered]
        failed: dict[str, Exception] = {}
        for path, request in creates:
            try:
                request.get()
            except NodeExistsError:
                pass
            except _UNAVAILABLE:
                raise
            except KazooException as e:
                failed[path] = e
        lookups = [(path, self._client.exists_async(path)) for path in failed]
        missing = [path for path, request in lookups if request.get() is None]
        if missing:  # the shallowest: the cause of its descendants' NoNode
            raise failed[missing[0]]

    def _upsert(self, path: str, data: bytes) -> None:
        """Kafka's ``updatePersistentPath``: set, or create with parents; a racing creator is overwritten."""
        with self._translated("write", path):
            try:
                self._client.set(path, data)
            except NoNodeError:
                try:
                    self._client.create(path, data, makepath=True, acl=self._acl(path))
                except NodeExistsError:
                    self._client.set(path, data)

    def _delete(self, path: str, version: int = -1) -> bool:
        with self._translated("delete", path):
            try:
                self._client.delete(path, version=version)
                return True
            except NoNodeError:
                return False

    def _multi(self, ops: Mapping[K, tuple[Callable[[TransactionRequest], None], int]], *,
               raise_no_auth: bool = True) -> dict[K, object]:
        """Run the operations of each key as pipelined multi-ops of bounded size (:func:`multi_chunks`).
        ``ops[key]`` is (a function adding the key's ops to a transaction, their path and data bytes). Each
        chunk is all or nothing, the chunks are independent (an ACL refusal raises, unless ``raise_no_auth`` is
        false: then it is a key's result like any other). Returns each key's result: its last op's, or
        the exception of a failed chunk (the op that failed, ``RolledBackError`` for the others). Connection
        errors are raised (callers translate them)."""
        pending = []
        for chunk in multi_chunks(list(ops), lambda key: ops[key][1]):
            txn = self._client.transaction()
            ends = []
            for key in chunk:
                ops[key][0](txn)
                ends.append(len(txn.operations))
            pending.append((chunk, ends, txn, txn.commit_async()))
        results: dict[K, object] = {}
        for chunk, ends, txn, request in pending:
            outcome = request.get()
            if raise_no_auth:
                self._raise_if_no_auth(txn, outcome)
            start = 0
            for key, end in zip(chunk, ends, strict=True):
                mine = outcome[start:end]
                failure = (r for r in mine if isinstance(r, Exception) and not _rolled_back(r))
                results[key] = next(failure, mine[-1])
                start = end
        return results

    def _read_many(self, paths: Mapping[K, str]) -> dict[K, tuple[bytes, ZnodeStat] | Exception]:
        """Data and stat of each path (or its exception, e.g. NoNodeError), read with ``multiRead`` requests
        of bounded size (:func:`multi_chunks`), pipelined; with pipelined getData requests on a server
        without ``multiRead`` (before 3.6), which this client then remembers. Connection errors are raised
        (callers translate them)."""
        keys = list(paths)
        if _Nodes._multi_read and keys:
            chroot = self._client.chroot or ""
            chunks = multi_chunks(keys, lambda key: len(paths[key]))
            requests = []
            for chunk in chunks:
                request = self._client.handler.async_result()
                self._client._call(_MultiRead([chroot + paths[key] for key in chunk]), request)
                requests.append((chunk, request))
            try:
                result: dict[K, tuple[bytes, ZnodeStat] | Exception] = {}
                for chunk, request in requests:
                    result.update(zip(chunk, request.get(), strict=True))
                return result
            except _UNAVAILABLE:
                raise
            except Exception as e:  # noqa: BLE001 - an older server: UnimplementedError, or (3.4/3.5) an
                # empty reply that does not decode; either way, fall back for good
                log.info("ZooKeeper has no multiRead (%r): reading nodes one request each", e)
                _Nodes._multi_read = False
        gets = {key: self._client.get_async(path) for key, path in paths.items()}
        out: dict[K, tuple[bytes, ZnodeStat] | Exception] = {}
        for key, request in gets.items():
            try:
                out[key] = request.get()
            except NoNodeError as e:
                out[key] = e
        return out

    def session_id(self) -> int | None:
        """This client's ZooKeeper session (None while it has none): what ephemeral nodes belong to."""
        return self._session_id()

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    def _create_ephemeral(self, path: str, data: bytes, what: str, describe: Callable[[bytes], str],
                          wait_s: float | None = None) -> None:
        """Create an ephemeral node, resolving a conflict as Kafka's ``checkedEphemeralCreate`` does.

        A node owned by this session is ours already (a retried create whose reply was lost) and is updated.
        A node owned by another session is waited for, up to ``wait_s`` (default ``stale_node_wait_s``):
        after a kill -9 the previous run's node lives until its session expires, so a restart within the
        session timeout must wait rather than fail. A node still there after the wait is held by a live
        session, and a persistent node never expires: both are refused, naming the holder (``describe``
        renders the node's data)."""
        wait = self._stale_node_wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + wait
        announced = False
        while True:
            with self._translated("create", path):
                try:
                    self._client.create(path, data, ephemeral=True, makepath=True, acl=self._acl(path))
                    return
                except NodeExistsError:
                    pass
            existing = self._read(path)
            if existing is None:
                continue  # it vanished in between: try again at once
            old, stat = existing
            if stat.ephemeralOwner == self._session_id():
                with self._translated("write", path):
                    self._client.set(path, data)
                return
            if stat.ephemeralOwner == 0:
                raise ZooKeeperError(f"{what} already registered at {self.full_path(path)} by a persistent node "
                                     f"({describe(old)}), which no session expiry removes: delete it")
            if time.monotonic() >= deadline:
                raise ZooKeeperError(f"{what} already registered at {self.full_path(path)} by {describe(old)} "
                                     f"(session 0x{stat.ephemeralOwner:x}), still alive after waiting {wait:.0f}s "
                                     "for it to expire")
            if not announced:
                announced = True
                log.warning("%s: %s is held by session 0x%x (%s), probably left by a previous run that did not "
                            "shut down cleanly; waiting up to %.0fs for that session to expire", what,
                            self.full_path(path), stat.ephemeralOwner, describe(old), wait)
            self._wait_gone(path, deadline)

    def _wait_gone(self, path: str, deadline: float) -> None:
        gone = threading.Event()
        with self._translated("watch", path):
            if self._client.exists(path, watch=lambda _event: gone.set()) is None:
                return
        # Bounded by the caller's deadline; re-checked by the caller's loop either way.
        gone.wait(max(0.0, min(deadline - time.monotonic(), 1.0)))

    def _topic_partitions(self, root: str, group: str, topic_dir: Callable[[str, str], str]) -> list[tuple[str, int]]:
        """(topic, partition) pairs under ``root/<topic>/<partition>``; names that are not a Kafka topic or a
        decimal partition (MetaQ writes ``brokerId-partition``) are skipped with a warning."""
        pairs = []
        for topic in self._children(root):
            try:
                directory = topic_dir(group, topic)
            except ConfigError:
                log.warning("ignoring %s/%s: not a valid topic name", self.full_path(root), topic)
                continue
            for name in self._children(directory):
                if name.isascii() and name.isdigit():
                    pairs.append((topic, int(name)))
                else:
                    log.warning("ignoring %s/%s: not a Kafka partition number", self.full_path(directory), name)
        return sorted(pairs)


def _rolled_back(result: object) -> bool:
    """An op of a failed multi-op that did not fail itself (those before the failing op report
    RolledBackError, those after it RuntimeInconsistency): it can be sent again without the failing one."""
    return isinstance(result, RolledBackError | RuntimeInconsistency)


def _failed_with(request: IAsyncResult, *errors: type[Exception]) -> bool:
    """Wait for a pipelined request; True if it failed with one of ``errors`` (other errors are raised)."""
    try:
        request.get()
    except errors:
        return True
    return False
