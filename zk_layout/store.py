"""Typed reads and writes of the Kafka 0.8 ZooKeeper layout over a started KazooClient.

Usage::

    layout = ZkLayout(client)               # client rooted at the chroot (see metaq.zkclient.connect)
    layout.ensure_persistent_paths()
    layout.register_broker(BrokerInfo.plaintext(0, "127.0.0.1", 9092))   # ephemeral: gone with the session
    layout.create_topic("clicks", {0: [0], 1: [0]}, {0: state, 1: state})
    layout.write_offset("etl", "clicks", 0, 4213)
    layout.offsets("etl")                   # {("clicks", 0): 4213}

Errors: a missing node reads as None (or an empty list); a node whose data does not parse raises
:class:`MalformedNodeError` with the node's full path (chroot included); losing the connection raises
:class:`ZooKeeperUnavailableError` (retriable); anything else ZooKeeper refuses raises
:class:`ZooKeeperError`.
Every kazoo error is chained with ``from``.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
    ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from metaq.errors import (
    ConfigError,
    MalformedNodeError,
    StaleVersionError,
    TopicExistsError,
    ZooKeeperError,
    ZooKeeperUnavailableError,
)
from zk_layout import paths
from zk_layout.formats import (
    BrokerInfo,
    ClusterId,
    ConfigChange,
    PartitionState,
    TopicAssignment,
    TopicConfig,
    TopicCount,
    decode_broker_id,
    decode_offset,
    decode_owner,
    encode_offset,
    encode_owner,
)

log = logging.getLogger(__name__)


NO_OFFSET = b"-1"  # what a fenced partition holds before its first commit; Kafka 0.8 reads -1 as "none"


@dataclass(frozen=True, slots=True)
class FencedOffset:
    """A committed offset (None if the group has none) and the node version to commit against.
    ``malformed`` is set when the node held something that is no offset (e.g. ``-5``): ``offset`` is None
    then, and the consumer says so before applying ``auto.offset.reset``."""

    offset: int | None
    version: int
    malformed: MalformedNodeError | None = None


@dataclass(frozen=True, slots=True)
class OffsetNode:
    """An offset node as ops tools read it: the offset (None for the ``-1`` a fence writes before the first
    commit) and the node's ctime and mtime, which Burrow and KafkaOffsetMonitor read as the first and last
    commit times."""

    offset: int | None
    ctime_ms: int
    mtime_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerNode:
    """A member's registration with the session that holds it: 0 for a persistent node, which no session
    expiry will ever remove (a fake or left-over member, see :attr:`ephemeral`)."""

    registration: TopicCount
    session_id: int

    @property
    def ephemeral(self) -> bool:
        return self.session_id != 0


@dataclass(frozen=True, slots=True)
class OwnerNode:
    """An owner node with what its stat tells: the session that holds it (0 for a persistent node, which
    no session expiry will ever remove) and when it was claimed."""

    thread_id: str
    session_id: int
    ctime_ms: int

    @property
    def ephemeral(self) -> bool:
        return self.session_id != 0


def parse_offset_path(path: str) -> tuple[str, str, int]:
    """``/consumers/<g>/offsets/<t>/<p>`` -> (group, topic, partition), the inverse of
    :func:`paths.offset_path`, for the lines of Kafka's ExportZkOffsets; ConfigError for anything else."""
    parts = path.split("/")
    prefix = paths.CONSUMERS.split("/")
    if len(parts) != len(prefix) + 4 or parts[: len(prefix)] != prefix or parts[len(prefix) + 1] != "offsets":
        raise ConfigError(f"{path!r} is not an offset node path (/consumers/<group>/offsets/<topic>/<partition>)")
    group, _, topic, partition = parts[len(prefix):]
    if not (partition.isascii() and partition.isdigit()):
        raise ConfigError(f"{path!r}: partition {partition!r} is not a decimal number")
    result = (group, topic, int(partition))
    if paths.offset_path(*result) != path:  # validates the names and rejects e.g. a partition written "007"
        raise ConfigError(f"{path!r} is not in the canonical form {paths.offset_path(*result)!r}")
    return result

_UNAVAILABLE = (
    ConnectionLoss,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
    ZookeeperStoppedError,
)


Watch = Callable[[WatchedEvent], None]
"""A one-shot kazoo watch. It runs on kazoo's event thread and must not block."""


def new_cluster_id() -> str:
    """A 22-character URL-safe base64 UUID, as Kafka generates for ``/cluster/id`` and topic ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


class ZkLayout:
    """Typed access to the Kafka 0.8 ZooKeeper layout; see the module docstring.

    ``stale_node_wait_s`` bounds how long :meth:`register_broker` and :meth:`register_consumer` wait for an
    ephemeral node held by another session (after a kill -9, the previous run's) to expire before giving up
    (a broker passes a longer wait: its session timeout plus a margin). Thread-safe as kazoo is.
    """

    def __init__(self, client: KazooClient, *, stale_node_wait_s: float = 10.0) -> None:
        self._client = client
        self._stale_node_wait_s = stale_node_wait_s

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
            raise ZooKeeperError(f"cannot {action} {self.full_path(path)}: not allowed by its ACL") from e
        except BadVersionError as e:
            raise StaleVersionError(f"cannot {action} {self.full_path(path)}: it changed since it was read") from e
        except KazooException as e:
            raise ZooKeeperError(f"cannot {action} {self.full_path(path)}: {e!r}") from e

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
            self._client.ensure_path(path)

    def _upsert(self, path: str, data: bytes) -> None:
        """Kafka's ``updatePersistentPath``: set, or create with parents; a racing creator is overwritten."""
        with self._translated("write", path):
            try:
                self._client.set(path, data)
            except NoNodeError:
                try:
                    self._client.create(path, data, makepath=True)
                except NodeExistsError:
                    self._client.set(path, data)

    def _delete(self, path: str, version: int = -1) -> bool:
        with self._translated("delete", path):
            try:
                self._client.delete(path, version=version)
                return True
            except NoNodeError:
                return False

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
                    self._client.create(path, data, ephemeral=True, makepath=True)
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

    # -- persistent paths and cluster --------------------------------------------------------------

    def ensure_persistent_paths(self) -> None:
        """Create the persistent paths a Kafka broker creates at start-up (:data:`paths.PERSISTENT_PATHS`)."""
        for path in paths.PERSISTENT_PATHS:
            self._ensure(path)

    def cluster_id(self) -> str | None:
        node = self._read(paths.CLUSTER_ID)
        return None if node is None else ClusterId.decode(self.full_path(paths.CLUSTER_ID), node[0]).id

    def ensure_cluster_id(self) -> str:
        """The cluster id, created by whoever comes first."""
        existing = self.cluster_id()
        if existing is not None:
            return existing
        with self._translated("create", paths.CLUSTER_ID):
            try:
                self._client.create(paths.CLUSTER_ID, ClusterId(new_cluster_id()).encode(), makepath=True)
            except NodeExistsError:
                pass
        created = self.cluster_id()
        if created is None:  # deleted right after being created: nothing sensible to do but report it
            raise ZooKeeperError(f"{self.full_path(paths.CLUSTER_ID)} vanished while being created")
        return created

    # -- brokers -----------------------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo, *, stale_wait_s: float | None = None) -> None:
        """Register ``info`` as an ephemeral node. A node of another session (after a kill -9, the previous
        run's) is waited for up to ``stale_wait_s`` (default ``stale_node_wait_s``; a broker passes its
        session timeout plus a margin); if it outlives that, its broker is alive and "broker id N already
        registered" names that broker's endpoint."""
        path = paths.broker_path(info.id)

        def holder(old: bytes) -> str:
            try:
                previous = BrokerInfo.decode(self.full_path(path), old, broker_id=info.id)
            except MalformedNodeError:
                return f"a node holding {old[:80]!r}"
            return "the broker at " + (", ".join(previous.endpoints) or f"{previous.host}:{previous.port}")

        self._create_ephemeral(path, info.encode(), f"broker id {info.id}", holder, stale_wait_s)

    def broker_ids(self, watch: Watch | None = None, *, skipped: list[MalformedNodeError] | None = None) -> list[int]:
        """Live broker ids; ``watch`` fires when a broker comes or goes. A child whose name is not a broker id
        Kafka clients can be told about (0..2^31-1) is left out: logged, or appended to ``skipped``."""
        ids = []
        for name in self._children(paths.BROKER_IDS, watch):
            try:
                ids.append(decode_broker_id(self.full_path(f"{paths.BROKER_IDS}/{name}"), name))
            except MalformedNodeError as e:
                if skipped is None:
                    log.warning("ignoring %s", e)
                else:
                    skipped.append(e)
        return sorted(ids)

    def broker(self, broker_id: int, watch: Watch | None = None) -> BrokerInfo | None:
        path = paths.broker_path(broker_id)
        node = self._read(path, watch)
        return None if node is None else BrokerInfo.decode(self.full_path(path), node[0], broker_id=broker_id)

    def brokers(self, watch: Watch | None = None, *,
                skipped: list[MalformedNodeError] | None = None) -> dict[int, BrokerInfo]:
        """Live brokers by id (a broker that goes away between listing and reading is left out). ``watch``
        is set on the list and on every registration. With ``skipped``, a node that does not decode is left
        out and appended there (so that one bad node cannot hide the others); without, it raises."""
        result = {}
        for broker_id in self.broker_ids(watch, skipped=skipped):
            try:
                info = self.broker(broker_id, watch)
            except MalformedNodeError as e:
                if skipped is None:
                    raise
                skipped.append(e)
                continue
            if info is not None:
                result[broker_id] = info
        return result

    # -- topics ------------------------------------------------------------------------------------

    def topics(self, watch: Watch | None = None) -> list[str]:
        """Topic names, sorted; ``watch`` fires when a topic is created or deleted."""
        return self._children(paths.BROKER_TOPICS, watch)

    def topic_assignment(self, topic: str, watch: Watch | None = None) -> TopicAssignment | None:
        """Partition -> replicas; ``watch`` (a data watch) fires when partitions are added."""
        path = paths.topic_path(topic)
        node = self._read(path, watch)
        return None if node is None else TopicAssignment.decode(self.full_path(path), node[0])

    def topic_config(self, topic: str) -> TopicConfig | None:
        path = paths.topic_config_path(topic)
        node = self._read(path)
        return None if node is None else TopicConfig.decode(self.full_path(path), node[0])

    def partition_state(self, topic: str, partition: int, watch: Watch | None = None) -> PartitionState | None:
        versioned = self.partition_state_versioned(topic, partition, watch)
        return None if versioned is None else versioned[0]

    def partition_states(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState | None]:
        """:meth:`partition_state` of each of ``partitions``, read with pipelined requests (one round trip)."""
        nodes = {key: paths.partition_state_path(*key) for key in partitions}
        result: dict[tuple[str, int], PartitionState | None] = {}
        with self._translated("read", paths.BROKER_TOPICS):
            reads = {key: self._client.get_async(path) for key, path in nodes.items()}
            for key, request in reads.items():
                if _failed_with(request, NoNodeError):
                    result[key] = None
                else:
                    result[key] = PartitionState.decode(self.full_path(nodes[key]), request.get()[0])
        return result

    def partition_state_versioned(
        self, topic: str, partition: int, watch: Watch | None = None
    ) -> tuple[PartitionState, int] | None:
        """The state and its zkVersion, for a conditional :meth:`set_partition_state`."""
        path = paths.partition_state_path(topic, partition)
        node = self._read(path, watch)
        if node is None:
            return None
        return PartitionState.decode(self.full_path(path), node[0]), node[1].version

    def set_partition_state(self, topic: str, partition: int, state: PartitionState, version: int | None = None) -> int:
        """Write the state; with ``version``, only if the node is still at that zkVersion (else
        :class:`StaleVersionError`). Returns the new zkVersion."""
        path = paths.partition_state_path(topic, partition)
        data = state.encode()
        with self._translated("write", path):
            try:
                return int(self._client.set(path, data, version=-1 if version is None else version).version)
            except NoNodeError:
                if version is not None:
                    raise StaleVersionError(
                        f"{self.full_path(path)} does not exist (expected version {version})"
                    ) from None
                self._client.create(path, data, makepath=True)
                return 0

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        states: Mapping[int, PartitionState],
        *,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create a topic in ONE transaction: ``/config/topics/<t>``, ``/brokers/topics/<t>``, its
        ``partitions`` parents and the ``state`` nodes given in ``states``. Readers never see half a topic.
        Raises :class:`TopicExistsError` if the topic exists."""
        _check_assignment(topic, assignment, states)
        topic_path = paths.topic_path(topic)
        if self._read(topic_path) is not None:
            raise TopicExistsError(f"topic {topic!r} already exists")
        self._ensure(paths.BROKER_TOPICS)
        self._ensure(paths.CONFIG_TOPICS)
        config_path = paths.topic_config_path(topic)
        existing_config = self._read(config_path)  # a leftover of a deleted topic is overwritten, as Kafka does
        with self._translated("create", topic_path):
            tx = self._client.transaction()
            config_data = TopicConfig(dict(config or {})).encode()
            if existing_config is None:
                tx.create(config_path, config_data)
            else:
                tx.set_data(config_path, config_data, version=existing_config[1].version)
            # version 3 with a topic id, as Kafka 2.8+: brokers tell a re-created topic's logs from the old ones
            tx.create(topic_path, TopicAssignment({p: tuple(r) for p, r in assignment.items()}, version=3,
                                                  topic_id=new_cluster_id()).encode())
            tx.create(paths.partitions_path(topic), b"")
            for partition in sorted(assignment):
                tx.create(paths.partition_path(topic, partition), b"")
                if partition in states:
                    tx.create(paths.partition_state_path(topic, partition), states[partition].encode())
            results = tx.commit()
        self._raise_for_transaction(topic, results)
        log.info("created topic %s with %d partitions", topic, len(assignment))

    def _raise_for_transaction(self, topic: str, results: list[object]) -> None:
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        if failure is None:
            return
        if isinstance(failure, NodeExistsError) and self._read(paths.topic_path(topic)) is not None:
            raise TopicExistsError(f"topic {topic!r} already exists") from failure
        raise ZooKeeperError(f"creating topic {topic!r} failed: {failure!r}") from failure

    # -- topic admin: partitions, configs, deletion ------------------------------------------------

    def add_partitions(
        self, topic: str, assignment: Mapping[int, Sequence[int]], states: Mapping[int, PartitionState]
    ) -> None:
        """Extend a topic to ``assignment`` (old partitions unchanged) in ONE transaction, conditional on
        ``/brokers/topics/<t>`` not having changed since it was read (else :class:`StaleVersionError`)."""
        _check_assignment(topic, assignment, states)
        topic_path = paths.topic_path(topic)
        node = self._read(topic_path)
        if node is None:
            raise ZooKeeperError(f"{self.full_path(topic_path)} does not exist")
        old = TopicAssignment.decode(self.full_path(topic_path), node[0])
        with self._translated("write", topic_path):
            tx = self._client.transaction()
            new = TopicAssignment({p: tuple(r) for p, r in assignment.items()}, version=old.version,
                                  topic_id=old.topic_id)
            tx.set_data(topic_path, new.encode(), version=node[1].version)
            for partition in sorted(set(assignment) - set(old.partitions)):
                tx.create(paths.partition_path(topic, partition), b"")
                tx.create(paths.partition_state_path(topic, partition), states[partition].encode())
            results = tx.commit()
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        if isinstance(failure, BadVersionError):
            raise StaleVersionError(f"{self.full_path(topic_path)} changed while partitions were added") from failure
        if failure is not None:
            raise ZooKeeperError(f"adding partitions to topic {topic!r} failed: {failure!r}") from failure

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Write ``/config/topics/<t>`` and announce it with a sequential ``/config/changes`` node, in one
        transaction (as Kafka's ``AdminZkClient.changeTopicConfig``), so brokers apply it without a restart."""
        self._ensure(paths.CONFIG_CHANGES)
        self._ensure(paths.CONFIG_TOPICS)
        config_path = paths.topic_config_path(topic)
        existing = self._read(config_path)
        with self._translated("write", config_path):
            tx = self._client.transaction()
            data = TopicConfig(dict(config)).encode()
            if existing is None:
                tx.create(config_path, data)
            else:
                tx.set_data(config_path, data, version=existing[1].version)
            tx.create(f"{paths.CONFIG_CHANGES}/{paths.CONFIG_CHANGE_PREFIX}",
                      ConfigChange(f"topics/{topic}").encode(), sequence=True)
            results = tx.commit()
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        if isinstance(failure, BadVersionError | NodeExistsError):
            raise StaleVersionError(f"{self.full_path(config_path)} changed while it was written") from failure
        if failure is not None:
            raise ZooKeeperError(f"writing the config of topic {topic!r} failed: {failure!r}") from failure

    def config_changes(self, watch: Watch | None = None) -> list[str]:
        """Names of the ``/config/changes`` notifications, oldest first."""
        return self._children(paths.CONFIG_CHANGES, watch)

    def config_change(self, name: str) -> tuple[ConfigChange, int] | None:
        """A notification and its creation time (ms), or None if it was purged meanwhile."""
        path = f"{paths.CONFIG_CHANGES}/{name}"
        node = self._read(path)
        return None if node is None else (ConfigChange.decode(self.full_path(path), node[0]), node[1].ctime)

    def delete_config_change(self, name: str) -> bool:
        return self._delete(f"{paths.CONFIG_CHANGES}/{name}")

    def mark_topic_for_deletion(self, topic: str) -> None:
        """Kafka's ``/admin/delete_topics/<t>`` request; the brokers hosting the topic do the rest."""
        self._ensure(paths.ADMIN_DELETE_TOPICS)
        with self._translated("create", paths.delete_topic_marker_path(topic)):
            try:
                self._client.create(paths.delete_topic_marker_path(topic), b"")
            except NodeExistsError:
                pass  # already being deleted

    def topics_marked_for_deletion(self, watch: Watch | None = None) -> list[str]:
        return self._children(paths.ADMIN_DELETE_TOPICS, watch)

    def delete_partition_nodes(self, topic: str, partitions: Iterable[int]) -> None:
        """Remove ``/brokers/topics/<t>/partitions/<p>`` (with its state) of a topic being deleted."""
        for partition in partitions:
            path = paths.partition_path(topic, partition)
            with self._translated("delete", path):
                self._client.delete(path, recursive=True)

    def remaining_partition_nodes(self, topic: str) -> list[int]:
        return [int(p) for p in self._children(paths.partitions_path(topic)) if p.isdigit()]

    def finish_topic_deletion(self, topic: str) -> None:
        """Remove the topic's remaining nodes, its config and finally its deletion marker."""
        for path in (paths.topic_path(topic), paths.topic_config_path(topic), paths.delete_topic_marker_path(topic)):
            with self._translated("delete", path):
                self._client.delete(path, recursive=True)

    # -- consumers ---------------------------------------------------------------------------------

    def groups(self, watch: Watch | None = None) -> list[str]:
        return self._children(paths.CONSUMERS, watch)

    def group_exists(self, group: str) -> bool:
        """Whether ``/consumers/<g>`` exists (it outlives the members: its children are persistent)."""
        path = paths.consumer_group_path(group)
        with self._translated("read", path):
            return self._client.exists(path) is not None

    def delete_group(self, group: str) -> bool:
        """Remove ``/consumers/<g>`` and everything under it (what Kafka 0.8's console consumer did with the
        group it generated); False if it was not there."""
        path = paths.consumer_group_path(group)
        with self._translated("delete", path):
            try:
                self._client.delete(path, recursive=True)
                return True
            except NoNodeError:
                return False

    def register_consumer(self, group: str, consumer_id: str, topic_count: TopicCount) -> None:
        """Register a consumer (ephemeral). Consumer ids are unique per process start, so a node with the same
        id can only be our own previous session's: it is waited out, as Kafka does."""
        path = paths.consumer_id_path(group, consumer_id)
        self._create_ephemeral(path, topic_count.encode(), f"consumer {consumer_id}",
                               lambda _old: "a previous session of this consumer")

    def unregister_consumer(self, group: str, consumer_id: str) -> None:
        self._delete(paths.consumer_id_path(group, consumer_id))

    def consumer_ids(self, group: str, watch: Watch | None = None) -> list[str]:
        """Registered consumer ids, sorted as strings (the order Kafka's range assignor uses); ``watch``
        fires when a consumer joins or leaves: the rebalance trigger."""
        return self._children(paths.consumer_ids_path(group), watch)

    def consumer_node(self, group: str, consumer_id: str, watch: Watch | None = None) -> ConsumerNode | None:
        """The registration and the session holding it (see :class:`ConsumerNode`)."""
        path = paths.consumer_id_path(group, consumer_id)
        node = self._read(path, watch)
        if node is None:
            return None
        return ConsumerNode(TopicCount.decode(self.full_path(path), node[0]), node[1].ephemeralOwner)

    def consumer_nodes(self, group: str) -> dict[str, ConsumerNode]:
        """consumer id -> registration node, leaving out consumers that go away while being read."""
        result = {}
        for consumer_id in self.consumer_ids(group):
            node = self.consumer_node(group, consumer_id)
            if node is not None:
                result[consumer_id] = node
        return result

    def consumer_registrations(self, group: str) -> dict[str, TopicCount]:
        """consumer id -> registration, leaving out consumers that go away while being read."""
        return {consumer_id: node.registration for consumer_id, node in self.consumer_nodes(group).items()}

    def owner(self, group: str, topic: str, partition: int, watch: Watch | None = None) -> str | None:
        path = paths.owner_path(group, topic, partition)
        node = self._read(path, watch)
        return None if node is None else decode_owner(self.full_path(path), node[0])

    def owners(self, group: str) -> dict[tuple[str, int], str]:
        """(topic, partition) -> owning thread id."""
        result = {}
        for topic, partition in self._topic_partitions(paths.owners_path(group), group, paths.topic_owners_path):
            owner = self.owner(group, topic, partition)
            if owner is not None:
                result[(topic, partition)] = owner
        return result

    def owner_node(self, group: str, topic: str, partition: int) -> OwnerNode | None:
        path = paths.owner_path(group, topic, partition)
        node = self._read(path)
        if node is None:
            return None
        data, stat = node
        return OwnerNode(decode_owner(self.full_path(path), data), stat.ephemeralOwner, stat.ctime)

    def owner_nodes(self, group: str) -> dict[tuple[str, int], OwnerNode]:
        """(topic, partition) -> owner node with its session; see :class:`OwnerNode`."""
        result = {}
        for topic, partition in self._topic_partitions(paths.owners_path(group), group, paths.topic_owners_path):
            node = self.owner_node(group, topic, partition)
            if node is not None:
                result[(topic, partition)] = node
        return result

    def owners_of(self, group: str, partitions: Iterable[tuple[str, int]],
                  watch: Watch | None = None) -> dict[tuple[str, int], str | None]:
        """The owner thread id of each of ``partitions`` (None: no owner node), read with pipelined requests:
        one round trip in all rather than one each. ``watch`` is set on the nodes that exist, so it fires
        when one of them changes or is deleted (a rebalance waiting for an owner to release)."""
        with self._translated("read", paths.owners_path(group)):
            pending = [(key, paths.owner_path(group, *key)) for key in partitions]
            requests = [(key, path, self._client.get_async(path, watch=watch)) for key, path in pending]
            result: dict[tuple[str, int], str | None] = {}
            for key, path, request in requests:
                try:
                    data, _stat = request.get()
                except NoNodeError:
                    result[key] = None
                    continue
                result[key] = decode_owner(self.full_path(path), data)
        return result

    def claim_partition(self, group: str, topic: str, partition: int, thread_id: str) -> bool:
        """Create the ephemeral owner node. True if we own it now (also when this session already did),
        False if another consumer does; the caller retries after that owner releases it."""
        path = paths.owner_path(group, topic, partition)
        with self._translated("create", path):
            try:
                self._client.create(path, encode_owner(thread_id), ephemeral=True, makepath=True)
                return True
            except NodeExistsError:
                pass
        node = self._read(path)
        return node is not None and node[1].ephemeralOwner == self._session_id() and node[0] == encode_owner(thread_id)

    def claim_partitions(self, group: str, claims: Mapping[tuple[str, int], str]) -> dict[tuple[str, int], str | None]:
        """Create the ephemeral owner nodes of all ``claims`` ({(topic, partition): thread id}) in one
        transaction, so either all or none: one round trip, and no half-made claim is ever visible. A node
        this session already holds for the same thread id counts as claimed (as in :meth:`claim_partition`).
        Returns {} on success, else the partitions in the way and their owners (None: gone meanwhile); then
        nothing was created."""
        pending = dict(claims)
        owners: dict[tuple[str, int], str | None] = {}
        for _ in range(3):
            if not pending:
                return {}
            nodes = {key: paths.owner_path(group, *key) for key in pending}
            with self._translated("claim", paths.owners_path(group)):
                txn = self._client.transaction()
                for key, path in nodes.items():
                    txn.create(path, encode_owner(pending[key]), ephemeral=True)
                results = txn.commit()
                if not any(isinstance(r, Exception) for r in results):
                    return {}
                if any(isinstance(r, NoNodeError) for r in results):  # a topic's owners directory is missing
                    for topic in {topic for topic, _ in pending}:
                        self._client.ensure_path(paths.topic_owners_path(group, topic))
                    continue
                reads = {key: self._client.get_async(path) for key, path in nodes.items()}
                session = self._session_id()
                owners = {}
                for key, request in reads.items():
                    if _failed_with(request, NoNodeError):
                        continue
                    data, stat = request.get()
                    if stat.ephemeralOwner == session and data == encode_owner(pending[key]):
                        del pending[key]  # ours already (a create retried after its reply was lost)
                    else:
                        owners[key] = decode_owner(self.full_path(nodes[key]), data)
            if owners:
                return owners
        return owners or {key: None for key in pending}

    def release_partitions(self, group: str, claims: Mapping[tuple[str, int], str]) -> set[tuple[str, int]]:
        """:meth:`release_partition` for each of ``claims`` ({(topic, partition): thread id}), pipelined: two
        round trips in all. Returns the partitions whose owner node was deleted."""
        released: set[tuple[str, int]] = set()
        with self._translated("release", paths.owners_path(group)):
            nodes = {key: paths.owner_path(group, *key) for key in claims}
            reads = {key: self._client.get_async(path) for key, path in nodes.items()}
            versions = {}
            for key, request in reads.items():
                if _failed_with(request, NoNodeError):
                    continue
                data, stat = request.get()
                if data == encode_owner(claims[key]):
                    versions[key] = stat.version
            if not versions:
                return released
            txn = self._client.transaction()
            for key, version in versions.items():
                txn.delete(nodes[key], version=version)
            if not any(isinstance(result, Exception) for result in txn.commit()):
                return set(versions)
            # one of them changed in between (the transaction deleted none): one by one
            deletes = {key: self._client.delete_async(nodes[key], version=version) for key, version in versions.items()}
            for key, request in deletes.items():
                if not _failed_with(request, NoNodeError, BadVersionError):  # else: not ours to delete any more
                    released.add(key)
        return released

    def release_partition(self, group: str, topic: str, partition: int, thread_id: str | None = None) -> bool:
        """Delete the owner node (only if it names ``thread_id``, when given). True if a node was deleted."""
        path = paths.owner_path(group, topic, partition)
        if thread_id is None:
            return self._delete(path)
        node = self._read(path)
        if node is None or node[0] != encode_owner(thread_id):
            return False
        try:
            return self._delete(path, version=node[1].version)
        except StaleVersionError:  # rewritten by someone else meanwhile: not ours to delete any more
            return False

    def read_offset(self, group: str, topic: str, partition: int) -> int | None:
        path = paths.offset_path(group, topic, partition)
        node = self._read(path)
        return None if node is None else decode_offset(self.full_path(path), node[0])

    def offset_node(self, group: str, topic: str, partition: int) -> OffsetNode | None:
        path = paths.offset_path(group, topic, partition)
        node = self._read(path)
        if node is None:
            return None
        data, stat = node
        offset = decode_offset(self.full_path(path), data)
        return OffsetNode(offset if offset >= 0 else None, stat.ctime, stat.mtime)

    def offset_nodes(self, group: str) -> dict[tuple[str, int], OffsetNode]:
        """(topic, partition) -> offset node with its commit times, fenced ``-1`` nodes included."""
        result = {}
        for topic, partition in self._topic_partitions(paths.offsets_path(group), group, paths.topic_offsets_path):
            node = self.offset_node(group, topic, partition)
            if node is not None:
                result[(topic, partition)] = node
        return result

    def write_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Write the next offset to consume as plain decimal (creating parents), as Kafka 0.8 does."""
        self._upsert(paths.offset_path(group, topic, partition), encode_offset(offset))

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> committed offset for the whole group."""
        result = {}
        for topic, partition in self._topic_partitions(paths.offsets_path(group), group, paths.topic_offsets_path):
            offset = self.read_offset(group, topic, partition)
            if offset is not None:
                result[(topic, partition)] = offset
        return result

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


    # -- fenced offsets (a member that lost a partition can never commit it again) -----------------

    def fence_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], FencedOffset]:
        """Take the commit right for partitions this member has just claimed.

        Each offset node's version is bumped by a conditional rewrite of its own value, so that any
        previous owner, whose commits are conditional on the version it last saw, now fails. A missing
        node is created holding ``-1``, which Kafka 0.8 readers treat as "no offset" just like a missing
        node. Returns the committed offset (None if none) and the version to commit against.
        """
        nodes = {key: paths.offset_path(group, *key) for key in partitions}
        fenced: dict[tuple[str, int], FencedOffset] = {}
        with self._translated("fence offsets of", paths.offsets_path(group)):
            # A few requests in all rather than two or three per partition: pipelined reads, the missing
            # nodes created in one transaction, and every rewrite in one transaction. Whatever that does not
            # settle (a node written in between, e.g. by the previous owner's last commit) is fenced again
            # below, one at a time, exactly as before.
            reads = {key: self._client.get_async(path) for key, path in nodes.items()}
            missing = [key for key, request in reads.items() if _failed_with(request, NoNodeError)]
            if missing:
                for topic in sorted({topic for topic, _ in missing}):
                    self._client.ensure_path(paths.topic_offsets_path(group, topic))
                txn = self._client.transaction()
                for key in missing:
                    txn.create(nodes[key], NO_OFFSET)
                txn.commit()  # if one exists by now, none is created: those are fenced one at a time
                for key in missing:
                    reads[key] = self._client.get_async(nodes[key])
            current = {key: request.get() for key, request in reads.items() if not _failed_with(request, NoNodeError)}
            if current:
                txn = self._client.transaction()
                for key, (data, stat) in current.items():
                    txn.set_data(nodes[key], data, version=stat.version)
                results = txn.commit()
                if not any(isinstance(result, Exception) for result in results):
                    for (key, (data, _)), result in zip(current.items(), results, strict=True):
                        fenced[key] = self._fenced(nodes[key], data, result.version)
        return {key: fenced[key] if key in fenced else self._fence_one(path) for key, path in nodes.items()}

    def _fence_one(self, path: str) -> FencedOffset:
        with self._translated("fence", path):
            while True:
                try:
                    data, stat = self._client.get(path)
                except NoNodeError:
                    try:
                        self._client.create(path, NO_OFFSET, makepath=True)
                    except NodeExistsError:
                        pass
                    continue
                try:
                    new = self._client.set(path, data, version=stat.version)
                except BadVersionError:
                    continue  # written meanwhile (by the previous owner's last commit): read again
                except NoNodeError:
                    continue
                return self._fenced(path, data, new.version)

    def _fenced(self, path: str, data: bytes, version: int) -> FencedOffset:
        """A member must be able to take a partition whatever its offset node holds: a node that is no offset
        reads as none (the consumer warns, naming it, and applies auto.offset.reset); the next commit
        overwrites it."""
        try:
            offset = decode_offset(self.full_path(path), data)
        except MalformedNodeError as e:
            return FencedOffset(None, version, e)
        return FencedOffset(offset if offset >= 0 else None, version)

    def read_fenced_offset(self, group: str, topic: str, partition: int) -> FencedOffset | None:
        """The committed offset (None for none or the ``-1`` of a fence) and the node's version, or None if
        the node does not exist: to tell whether a fenced commit whose reply was lost was applied."""
        path = paths.offset_path(group, topic, partition)
        node = self._read(path)
        return None if node is None else self._fenced(path, node[0], node[1].version)

    def commit_fenced_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], tuple[int, int]]
    ) -> tuple[dict[tuple[str, int], int], set[tuple[str, int]]]:
        """Write ``{(topic, partition): (offset, expected_version)}`` in one transaction per attempt.

        Returns (new version per committed partition, partitions whose fence was lost). A partition is
        lost when its node changed behind our back (another owner fenced it, or an operator wrote it);
        the others are committed in a new transaction without it.
        """
        pending = dict(offsets)
        committed: dict[tuple[str, int], int] = {}
        lost: set[tuple[str, int]] = set()
        while pending:
            keys = list(pending)
            txn = self._client.transaction()
            for key in keys:
                offset, version = pending[key]
                txn.set_data(paths.offset_path(group, *key), encode_offset(offset), version=version)
            with self._translated("commit offsets of", paths.offsets_path(group)):
                results = txn.commit()
            failed = [k for k, r in zip(keys, results, strict=True) if isinstance(r, BadVersionError | NoNodeError)]
            if not failed:
                errors = [r for r in results if isinstance(r, Exception)]
                if errors:
                    raise ZooKeeperError(f"offset commit for group {group} failed: {errors[0]!r}")
                committed.update({k: r.version for k, r in zip(keys, results, strict=True)})
                return committed, lost
            for key in failed:
                lost.add(key)
                del pending[key]
        return committed, lost


def _failed_with(request: IAsyncResult, *errors: type[Exception]) -> bool:
    """Wait for a pipelined request; True if it failed with one of ``errors`` (other errors are raised)."""
    try:
        request.get()
    except errors:
        return True
    return False


def _check_assignment(
    topic: str, assignment: Mapping[int, Sequence[int]], states: Mapping[int, PartitionState]
) -> None:
    paths.validate_topic(topic)
    if not assignment:
        raise ConfigError(f"topic {topic!r}: at least one partition is needed")
    if sorted(assignment) != list(range(len(assignment))):
        raise ConfigError(f"topic {topic!r}: partitions must be 0..n-1, got {sorted(assignment)}")
    for partition, replicas in assignment.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise ConfigError(f"topic {topic!r} partition {partition}: replicas must be distinct and non-empty")
    extra = sorted(set(states) - set(assignment))
    if extra:
        raise ConfigError(f"topic {topic!r}: states given for unknown partitions {extra}")

