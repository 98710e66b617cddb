"""Topics: assignments, partition state, creation and the topic admin requests (partitions, configs,
deletion); part of :class:`zk_layout.store.ZkLayout`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from metaq.errors import ConfigError, StaleVersionError, TopicExistsError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import Watch, _failed_with, _Nodes
from zk_layout.brokers import new_cluster_id
from zk_layout.formats import ConfigChange, PartitionState, TopicAssignment, TopicConfig

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
                tx.create(config_path, config_data, acl=self._acl(config_path))
            else:
                tx.set_data(config_path, config_data, version=existing_config[1].version)
            # version 3 with a topic id, as Kafka 2.8+: brokers tell a re-created topic's logs from the old ones
            tx.create(topic_path, TopicAssignment({p: tuple(r) for p, r in assignment.items()}, version=3,
                                                  topic_id=new_cluster_id()).encode(), acl=self._acl(topic_path))
            tx.create(paths.partitions_path(topic), b"", acl=self._acl(topic_path))
            for partition in sorted(assignment):
                tx.create(paths.partition_path(topic, partition), b"", acl=self._acl(topic_path))
                if partition in states:
                    tx.create(paths.partition_state_path(topic, partition), states[partition].encode(),
                              acl=self._acl(topic_path))
            results = tx.commit()
        self._raise_for_transaction(topic, tx, results)
        log.info("created topic %s with %d partitions", topic, len(assignment))

    def _raise_for_transaction(self, topic: str, tx: TransactionRequest, results: list[object]) -> None:
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
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
        """Extend a topic to ``assignment`` (old partitions unchanged) in ONE transaction, conditional on
        ``/brokers/topics/<t>`` not having changed since it was read (else :class:`StaleVersionError`); the
        new partitions get the ``state`` nodes given in ``states`` (none: the controller creates them)."""
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
                tx.create(paths.partition_path(topic, partition), b"", acl=self._acl(topic_path))
                if partition in states:
                    tx.create(paths.partition_state_path(topic, partition), states[partition].encode(),
                              acl=self._acl(topic_path))
            results = tx.commit()
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
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
        """Kafka's ``/admin/delete_topics/<t>`` request; the brokers hosting the topic do the rest."""
        self._ensure(paths.ADMIN_DELETE_TOPICS)
        with self._translated("create", paths.delete_topic_marker_path(topic)):
            try:
                self._client.create(paths.delete_topic_marker_path(topic), b"",
                                    acl=self._acl(paths.ADMIN_DELETE_TOPICS))
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
