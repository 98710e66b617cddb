"""Committed offsets, plain and fenced (a member that lost a partition can never commit it again); part of
:class:`zk_layout.store.ZkLayout`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from metaq.errors import ConfigError, MalformedNodeError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import Watch, _Nodes, _rolled_back
from zk_layout.consumer_formats import decode_offset, encode_offset

NO_OFFSET = b"-1"  # what a fenced partition holds before its first commit; Kafka 0.8 reads -1 as "none"
FENCE_ROUNDS = 3  # batched fence rounds before the nodes still unsettled are fenced one at a time


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


class OffsetPath(NamedTuple):
    """What an offset node's path names."""

    group: str
    topic: str
    partition: int


def parse_offset_path(path: str) -> OffsetPath:
    """``/consumers/<g>/offsets/<t>/<p>`` -> (group, topic, partition), the inverse of
    :func:`paths.offset_path`, for the lines of Kafka's ExportZkOffsets; ConfigError for anything else."""
    parts = path.split("/")
    prefix = paths.CONSUMERS.split("/")
    if len(parts) != len(prefix) + 4 or parts[: len(prefix)] != prefix or parts[len(prefix) + 1] != "offsets":
        raise ConfigError(f"{path!r} is not an offset node path (/consumers/<group>/offsets/<topic>/<partition>)")
    group, _, topic, partition = parts[len(prefix):]
    if not (partition.isascii() and partition.isdigit()):
        raise ConfigError(f"{path!r}: partition {partition!r} is not a decimal number")
    result = OffsetPath(group, topic, int(partition))
    if paths.offset_path(*result) != path:  # validates the names and rejects e.g. a partition written "007"
        raise ConfigError(f"{path!r} is not in the canonical form {paths.offset_path(*result)!r}")
    return result


class _Offsets(_Nodes):
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

    def delete_offset(self, group: str, topic: str, partition: int) -> bool:
        """Remove one committed offset (``offsets delete``); False when there was none. The topic's node goes
        too once it has no partition left, as Kafka 0.8's tools leave no empty topic under ``offsets``."""
        deleted = self._delete(paths.offset_path(group, topic, partition))
        topic_path = paths.topic_offsets_path(group, topic)
        with self._translated("delete", topic_path), contextlib.suppress(NoNodeError, NotEmptyError):
            self._client.delete(topic_path)
        return deleted

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> committed offset for the whole group."""
        result = {}
        for topic, partition in self._topic_partitions(paths.offsets_path(group), group, paths.topic_offsets_path):
            offset = self.read_offset(group, topic, partition)
            if offset is not None:
                result[(topic, partition)] = offset
        return result

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
            # A few requests in all rather than two or three per partition: batched reads (multiRead), then
            # pipelined multi-ops of bounded size that rewrite every node. A node written or created in between
            # (e.g. by the previous owner's last commit) fails its multi-op, whose other nodes, up to a
            # thousand, are rolled back: they are fenced again batched, and only what a few rounds do not
            # settle is fenced one at a time.
            for _ in range(FENCE_ROUNDS):
                pending = {key: path for key, path in nodes.items() if key not in fenced}
                if not pending:
                    break
                fenced.update(self._fence_batch(group, pending))
        return {key: fenced[key] if key in fenced else self._fence_one(path) for key, path in nodes.items()}

    def _fence_batch(self, group: str, nodes: Mapping[tuple[str, int], str]) -> dict[tuple[str, int], FencedOffset]:
        """One round of :meth:`fence_offsets`: the nodes it fenced (a missing one is created holding -1 and
        rewritten in the same multi-op, so no second read)."""
        reads = self._read_many(nodes)
        missing = [key for key, read in reads.items() if isinstance(read, NoNodeError)]
        failure = next((read for read in reads.values() if isinstance(read, Exception)
                        and not isinstance(read, NoNodeError)), None)
        if failure is not None:
            raise failure
        self._ensure_paths(paths.topic_offsets_path(group, topic) for topic, _ in missing)
        stats = {key: read for key, read in reads.items() if isinstance(read, tuple)}
        current = {key: stats[key][0] if key in stats else NO_OFFSET for key in nodes}
        ops = {key: (partial(_rewrite_op, path, current[key], stats[key][1] if key in stats else None,
                             acl=self._acl(path)),
                     2 * (len(path) + len(current[key]))) for key, path in nodes.items()}
        return {key: self._fenced(nodes[key], current[key], result.version)
                for key, result in self._multi(ops).items() if isinstance(result, ZnodeStat)}

    def _fence_one(self, path: str) -> FencedOffset:
        with self._translated("fence", path):
            while True:
                try:
                    data, stat = self._client.get(path)
                except NoNodeError:
                    try:
                        self._client.create(path, NO_OFFSET, makepath=True, acl=self._acl(path))
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

    def read_fenced_offset(self, group: str, topic: str, partition: int,
                           watch: Watch | None = None) -> FencedOffset | None:
        """The committed offset (None for none or the ``-1`` of a fence) and the node's version, or None if
        the node does not exist: to tell whether a fenced commit whose reply was lost was applied, and (with
        ``watch``, which fires on the node's next change) whether someone else wrote an owned node."""
        path = paths.offset_path(group, topic, partition)
        node = self._read(path, watch)
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
            nodes = {key: paths.offset_path(group, *key) for key in pending}
            data = {key: encode_offset(offset) for key, (offset, _) in pending.items()}
            with self._translated("commit offsets of", paths.offsets_path(group)):
                results = self._multi({key: (partial(_set_op, path, data[key], pending[key][1]),
                                             len(path) + len(data[key])) for key, path in nodes.items()})
            failed = {key for key, result in results.items() if isinstance(result, BadVersionError | NoNodeError)}
            errors = [r for r in results.values() if isinstance(r, Exception) and not _rolled_back(r)
                      and not isinstance(r, BadVersionError | NoNodeError)]
            if errors:
                raise ZooKeeperError(f"offset commit for group {group} failed: {errors[0]!r}")
            committed.update({key: result.version for key, result in results.items() if isinstance(result, ZnodeStat)})
            lost |= failed
            # The other partitions of a multi-op that failed were rolled back: commit them again without it,
            # and without those whose version moved too (a new owner usually fenced many at once: found
            # with one pipelined round of reads rather than one failed multi-op each).
            again = [key for key, result in results.items() if _rolled_back(result)]
            stats = {key: self._client.exists_async(nodes[key]) for key in again}
            with self._translated("commit offsets of", paths.offsets_path(group)):
                moved = {key for key, request in stats.items()
                         if (stat := request.get()) is None or stat.version != pending[key][1]}
            lost |= moved
            pending = {key: pending[key] for key in again if key not in moved}
        return committed, lost


def _set_op(path: str, data: bytes, version: int, txn: TransactionRequest) -> None:
    txn.set_data(path, data, version=version)


def _rewrite_op(path: str, data: bytes, stat: ZnodeStat | None, txn: TransactionRequest,
                acl: Sequence[ACL] | None = None) -> None:
    """The fence: rewrite the node's own value conditional on the version read (``stat``), or create it
    holding ``data`` and rewrite that (``stat`` None: it did not exist), so its version moves either way."""
    if stat is None:
        txn.create(path, data, acl=acl)
        txn.set_data(path, data, version=0)
    else:
        txn.set_data(path, data, version=stat.version)
