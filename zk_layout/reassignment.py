"""Partition reassignment nodes (part of :class:`zk_layout.store.ZkLayout`): the
``/admin/reassign_partitions`` request Kafka's ``kafka-reassign-partitions --zookeeper`` writes, and the
controller's fenced writes of ``/brokers/topics/<t>`` with the ``adding_replicas``/``removing_replicas``
fields Kafka 2.4+ keeps there while a partition moves (docs/reassignment.md).

The request node is ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]}]}`` (an entry
may also carry ``log_dirs``, which is kept but not acted on). Kafka's ``ReassignPartitionsZNode``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from metaq.errors import MalformedNodeError
from zk_layout import paths
from zk_layout._nodes import Watch
from zk_layout.controller import ControllerEpoch, _Controller
from zk_layout.topic_formats import TopicAssignment

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def encode_reassignment_request(targets: Mapping[TopicPartition, tuple[int, ...]]) -> bytes:
    """The ``/admin/reassign_partitions`` data for ``targets`` (partition -> target replicas)."""
    body = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                         for (t, p), r in sorted(targets.items())]}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_reassignment_request(path: str, raw: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    """Partition -> target replicas of a ``/admin/reassign_partitions`` node (MalformedNodeError if it is not one)."""
    try:
        body = json.loads(raw.decode("utf-8"))
        result: dict[TopicPartition, tuple[int, ...]] = {}
        for entry in body["partitions"]:
            replicas = tuple(int(b) for b in entry["replicas"])
            result[(str(entry["topic"]), int(entry["partition"]))] = replicas
        return result
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise MalformedNodeError(path, raw, f"not a partition reassignment request ({e})") from e


class _Reassignment(_Controller):
    def request_reassignment(self, targets: Mapping[TopicPartition, tuple[int, ...]]) -> bool:
        """Create ``/admin/reassign_partitions`` (what ``kafka-reassign-partitions --zookeeper --execute``
        does); False if a request is pending already (Kafka's tool refuses then too)."""
        with self._translated("create", paths.REASSIGN_PARTITIONS):
            try:
                self._client.create(paths.REASSIGN_PARTITIONS, encode_reassignment_request(targets), makepath=True,
                                    acl=self._acl(paths.REASSIGN_PARTITIONS))
            except NodeExistsError:
                return False
        return True

    def reassignment_request(self, watch: Watch | None = None
                             ) -> tuple[dict[TopicPartition, tuple[int, ...]], int] | None:
        """The pending request's targets and the node's zkVersion, or None; ``watch`` fires when it is made
        or changes. A node that does not decode is removed (nothing could ever act on it) and read as None."""
        node = self._read(paths.REASSIGN_PARTITIONS, watch)
        if node is None:
            return None
        try:
            return decode_reassignment_request(self.full_path(paths.REASSIGN_PARTITIONS), node[0]), node[1].version
        except MalformedNodeError as e:
            log.error("removing %s", e)
            self._delete(paths.REASSIGN_PARTITIONS, node[1].version)
            return None

    def remove_from_reassignment_request(self, partitions: set[TopicPartition]) -> None:
        """Drop ``partitions`` from the request node (done, refused, or superseded by the API), deleting the
        node when none is left (Kafka's ``maybeRemoveFromZkReassignment``); retried on a concurrent change."""
        while True:
            current = self.reassignment_request()
            if current is None:
                return
            targets, version = current
            left = {key: replicas for key, replicas in targets.items() if key not in partitions}
            if len(left) == len(targets):
                return
            with self._translated("write", paths.REASSIGN_PARTITIONS):
                try:
                    if left:
                        self._client.set(paths.REASSIGN_PARTITIONS, encode_reassignment_request(left), version=version)
                    else:
                        self._client.delete(paths.REASSIGN_PARTITIONS, version=version)
                    return
                except BadVersionError:
                    continue
                except NoNodeError:
                    return

    def topic_assignment_versioned(self, topic: str, watch: Watch | None = None
                                   ) -> tuple[TopicAssignment, int] | None:
        """``/brokers/topics/<t>`` and its zkVersion, for a conditional write."""
        path = paths.topic_path(topic)
        node = self._read(path, watch)
        if node is None:
            return None
        return TopicAssignment.decode(self.full_path(path), node[0]), node[1].version

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment, version: int,
                             fence: ControllerEpoch | None = None, request_version: int | None = None) -> int:
        """Write ``/brokers/topics/<t>`` if still at ``version`` (else StaleVersionError) and, with ``fence``,
        only while ``/controller_epoch`` is at it (else ControllerMovedError), as Kafka's
        ``setTopicAssignmentRaw`` checks the controller's epoch zkVersion; with ``request_version``, only while
        ``/admin/reassign_partitions`` is at that version (a request acted on must still stand: a cancellation
        removes it first). The node is written as version 2 at least: the adding/removing fields exist from
        there. Returns the new zkVersion."""
        path = paths.topic_path(topic)
        if assignment.version < 2:
            assignment = TopicAssignment(assignment.partitions, version=2, topic_id=assignment.topic_id,
                                         adding_replicas=assignment.adding_replicas,
                                         removing_replicas=assignment.removing_replicas)
        unchanged = None if request_version is None else (paths.REASSIGN_PARTITIONS, request_version)
        return self._set_data_fenced(fence, path, assignment.encode(), version, unchanged)
