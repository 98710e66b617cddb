"""Consumer groups: member registrations and partition ownership (part of :class:`zk_layout.store.ZkLayout`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError
from kazoo.security import ACL

from metaq.errors import MalformedNodeError, StaleVersionError
from zk_layout import paths
from zk_layout._nodes import Watch, _failed_with, _Nodes
from zk_layout.consumer_formats import TopicCount, decode_owner, encode_owner


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


@lru_cache(maxsize=4096)
def _decode_topic_count(path: str, data: bytes) -> TopicCount:
    return TopicCount.decode(path, data)


def _create_ephemeral_op(path: str, data: bytes, txn: TransactionRequest, acl: Sequence[ACL] | None = None) -> None:
    txn.create(path, data, acl=acl, ephemeral=True)


def _delete_op(path: str, version: int, txn: TransactionRequest) -> None:
    txn.delete(path, version=version)


class _Groups(_Nodes):
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
        if self._acls is not None:  # /consumers stays open to every tenant: it must not get this group's ACL
            self._ensure(paths.CONSUMERS)
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
        for consumer_id, node in self.read_consumer_nodes(group, self.consumer_ids(group)).items():
            if isinstance(node, MalformedNodeError):
                raise node
            result[consumer_id] = node
        return result

    def read_consumer_nodes(self, group: str, consumer_ids: Iterable[str]
                            ) -> dict[str, ConsumerNode | MalformedNodeError]:
        """:meth:`consumer_node` of each of ``consumer_ids`` with pipelined reads (one round trip rather than
        one per member: a rebalance reads every member's registration); a registration that does not decode
        is returned as its error, one that goes away while being read is left out. Decoded registrations are
        memoised by their bytes: every member re-reads the same ones at each rebalance."""
        nodes = {cid: paths.consumer_id_path(group, cid) for cid in consumer_ids}
        result: dict[str, ConsumerNode | MalformedNodeError] = {}
        with self._translated("read", paths.consumer_ids_path(group)):
            for cid, read in self._read_many(nodes).items():
                if isinstance(read, NoNodeError):
                    continue
                if isinstance(read, Exception):
                    raise read
                path = nodes[cid]
                data, stat = read
                try:
                    result[cid] = ConsumerNode(_decode_topic_count(self.full_path(path), data), stat.ephemeralOwner)
                except MalformedNodeError as e:
                    result[cid] = e
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
                self._client.create(path, encode_owner(thread_id), ephemeral=True, makepath=True, acl=self._acl(path))
                return True
            except NodeExistsError:
                pass
        node = self._read(path)
        return node is not None and node[1].ephemeralOwner == self._session_id() and node[0] == encode_owner(thread_id)

    def claim_partitions(self, group: str, claims: Mapping[tuple[str, int], str]) -> dict[tuple[str, int], str | None]:
        """Create the ephemeral owner nodes of all ``claims`` ({(topic, partition): thread id}), all or none:
        pipelined multi-ops of bounded size (one round trip for a few thousand), and if any of them fails,
        the nodes the others created are deleted before this returns. A node this session already holds
        for the same thread id counts as claimed (as in :meth:`claim_partition`). Returns {} on success,
        else the partitions in the way and their owners (None: gone meanwhile); then nothing was created."""
        pending = dict(claims)
        owners: dict[tuple[str, int], str | None] = {}
        for _ in range(3):
            if not pending:
                return {}
            nodes = {key: paths.owner_path(group, *key) for key in pending}
            data = {key: encode_owner(thread_id) for key, thread_id in pending.items()}
            with self._translated("claim", paths.owners_path(group)):
                results = self._multi({key: (partial(_create_ephemeral_op, path, data[key], acl=self._acl(path)),
                                             len(path) + len(data[key]))
                                       for key, path in nodes.items()}, raise_no_auth=False)
                failed = {key for key, result in results.items() if isinstance(result, Exception)}
                if not failed:
                    return {}
                created = [key for key in nodes if key not in failed]
                if created:  # all or none: undo what the other chunks created (ours, version 0)
                    undo = self._multi({key: (partial(_delete_op, nodes[key], 0), len(nodes[key])) for key in created})
                    if any(isinstance(result, Exception) for result in undo.values()):
                        self.release_partitions(group, {key: pending[key] for key in created})
                refused = next(((key, r) for key in failed if isinstance(r := results[key], NoAuthError)), None)
                if refused is not None:  # after the undo: an ACL refusal leaves nothing claimed either
                    raise self._no_auth("create", nodes[refused[0]]) from refused[1]
                if any(isinstance(results[key], NoNodeError) for key in failed):  # an owners directory is missing
                    self._ensure_paths(paths.topic_owners_path(group, topic) for topic, _ in pending)
                    continue
                reads = {key: self._client.get_async(nodes[key]) for key in failed}  # who is in the way
                session = self._session_id()
                owners = {}
                for key, request in reads.items():
                    if _failed_with(request, NoNodeError):
                        continue
                    node_data, stat = request.get()
                    if stat.ephemeralOwner == session and node_data == data[key]:
                        del pending[key]  # ours already (a create retried after its reply was lost)
                    else:
                        owners[key] = decode_owner(self.full_path(nodes[key]), node_data)
            if owners:
                return owners
        return owners or {key: None for key in pending}

    def release_partitions(self, group: str, claims: Mapping[tuple[str, int], str]) -> set[tuple[str, int]]:
        """:meth:`release_partition` for each of ``claims`` ({(topic, partition): thread id}), pipelined: one
        batched read and one batched conditional delete in all. Returns the partitions whose owner node was
        deleted. A node is deleted only if it still names our thread, at the version read: a node an
        operator released and another member claimed meanwhile is theirs, never ours to delete."""
        released: set[tuple[str, int]] = set()
        with self._translated("release", paths.owners_path(group)):
            nodes = {key: paths.owner_path(group, *key) for key in claims}
            versions = {}
            for key, read in self._read_many(nodes).items():
                if isinstance(read, NoNodeError):
                    continue
                if isinstance(read, Exception):
                    raise read
                data, stat = read
                if data == encode_owner(claims[key]):
                    versions[key] = stat.version
            if not versions:
                return released
            results = self._multi({key: (partial(_delete_op, nodes[key], version), len(nodes[key]))
                                   for key, version in versions.items()})
            retry = {key: version for key, version in versions.items() if isinstance(results[key], Exception)}
            released |= set(versions) - set(retry)
            # one of them changed in between (its multi-op deleted none): those one by one
            deletes = {key: self._client.delete_async(nodes[key], version=version) for key, version in retry.items()}
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
