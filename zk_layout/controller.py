"""The controller's nodes (part of :class:`zk_layout.store.ZkLayout`): the ephemeral ``/controller``, the
persistent ``/controller_epoch``, partition state writes fenced by that epoch, the
``/isr_change_notification/isr_change_<seq>`` announcements and ``/admin/preferred_replica_election``.

Fencing, as Kafka's ``KafkaZkClient`` does it: every state write of a controller is one multi-op that first
checks ``/controller_epoch`` is still at the zkVersion the controller's own increment left it at. A
controller that lost its session (a zombie) finds the version moved and its write refused as a whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from metaq.errors import ControllerMovedError, MalformedNodeError, StaleVersionError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import Watch, _Nodes
from zk_layout.cluster_formats import ControllerInfo, decode_controller_epoch, encode_controller_epoch
from zk_layout.topic_formats import PartitionState

log = logging.getLogger(__name__)

ISR_CHANGE_PREFIX = "isr_change_"
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ControllerEpoch:
    """A won election: the epoch and the zkVersion of ``/controller_epoch`` every fenced write checks."""

    epoch: int
    zk_version: int


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    """``{"version":1,"partitions":[{"topic":"t","partition":0}]}`` (Kafka's IsrChangeNotificationSequenceZNode;
    ``/admin/preferred_replica_election`` has the same form)."""
    body = {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in sorted(partitions)]}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_isr_change(path: str, raw: bytes) -> list[TopicPartition]:
    try:
        body = json.loads(raw.decode("utf-8"))
        return [(str(e["topic"]), int(e["partition"])) for e in body["partitions"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise MalformedNodeError(path, raw, f"not an ISR change notification ({e})") from e


class _Controller(_Nodes):
    def controller(self, watch: Watch | None = None) -> ControllerInfo | None:
        """The elected controller, or None; ``watch`` fires when it changes or goes (or one is elected)."""
        node = self._read(paths.CONTROLLER, watch)
        return None if node is None else ControllerInfo.decode(self.full_path(paths.CONTROLLER), node[0])

    def discard_malformed_controller(self) -> bool:
        """Delete ``/controller`` if its data does not decode (written by hand or by a foreign tool), conditional
        on the version read: no broker could ever be elected over it (the node may even be persistent).
        True if it was deleted."""
        node = self._read(paths.CONTROLLER)
        if node is None:
            return False
        try:
            ControllerInfo.decode(self.full_path(paths.CONTROLLER), node[0])
            return False
        except MalformedNodeError:
            pass
        with self._translated("delete", paths.CONTROLLER):
            try:
                self._client.delete(paths.CONTROLLER, version=node[1].version)
            except (NoNodeError, BadVersionError):
                return False  # gone or rewritten meanwhile: the next read decides again
        return True

    def try_become_controller(self, broker_id: int) -> ControllerEpoch | None:
        """Create the ephemeral ``/controller`` for ``broker_id`` and increment ``/controller_epoch``; None if
        another broker holds ``/controller``. A node of our own session (a retried create) counts as won."""
        with self._translated("create", paths.CONTROLLER):
            try:
                self._client.create(paths.CONTROLLER, ControllerInfo(broker_id).encode(), ephemeral=True)
            except NodeExistsError:
                node = self._read(paths.CONTROLLER)
                if node is None or node[1].ephemeralOwner != self._session_id():
                    return None
        return self._increment_controller_epoch()

    def _increment_controller_epoch(self) -> ControllerEpoch:
        """+1 on ``/controller_epoch`` (created as 1), conditional on the version read: a racing winner
        (possible only across sessions) makes one of the two retry with the other's value."""
        while True:
            node = self._read(paths.CONTROLLER_EPOCH)
            with self._translated("write", paths.CONTROLLER_EPOCH):
                try:
                    if node is None:
                        stat = self._client.create(paths.CONTROLLER_EPOCH, encode_controller_epoch(1),
                                                   include_data=True)[1]
                        return ControllerEpoch(1, stat.version)
                    epoch = decode_controller_epoch(self.full_path(paths.CONTROLLER_EPOCH), node[0]) + 1
                    stat = self._client.set(paths.CONTROLLER_EPOCH, encode_controller_epoch(epoch),
                                            version=node[1].version)
                    return ControllerEpoch(epoch, stat.version)
                except (NodeExistsError, BadVersionError):
                    continue

    def controller_epoch(self) -> int | None:
        node = self._read(paths.CONTROLLER_EPOCH)
        return None if node is None else decode_controller_epoch(self.full_path(paths.CONTROLLER_EPOCH), node[0])

    def resign_controller(self) -> None:
        """Delete ``/controller`` if this session holds it (a clean shutdown: the others elect at once)."""
        node = self._read(paths.CONTROLLER)
        if node is not None and node[1].ephemeralOwner == self._session_id():
            self._delete(paths.CONTROLLER, node[1].version)

    def set_partition_state_fenced(
        self, fence: ControllerEpoch, topic: str, partition: int, state: PartitionState, version: int
    ) -> int:
        """Write a partition's state if ``/controller_epoch`` is still at ``fence`` and the state node at
        ``version``, in one multi-op. ControllerMovedError if the epoch moved (we are a zombie),
        StaleVersionError if the state changed (re-read and decide again). Returns the new zkVersion."""
        return self._set_data_fenced(fence, paths.partition_state_path(topic, partition), state.encode(), version)

    def _set_data_fenced(self, fence: ControllerEpoch | None, path: str, data: bytes, version: int,
                         unchanged: tuple[str, int] | None = None) -> int:
        """Set ``path`` to ``data`` if it is still at ``version``, with ``fence`` only while ``/controller_epoch``
        is at it, and with ``unchanged`` (a path and a version) only while that node is at that version, in one
        multi-op: ControllerMovedError (the epoch moved), StaleVersionError (``path`` or ``unchanged`` changed)
        or ZooKeeperError. Returns the new zkVersion."""
        with self._translated("write", path):
            tx = self._client.transaction()
            if fence is not None:
                tx.check(paths.CONTROLLER_EPOCH, fence.zk_version)
            if unchanged is not None:
                tx.check(*unchanged)
            tx.set_data(path, data, version=version)
            results = tx.commit()
        self._raise_if_no_auth(tx, results, f"writing {self.full_path(path)} failed: ")
        written = results[-1]
        if fence is not None and isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(f"{self.full_path(paths.CONTROLLER_EPOCH)} is no longer at controller epoch "
                                       f"{fence.epoch}: another broker is the controller") from results[0]
        if unchanged is not None and isinstance(results[-2], BadVersionError | NoNodeError):
            raise StaleVersionError(f"{self.full_path(unchanged[0])} changed since it was read") from results[-2]
        if isinstance(written, BadVersionError | NoNodeError):
            raise StaleVersionError(f"{self.full_path(path)} changed since it was read") from written
        if isinstance(written, Exception):
            raise ZooKeeperError(f"writing {self.full_path(path)} failed: {written!r}") from written
        return int(written.version)

    def create_partition_state_fenced(self, fence: ControllerEpoch, topic: str, partition: int,
                                      state: PartitionState) -> None:
        """Create a new partition's first state node (its parents as needed) if ``/controller_epoch`` is still at
        ``fence``, as Kafka's controller does for a partition whose assignment another tool wrote
        (``KafkaZkClient.createTopicPartitionStatesRaw``). ControllerMovedError if the epoch moved,
        StaleVersionError if the node exists meanwhile (re-read and decide again)."""
        path = paths.partition_state_path(topic, partition)
        self._ensure(path.rsplit("/", 1)[0])
        with self._translated("create", path):
            tx = self._client.transaction()
            tx.check(paths.CONTROLLER_EPOCH, fence.zk_version)
            tx.create(path, state.encode(), acl=self._acl(path))
            results = tx.commit()
        check, created = results[0], results[1]
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            raise ControllerMovedError(f"{self.full_path(paths.CONTROLLER_EPOCH)} is no longer at controller epoch "
                                       f"{fence.epoch}: another broker is the controller") from check
        if isinstance(created, NodeExistsError):
            raise StaleVersionError(f"{self.full_path(path)} was created meanwhile") from created
        if isinstance(created, Exception):
            raise ZooKeeperError(f"creating {self.full_path(path)} failed: {created!r}") from created

    def announce_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        """A sequential ``/isr_change_notification/isr_change_<seq>`` naming the partitions whose ISR changed."""
        path = f"{paths.ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}"
        with self._translated("create", path):
            self._client.create(path, encode_isr_change(partitions), sequence=True, makepath=True)

    def isr_changes(self, watch: Watch | None = None) -> dict[str, list[TopicPartition]]:
        """Pending ISR change notifications by node name, oldest first (a malformed one maps to [])."""
        changes: dict[str, list[TopicPartition]] = {}
        for name in self._children(paths.ISR_CHANGE_NOTIFICATION, watch):
            if not name.startswith(ISR_CHANGE_PREFIX):
                continue
            path = f"{paths.ISR_CHANGE_NOTIFICATION}/{name}"
            node = self._read(path)
            if node is None:
                continue
            try:
                changes[name] = decode_isr_change(self.full_path(path), node[0])
            except MalformedNodeError as e:
                log.warning("ignoring %s", e)
                changes[name] = []
        return changes

    def delete_isr_change(self, name: str) -> bool:
        return self._delete(f"{paths.ISR_CHANGE_NOTIFICATION}/{name}")

    def request_preferred_election(self, partitions: Iterable[TopicPartition]) -> bool:
        """Kafka's ``/admin/preferred_replica_election`` request (``{"version":1,"partitions":[...]}``), which
        the controller carries out and deletes; False if a request is already pending (as Kafka refuses)."""
        with self._translated("create", paths.PREFERRED_REPLICA_ELECTION):
            try:
                self._client.create(paths.PREFERRED_REPLICA_ELECTION, encode_isr_change(partitions), makepath=True)
            except NodeExistsError:
                return False
        return True

    def preferred_election_request(self, watch: Watch | None = None) -> list[TopicPartition] | None:
        """The pending preferred leader election's partitions, or None; ``watch`` fires when one is made."""
        node = self._read(paths.PREFERRED_REPLICA_ELECTION, watch)
        if node is None:
            return None
        try:
            return decode_isr_change(self.full_path(paths.PREFERRED_REPLICA_ELECTION), node[0])
        except MalformedNodeError as e:
            log.warning("ignoring %s", e)
            return []

    def finish_preferred_election(self) -> None:
        self._delete(paths.PREFERRED_REPLICA_ELECTION)

    def partition_states_versioned(
        self, partitions: Iterable[TopicPartition]
    ) -> Mapping[TopicPartition, tuple[PartitionState, int] | None]:
        """Each partition's state and zkVersion (None if missing or malformed: logged)."""
        result: dict[TopicPartition, tuple[PartitionState, int] | None] = {}
        for topic, partition in partitions:
            path = paths.partition_state_path(topic, partition)
            node = self._read(path)
            try:
                state = None if node is None else (PartitionState.decode(self.full_path(path), node[0]),
                                                   node[1].version)
            except MalformedNodeError as e:
                log.warning("ignoring %s", e)
                state = None
            result[(topic, partition)] = state
        return result
