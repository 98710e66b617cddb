"""Topics: assignments, partition state, creation and the topic admin requests (partitions, configs,
deletion); part of :class:`zk_layout.store.ZkLayout`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache, partial
from typing import NamedTuple

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.security import ACL

from metaq.errors import ConfigError, InternalTopicError, StaleVersionError, TopicExistsError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import MULTI_MAX_BYTES, MULTI_OP_OVERHEAD, Watch, _failed_with, _Nodes, multi_chunks
from zk_layout.brokers import new_cluster_id
from zk_layout.topic_formats import INTERNAL_TOPICS, ConfigChange, PartitionState, TopicAssignment, TopicConfig

log = logging.getLogger(__name__)


@lru_cache(maxsize=1024)
def _partition_ids(path: str, data: bytes) -> tuple[int, ...]:
    return tuple(sorted(TopicAssignment.decode(path, data).partitions))


class _Topics(_Nodes):
    # -- topics ------------------------------------------------------------------------------------

    def topics(self, watch: Watch | None = None) -> list[str]:
        """Topic names, sorted; ``watch`` fires when a topic is created or deleted."""
        return self._children(paths.BROKER_TOPICS, watch)

    def topic_assignment(self, topic: str, watch: Watch | None = None) -> TopicAssignment | None:
        """Partition -> replicas; ``watch`` (a data watch) fires when partitions are added."""
        path = paths.topic_path(topic)
        node = self._read(path, watch)
        return None if node is None else TopicAssignment.decode(self.full_path(path), node[0])

    def topic_partition_ids(self, topics: Iterable[str],
                            watch: Watch | None = None) -> dict[str, tuple[int, ...] | None]:
        """Each topic's partition ids, sorted (None: no such topic), with pipelined reads: what a rebalance
        needs of :meth:`topic_assignment`, for all its topics in one round trip. ``watch`` as there (a missing
        topic gets an exists watch). Decoded assignments are memoised by their bytes."""
        reads = {topic: (path, self._client.get_async(path, watch=watch))
                 for topic in topics for path in (paths.topic_path(topic),)}
        result: dict[str, tuple[int, ...] | None] = {}
        with self._translated("read", paths.BROKER_TOPICS):
            for topic, (path, request) in reads.items():
                if _failed_with(request, NoNodeError):
                    assignment = self.topic_assignment(topic, watch)  # sets the exists watch; created meanwhile?
                    result[topic] = None if assignment is None else tuple(sorted(assignment.partitions))
                    continue
                result[topic] = _partition_ids(self.full_path(path), request.get()[0])
        return result

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
            for key, read in self._read_many(nodes).items():
                if isinstance(read, NoNodeError):
                    result[key] = None
                elif isinstance(read, Exception):
                    raise read
                else:
                    result[key] = PartitionState.decode(self.full_path(nodes[key]), read[0])
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
                self._client.create(path, data, makepath=True, acl=self._acl(path))
                return 0

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        states: Mapping[int, PartitionState],
        *,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create a topic: ``/config/topics/<t>``, ``/brokers/topics/<t>`` (the whole assignment), its
        ``partitions`` parents and the ``state`` nodes given in ``states``. Raises :class:`TopicExistsError`
        if the topic exists.

        One transaction when it fits a multi-op (:func:`multi_chunks`), else several: the first holds the config,
        the topic node and the first partitions, so readers never see a topic without its assignment; a
        partition whose nodes are not written yet has no leader (LEADER_NOT_AVAILABLE, as in Kafka between
        the topic node's creation and the controller's first election). If a later transaction fails, the
        topic is marked for deletion and ZooKeeperError raised: the creation is all or nothing, eventually."""
        _check_assignment(topic, assignment, states)
        topic_path = paths.topic_path(topic)
        if self._read(topic_path) is not None:
            raise TopicExistsError(f"topic {topic!r} already exists")
        self._ensure(paths.BROKER_TOPICS)
        self._ensure(paths.CONFIG_TOPICS)
        config_path = paths.topic_config_path(topic)
        existing_config = self._read(config_path)  # a leftover of a deleted topic is overwritten, as Kafka does
        config_data = TopicConfig(dict(config or {})).encode()
        # version 3 with a topic id, as Kafka 2.8+: brokers tell a re-created topic's logs from the old ones
        topic_data = _topic_node_data(topic, TopicAssignment({p: tuple(r) for p, r in assignment.items()},
                                                             version=3, topic_id=new_cluster_id()))
        acl = self._acl(topic_path)

        def head(tx: TransactionRequest) -> None:
            if existing_config is None:
                tx.create(config_path, config_data, acl=self._acl(config_path))
            else:
                tx.set_data(config_path, config_data, version=existing_config[1].version)
            tx.create(topic_path, topic_data, acl=acl)
            tx.create(paths.partitions_path(topic), b"", acl=acl)

        head_size = len(config_data) + len(topic_data) + 3 * len(config_path) + 2 * MULTI_OP_OVERHEAD
        for i, results in enumerate(self._partition_transactions(topic, sorted(assignment), states, acl,
                                                                 head=_Ops(head, head_size))):
            if i == 0:
                self._raise_for_transaction(topic, results)
            elif failure := _failure(results.results):
                self._abandon_creation(topic, failure)
        log.info("created topic %s with %d partitions", topic, len(assignment))

    def _partition_transactions(
        self, topic: str, partitions: Sequence[int], states: Mapping[int, PartitionState], acl: Sequence[ACL] | None,
        *, head: _Ops | None = None, tail: _Ops | None = None,
    ) -> Iterator[_Committed]:
        """Create the nodes of ``partitions`` (and their ``states``) between ``head`` and ``tail`` (each
        operations and their estimated bytes), in as few transactions under ZooKeeper's request limit as they
        fit (:func:`multi_chunks`), committed one after the other; yields each one's results and stops after
        a failed one."""
        ops: dict[int, _Ops] = {}
        if head is not None:
            ops[_HEAD] = head
        for partition in partitions:
            state = states[partition].encode() if partition in states else None
            size = 2 * len(paths.partition_state_path(topic, partition)) + len(state or b"") + MULTI_OP_OVERHEAD
            ops[partition] = _Ops(partial(_create_partition, topic, partition, state, acl), size)
        if tail is not None:
            ops[_TAIL] = tail
        for chunk in multi_chunks(list(ops), lambda key: ops[key].size):
            with self._translated("create", paths.partitions_path(topic)):
                tx = self._client.transaction()
                for key in chunk:
                    ops[key].add(tx)
                results = tx.commit()
            yield _Committed(tx, results)
            if _failure(results) is not None:
                return

    def _clear_leftovers(self, topic: str, old: TopicAssignment) -> int:
        """Remove partition nodes not in ``old`` (an earlier attempt's, failed half-way, or a concurrent one's)
        and return the data version of ``partitions``, which the attempt's last transaction checks: removing
        nodes bumps it, so of two concurrent attempts at most one completes (the other: StaleVersionError)."""
        parent = paths.partitions_path(topic)
        leftovers = [p for p in self.remaining_partition_nodes(topic) if p not in old.partitions]
        with self._translated("write", parent):
            if leftovers:
                log.info("topic %s: removing partition nodes %s of an unfinished attempt", topic, leftovers)
                self.delete_partition_nodes(topic, leftovers)
                return int(self._client.set(parent, b"").version)
            stat = self._client.exists(parent)
            return -1 if stat is None else int(stat.version)

    def _abandon_creation(self, topic: str, failure: Exception) -> None:
        """A topic whose later partition nodes could not be written is marked for deletion (the brokers remove
        what was written), so a failed creation leaves nothing behind once they have run."""
        try:
            self.mark_topic_for_deletion(topic)
        except ZooKeeperError as e:
            log.error("creating topic %s failed half-way and it could not be marked for deletion (delete it"
                      " with metaq topics delete): %s", topic, e)
        raise ZooKeeperError(f"creating topic {topic!r} failed after its first partitions were written (it is"
                             f" marked for deletion): {failure!r}") from failure

    def _raise_for_transaction(self, topic: str, committed: _Committed) -> None:
        tx, results = committed
        failure = _failure(results)
        if failure is None:
            return
        self._raise_if_no_auth(tx, results, f"creating topic {topic!r} failed: ")
        if isinstance(failure, NodeExistsError) and self._read(paths.topic_path(topic)) is not None:
            raise TopicExistsError(f"topic {topic!r} already exists") from failure
        raise ZooKeeperError(f"creating topic {topic!r} failed: {failure!r}") from failure

    # -- topic admin: partitions, configs, deletion ------------------------------------------------

    def add_partitions(
        self, topic: str, assignment: Mapping[int, Sequence[int]], states: Mapping[int, PartitionState]
    ) -> None:
        """Extend a topic to ``assignment`` (old partitions unchanged), conditional on ``/brokers/topics/<t>``
        not having changed since it was read (else :class:`StaleVersionError`).

        The new partitions' nodes are written first, in as many transactions under ZooKeeper's request limit
        as they need, and the topic node last, in the last one: readers only follow the assignment, so they
        see all new partitions at once or none. Nodes left by an earlier attempt that failed half-way (not in
        the assignment) are removed first."""
        _check_assignment(topic, assignment, states)
        topic_path = paths.topic_path(topic)
        node = self._read(topic_path)
        if node is None:
            raise ZooKeeperError(f"{self.full_path(topic_path)} does not exist")
        old = TopicAssignment.decode(self.full_path(topic_path), node[0])
        parent_version = self._clear_leftovers(topic, old)
        new_data = _topic_node_data(topic, TopicAssignment({p: tuple(r) for p, r in assignment.items()},
                                                           version=old.version, topic_id=old.topic_id))

        def tail(tx: TransactionRequest) -> None:
            tx.check(paths.partitions_path(topic), parent_version)
            tx.set_data(topic_path, new_data, version=node[1].version)

        added = sorted(set(assignment) - set(old.partitions))
        committed = list(self._partition_transactions(
            topic, added, states, self._acl(topic_path),
            tail=_Ops(tail, len(new_data) + 2 * len(topic_path) + 2 * MULTI_OP_OVERHEAD)))
        tx, results = committed[-1]
        failure = _failure(results)
        self._raise_if_no_auth(tx, results, f"adding partitions to topic {topic!r} failed: ")
        if isinstance(failure, BadVersionError):
            raise StaleVersionError(f"{self.full_path(topic_path)} changed while partitions were added") from failure
        if failure is not None:
            raise ZooKeeperError(f"adding partitions to topic {topic!r} failed: {failure!r}") from failure

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Write ``/config/topics/<t>`` and announce it with a sequential ``/config/changes`` node, in one
        transaction (as Kafka's ``AdminZkClient.changeTopicConfig``), so brokers apply it without a restart."""
        self._ensure(paths.CONFIG_TOPICS)
        self._set_entity_config(paths.topic_config_path(topic), f"topics/{topic}", config, f"topic {topic!r}")

    def _set_entity_config(self, config_path: str, entity_path: str, config: Mapping[str, str], what: str) -> None:
        """``/config/<entity_path>`` and its ``/config/changes`` notification, in one transaction."""
        self._ensure(paths.CONFIG_CHANGES)
        existing = self._read(config_path)
        with self._translated("write", config_path):
            tx = self._client.transaction()
            data = TopicConfig(dict(config)).encode()
            if existing is None:
                tx.create(config_path, data, acl=self._acl(config_path))
            else:
                tx.set_data(config_path, data, version=existing[1].version)
            tx.create(f"{paths.CONFIG_CHANGES}/{paths.CONFIG_CHANGE_PREFIX}",
                      ConfigChange(entity_path).encode(), sequence=True, acl=self._acl(paths.CONFIG_CHANGES))
            results = tx.commit()
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        self._raise_if_no_auth(tx, results, f"writing the config of {what} failed: ")
        if isinstance(failure, BadVersionError | NodeExistsError):
            raise StaleVersionError(f"{self.full_path(config_path)} changed while it was written") from failure
        if failure is not None:
            raise ZooKeeperError(f"writing the config of {what} failed: {failure!r}") from failure

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
        """Kafka's ``/admin/delete_topics/<t>`` request; the brokers hosting the topic do the rest.
        InternalTopicError for an internal topic (see :func:`check_deletable`)."""
        check_deletable(topic)
        self._ensure(paths.ADMIN_DELETE_TOPICS)
        with self._translated("create", paths.delete_topic_marker_path(topic)):
            try:
                self._client.create(paths.delete_topic_marker_path(topic), b"",
                                    acl=self._acl(paths.ADMIN_DELETE_TOPICS))
            except NodeExistsError:
                pass  # already being deleted

    def topics_marked_for_deletion(self, watch: Watch | None = None) -> list[str]:
        """Every ``/admin/delete_topics`` child, as written (also one naming an internal topic or no valid
        topic name: the brokers remove such markers, see :meth:`discard_deletion_marker`)."""
        return self._children(paths.ADMIN_DELETE_TOPICS, watch)

    def discard_deletion_marker(self, name: str) -> bool:
        """Remove ``/admin/delete_topics/<name>`` without deleting anything (a marker no topic deletion may
        follow); False if it was gone already. ``name`` is the child's name as listed, valid topic or not."""
        return self._delete(f"{paths.ADMIN_DELETE_TOPICS}/{name}")

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


_HEAD, _TAIL = -1, -2  # the keys of the first and last transaction's own operations among partition ids


class _Ops(NamedTuple):
    """Operations to add to a transaction, and their estimated request bytes (:func:`multi_chunks`)."""

    add: Callable[[TransactionRequest], None]
    size: int


class _Committed(NamedTuple):
    """One committed transaction and its results (one per operation)."""

    tx: TransactionRequest
    results: list[object]


def _failure(results: list[object]) -> Exception | None:
    """The operation that failed a transaction (not the others' RolledBackError), or None."""
    return next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)


def _create_partition(topic: str, partition: int, state: bytes | None, acl: Sequence[ACL] | None,
                      tx: TransactionRequest) -> None:
    tx.create(paths.partition_path(topic, partition), b"", acl=acl)
    if state is not None:
        tx.create(paths.partition_state_path(topic, partition), state, acl=acl)


def _topic_node_data(topic: str, assignment: TopicAssignment) -> bytes:
    """``/brokers/topics/<t>``'s data; ConfigError if it could not be written in one request (ZooKeeper's
    ``jute.maxbuffer``, 1 MB by default, closes the connection of a larger one)."""
    data = assignment.encode()
    if len(data) + MULTI_OP_OVERHEAD > MULTI_MAX_BYTES:
        raise ConfigError(f"topic {topic!r}: the assignment of {len(assignment.partitions)} partitions is"
                          f" {len(data)} bytes, over the {MULTI_MAX_BYTES} a ZooKeeper node may hold here")
    return data


def check_deletable(topic: str) -> None:
    """InternalTopicError unless ``topic`` may be deleted: the internal topics never may (deleting
    ``__consumer_offsets`` erases every group's committed offsets), as Kafka's ZooKeeper-era
    ``TopicCommand --delete`` refuses them (see docs/zookeeper-layout.md)."""
    if topic in INTERNAL_TOPICS:
        raise InternalTopicError(f"Topic {topic} is an internal topic and is not allowed to be deleted"
                                 " (it holds the groups' committed offsets)")


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
