"""Failed log directories (part of :class:`zk_layout.store.ZkLayout`, docs/log-dirs.md).

* ``/log_dir_event_notification/log_dir_event_<seq>``: Kafka's ``LogDirEventNotificationSequenceZNode``,
  ``{"version":1,"broker":<id>,"event":1}`` (event 1: a log directory failed), written by the broker whose
  directory failed; the controller consumes (deletes) it.
* ``/metaq/offline_replicas/<broker id>``: ``{"version":1,"partitions":[{"topic":"t","partition":0}]}``, the
  partitions the broker holds in failed directories. Kafka's controller learns them from the broker's
  LeaderAndIsr answer; metaq's controller speaks to brokers only through ZooKeeper, so the broker writes them
  here before the notification. A broker rewrites (normally: deletes) its node at start-up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from metaq.errors import MalformedNodeError
from zk_layout import paths
from zk_layout._nodes import Watch, _Nodes
from zk_layout.controller import decode_isr_change, encode_isr_change

log = logging.getLogger(__name__)

LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
TopicPartition = tuple[str, int]


def encode_log_dir_event(broker_id: int) -> bytes:
    body = {"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_log_dir_event(path: str, raw: bytes) -> int:
    """The broker id of a log dir event notification."""
    try:
        return int(json.loads(raw.decode("utf-8"))["broker"])
    except (ValueError, KeyError, TypeError) as e:
        raise MalformedNodeError(path, raw, f"not a log dir event notification ({e})") from e


class _LogDirs(_Nodes):
    def announce_log_dir_failure(self, broker_id: int, offline: Iterable[TopicPartition]) -> None:
        """Record the broker's offline partitions, then notify the controller (in that order: the
        notification wakes a controller that must find the partitions)."""
        self.set_offline_replicas(broker_id, offline)
        path = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{LOG_DIR_EVENT_PREFIX}"
        with self._translated("create", path):
            self._client.create(path, encode_log_dir_event(broker_id), sequence=True, makepath=True,
                                acl=self._acl(path))

    def set_offline_replicas(self, broker_id: int, offline: Iterable[TopicPartition]) -> None:
        """Replace the broker's offline partitions (none: the node is deleted)."""
        partitions = sorted(offline)
        path = paths.offline_replicas_path(broker_id)
        if partitions:
            self._upsert(path, encode_isr_change(partitions))
        else:
            self._delete(path)

    def offline_replicas(self, broker_ids: Iterable[int]) -> dict[int, set[TopicPartition]]:
        """The offline partitions of each of ``broker_ids`` that has any (a malformed node counts as none)."""
        result: dict[int, set[TopicPartition]] = {}
        for broker_id in broker_ids:
            path = paths.offline_replicas_path(broker_id)
            node = self._read(path)
            if node is None:
                continue
            try:
                result[broker_id] = set(decode_isr_change(self.full_path(path), node[0]))
            except MalformedNodeError as e:
                log.warning("ignoring %s", e)
        return result

    def log_dir_events(self, watch: Watch | None = None) -> dict[str, int]:
        """Pending log dir event notifications: node name -> broker id (-1 if malformed), oldest first."""
        events: dict[str, int] = {}
        for name in self._children(paths.LOG_DIR_EVENT_NOTIFICATION, watch):
            if not name.startswith(LOG_DIR_EVENT_PREFIX):
                continue
            path = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}"
            node = self._read(path)
            if node is None:
                continue
            try:
                events[name] = decode_log_dir_event(self.full_path(path), node[0])
            except MalformedNodeError as e:
                log.warning("ignoring %s", e)
                events[name] = -1
        return events

    def delete_log_dir_event(self, name: str) -> bool:
        return self._delete(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}")
