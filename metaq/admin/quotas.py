"""Client quotas for ``metaq quotas`` (docs/quotas.md): in ZooKeeper (``--zookeeper``, written as Kafka's
``kafka-configs --zookeeper`` writes them) or through a broker (``--bootstrap-server``: DescribeClientQuotas
and AlterClientQuotas, as Kafka's ``kafka-configs --bootstrap-server``). Both answer the same
:class:`EntityQuotas`; the filter and alteration rules are the broker's (metaq/broker/quota/admin.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.api_message import ApiMessage

from metaq.broker.quota.admin import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    FilterComponent,
    QuotaOp,
    apply_ops,
    describe,
    entity_of,
    entity_parts,
)
from metaq.broker.quota.entities import DEFAULT
from metaq.client.settings import ConnectionSettings
from metaq.errors import BrokerConnectionError, for_code
from metaq.json_types import JsonObject
from metaq.protocol.messages import ApiResponse, RequestFields
from zk_layout import ZkLayout
from zk_layout.quotas import ClientQuotaEntity


@dataclass(frozen=True)
class EntityQuotas:
    """One entity's quota values."""

    entity: ClientQuotaEntity
    values: dict[str, float]

    def to_json(self) -> JsonObject:
        return {"user": self.entity.user, "client_id": self.entity.client_id, "quotas": self.values}


class QuotaStore(Protocol):
    def describe(self, components: Sequence[FilterComponent]) -> list[EntityQuotas]: ...

    def alter(self, entity: ClientQuotaEntity, ops: Sequence[QuotaOp]) -> None: ...


def filter_for(entity: ClientQuotaEntity) -> list[FilterComponent]:
    """The filter components matching the named parts of ``entity`` (a None part matches anything)."""
    components = []
    for entity_type, name in entity_parts(entity):
        components.append(FilterComponent(entity_type, MATCH_DEFAULT) if name is None
                          else FilterComponent(entity_type, MATCH_EXACT, name))
    return components


class ZkQuotas:
    """Quotas in ZooKeeper; brokers apply a change through its ``/config/changes`` notification."""

    def __init__(self, layout: ZkLayout) -> None:
        self._layout = layout

    def describe(self, components: Sequence[FilterComponent]) -> list[EntityQuotas]:
        found = describe(self._layout.client_quota_entities(), components, strict=False)
        return [EntityQuotas(e, v) for e, v in sorted(found.items(), key=lambda item: item[0].sort_key)]

    def alter(self, entity: ClientQuotaEntity, ops: Sequence[QuotaOp]) -> None:
        current = self._layout.client_quota_config(entity) or {}
        updated = apply_ops(current, ops)
        if updated != current:
            self._layout.set_client_quota_config(entity, updated)


class BrokerQuotas:
    """Quotas through a broker's DescribeClientQuotas / AlterClientQuotas."""

    def __init__(self, bootstrap: str, settings: ConnectionSettings) -> None:
        self._bootstrap = bootstrap
        self._settings = settings

    def _send(self, request_class: type[ApiMessage], fields: RequestFields) -> ApiResponse:
        errors = []
        for address in (a.strip() for a in self._bootstrap.split(",") if a.strip()):
            host, _, port = address.rpartition(":")
            conn = self._settings.new_connection(host, int(port))
            try:
                conn.connect()
                return conn.send(request_class, fields)
            except BrokerConnectionError as e:
                errors.append(f"{address}: {e}")
            finally:
                conn.close()
        raise BrokerConnectionError(f"--bootstrap-server {self._bootstrap}: no broker answered ({'; '.join(errors)})")

    def describe(self, components: Sequence[FilterComponent]) -> list[EntityQuotas]:
        answer = self._send(DescribeClientQuotasRequest, {"components": [
            {"entity_type": c.entity_type, "match_type": c.match_type, "match": c.match} for c in components],
            "strict": False})
        if answer.error_code:
            raise for_code(answer.error_code)(answer.error_message or "DescribeClientQuotas failed")
        found = [EntityQuotas(entity_of((e.entity_type, e.entity_name) for e in entry.entity),
                              {v.key: v.value for v in entry.values}) for entry in answer.entries or []]
        return sorted(found, key=lambda q: q.entity.sort_key)

    def alter(self, entity: ClientQuotaEntity, ops: Sequence[QuotaOp]) -> None:
        answer = self._send(AlterClientQuotasRequest, {"entries": [{
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity_parts(entity)],
            "ops": [{"key": op.key, "value": op.value or 0.0, "remove": op.value is None} for op in ops]}],
            "validate_only": False})
        for entry in answer.entries:
            if entry.error_code:
                raise for_code(entry.error_code)(entry.error_message or "AlterClientQuotas failed")


def entity_from_options(user: str | None, client_id: str | None, defaults: Sequence[str]) -> ClientQuotaEntity:
    """The entity ``--user``/``--client-id``/``--default user|client-id`` name."""
    return ClientQuotaEntity(DEFAULT if "user" in defaults else user,
                             DEFAULT if "client-id" in defaults else client_id)
