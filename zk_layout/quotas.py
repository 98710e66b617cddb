"""Client quotas and dynamic broker configs in Kafka's ZooKeeper layout; part of
:class:`zk_layout.store.ZkLayout`.

    /config/users/<user>                     {"version":1,"config":{"producer_byte_rate":"1048576"}}
    /config/users/<user>/clients/<client>    the same, for a (user, client id) pair
    /config/clients/<client>                 the same, for a client id
    /config/brokers/<id or <default>>        {"version":1,"config":{"leader.replication.throttled.rate":"1000000"}}

Names are sanitized as Kafka's ``Sanitizer`` does; ``<default>`` stands for the default entity. Every write
is announced with a ``/config/changes`` notification naming the entity (``users/<u>/clients/<c>``,
``clients/<c>``, ``brokers/<id>``), in the same transaction, as Kafka's ``AdminZkClient.changeConfigs``. A
``/config/users/<u>`` node that only holds ``clients`` children may have no data (Kafka creates parents
empty): it reads as no config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from zk_layout import paths
from zk_layout.topic_formats import TopicConfig
from zk_layout.users import _Users


@dataclass(frozen=True)
class ClientQuotaEntity:
    """A quota entity: ``user`` and/or ``client_id`` (None: not part of it; ``<default>``: the default)."""

    user: str | None = None
    client_id: str | None = None

    @property
    def sort_key(self) -> tuple[str, str]:
        """Users first, then client ids, by name (None sorts as empty)."""
        return (self.user or "", self.client_id or "")

    def __str__(self) -> str:
        parts = [f"user={self.user}"] if self.user is not None else []
        parts += [f"client-id={self.client_id}"] if self.client_id is not None else []
        return ", ".join(parts)


def entity_of_change(entity_path: str) -> ClientQuotaEntity | None:
    """The entity a ``/config/changes`` notification names, or None if it names no client quota entity."""
    parts = entity_path.split("/")
    if len(parts) == 2 and parts[0] == "clients":
        return ClientQuotaEntity(None, unquote(parts[1]))
    if len(parts) == 2 and parts[0] == "users":
        return ClientQuotaEntity(unquote(parts[1]), None)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return ClientQuotaEntity(unquote(parts[1]), unquote(parts[3]))
    return None


def broker_of_change(entity_path: str) -> str | None:
    """The broker (id or ``<default>``) a notification ``brokers/<b>`` names, else None."""
    kind, _, name = entity_path.partition("/")
    return name if kind == "brokers" and name and "/" not in name else None


class _Quotas(_Users):
    def client_quota_entities(self) -> dict[ClientQuotaEntity, dict[str, str]]:
        """Every client quota entity node with its whole config (quota keys and others, e.g. SCRAM)."""
        found: dict[ClientQuotaEntity, dict[str, str]] = {}
        for name in self._children(paths.CONFIG_USERS):
            user = unquote(name)
            self._collect(found, ClientQuotaEntity(user, None))
            for client in self._children(paths.user_clients_path(user)):
                self._collect(found, ClientQuotaEntity(user, unquote(client)))
        for client in self._children(paths.CONFIG_CLIENTS):
            self._collect(found, ClientQuotaEntity(None, unquote(client)))
        return found

    def _collect(self, found: dict[ClientQuotaEntity, dict[str, str]], entity: ClientQuotaEntity) -> None:
        config = self.client_quota_config(entity)
        if config:
            found[entity] = config

    def client_quota_config(self, entity: ClientQuotaEntity) -> dict[str, str] | None:
        """The entity node's ``config`` map ({} for a node without data), or None without a node."""
        return self._entity_config(paths.client_quota_entity_path(entity.user, entity.client_id))

    def set_client_quota_config(self, entity: ClientQuotaEntity, config: Mapping[str, str]) -> None:
        """Write the entity's whole config (parents created as Kafka does) and announce it."""
        path = paths.client_quota_entity_path(entity.user, entity.client_id)
        self._ensure(path.rsplit("/", 1)[0])
        self._set_entity_config(path, paths.client_quota_entity_change(entity.user, entity.client_id), config,
                                f"quota entity {entity}")

    def broker_config(self, broker: str) -> dict[str, str]:
        """``/config/brokers/<broker>``'s dynamic configs ({} without a node)."""
        return self._entity_config(paths.broker_config_path(broker)) or {}

    def set_broker_config(self, broker: str, config: Mapping[str, str]) -> None:
        """Write a broker's (or ``<default>``) dynamic configs and announce them."""
        self._ensure(paths.CONFIG_BROKERS)
        self._set_entity_config(paths.broker_config_path(broker), f"brokers/{broker}", config, f"broker {broker}")

    def _entity_config(self, path: str) -> dict[str, str] | None:
        node = self._read(path)
        if node is None:
            return None
        if not node[0]:
            return {}
        return TopicConfig.decode(self.full_path(path), node[0]).config
