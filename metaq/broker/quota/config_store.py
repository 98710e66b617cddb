"""The broker's quota configuration, read from ZooKeeper at start and re-read on each ``/config/changes``
notification that concerns it (docs/quotas.md), without a restart:

* ``users/...`` and ``clients/...``: the client quota entity is re-read and the quota types updated;
* ``brokers/<id>`` and ``brokers/<default>``: the two replication throttle rates;
* a topic's config (applied by metaq/broker/admin_watcher.py, which hands it here): its throttled replicas.

Reads run in worker threads (ZooKeeper calls block); each update replaces the quota maps whole, so the
event loop never sees a half-applied change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from metaq.broker.config import BrokerConfig
from metaq.broker.quota.entities import quota_values
from metaq.broker.quota.rate import WindowConfig
from metaq.broker.quota.replication import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuota,
    parse_throttled_replicas,
)
from metaq.broker.quota.throttling import Quotas
from metaq.errors import MetaqError
from zk_layout import ZkLayout, paths
from zk_layout.quotas import ClientQuotaEntity, broker_of_change, entity_of_change

log = logging.getLogger(__name__)


def quotas_for(config: BrokerConfig) -> Quotas:
    """The broker's quotas with the sample windows its config sets (no quota configured yet)."""
    return Quotas.create(
        WindowConfig(config.quota_window_num, config.quota_window_size_seconds * 1000),
        WindowConfig(config.replication_quota_window_num, config.replication_quota_window_size_seconds * 1000))


class QuotaConfigStore:
    """Keeps ``quotas`` in step with ZooKeeper for broker ``broker_id``."""

    def __init__(self, layout: ZkLayout, quotas: Quotas, broker_id: int) -> None:
        self._layout = layout
        self._quotas = quotas
        self._broker_id = broker_id
        self._entities: dict[ClientQuotaEntity, dict[str, float]] = {}
        self._lock = threading.Lock()

    def load_all(self) -> None:
        """Blocking: every client quota entity and this broker's throttle rates."""
        stored = self._layout.client_quota_entities()
        with self._lock:
            self._entities = {e: v for e, config in stored.items() if (v := quota_values(config))}
            self._publish()
        self.reload_rates()
        if self._entities:
            ordered = sorted(self._entities.items(), key=lambda item: item[0].sort_key)
            log.info("client quotas: %s", "; ".join(f"{e}: {v}" for e, v in ordered))

    def on_change(self, entity_path: str) -> None:
        """Blocking: apply a ``/config/changes`` notification if it concerns quotas."""
        entity = entity_of_change(entity_path)
        if entity is not None:
            self.reload_entity(entity)
        elif broker_of_change(entity_path) is not None:
            self.reload_rates()

    def reload_entity(self, entity: ClientQuotaEntity) -> None:
        values = quota_values(self._layout.client_quota_config(entity) or {})
        with self._lock:
            if values == self._entities.get(entity, {}):
                return
            if values:
                self._entities[entity] = values
            else:
                self._entities.pop(entity, None)
            self._publish()
        log.info("client quotas of %s: %s", entity, values or "none")

    def reload_rates(self) -> None:
        """The replication throttle rates: this broker's node, else the ``<default>`` node."""
        mine = self._layout.broker_config(str(self._broker_id))
        default = self._layout.broker_config(paths.DEFAULT_ENTITY)
        for quota, key in ((self._quotas.leader, LEADER_RATE), (self._quotas.follower, FOLLOWER_RATE)):
            quota.set_bound(_rate(mine.get(key, default.get(key)), key))

    def on_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """A topic's config as applied: its leader and follower throttled replicas for this broker."""
        for quota, key in ((self._quotas.leader, LEADER_REPLICAS), (self._quotas.follower, FOLLOWER_REPLICAS)):
            _set_throttled(quota, topic, overrides.get(key), self._broker_id)

    def _publish(self) -> None:
        snapshot = {entity: dict(values) for entity, values in self._entities.items()}
        for quota in (self._quotas.produce, self._quotas.fetch, self._quotas.request):
            quota.update(snapshot)


def _rate(raw: str | None, key: str) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.error("ignoring %s=%r: not a number", key, raw)
        return None
    return value if value >= 0 else None


def _set_throttled(quota: ReplicationQuota, topic: str, raw: str | None, broker_id: int) -> None:
    try:
        quota.set_throttled(topic, parse_throttled_replicas(raw, broker_id) if raw else None)
    except MetaqError as e:
        log.error("topic %s: %s", topic, e)
        quota.set_throttled(topic, None)
