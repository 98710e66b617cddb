"""Broker registrations, the persistent paths and the cluster id (part of :class:`zk_layout.store.ZkLayout`)."""

from __future__ import annotations

import base64
import logging
import uuid

from kazoo.exceptions import NodeExistsError

from metaq.errors import MalformedNodeError, ZooKeeperError
from zk_layout import paths
from zk_layout._nodes import Watch, _Nodes
from zk_layout.broker_formats import BrokerInfo, decode_broker_id
from zk_layout.cluster_formats import ClusterId

log = logging.getLogger(__name__)


def new_cluster_id() -> str:
    """A 22-character URL-safe base64 UUID, as Kafka generates for ``/cluster/id`` and topic ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


class _Brokers(_Nodes):
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
                self._client.create(paths.CLUSTER_ID, ClusterId(new_cluster_id()).encode(), makepath=True,
                                    acl=self._acl(paths.CLUSTER_ID))
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

    def deregister_broker(self, broker_id: int) -> bool:
        """Delete ``/brokers/ids/<id>`` if this session holds it (a controlled shutdown: the controller moves
        the broker's leaderships at once instead of after its session timeout). True if deleted."""
        path = paths.broker_path(broker_id)
        node = self._read(path)
        if node is None or node[1].ephemeralOwner != self._session_id():
            return False
        return self._delete(path, node[1].version)

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
