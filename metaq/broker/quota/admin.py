"""Describing and altering client quota entities as Kafka's DescribeClientQuotas / AlterClientQuotas do in
ZooKeeper mode (``ZkAdminManager.describeClientQuotas`` / ``alterClientQuotas``, docs/quotas.md); shared by
the broker's handlers (metaq/broker/handlers/client_quotas.py) and ``metaq quotas`` (metaq/admin/quotas.py).

A filter has at most one component per entity type (``user``, ``client-id``): EXACT a name, DEFAULT the
``<default>`` entity, SPECIFIED any entity of that type. ``strict`` leaves out entities that have a type the
filter does not name. An alteration sets or removes quota keys of one entity; other keys of the node (SCRAM
credentials) are kept. Byte rates are stored as whole numbers, ``request_percentage`` as a double, as
Kafka writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from metaq.broker.quota.entities import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, QUOTA_KEYS, quota_values
from metaq.errors import InvalidRequestError
from zk_layout.quotas import ClientQuotaEntity

USER = "user"
CLIENT_ID = "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
WHOLE_NUMBER_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})


@dataclass(frozen=True)
class FilterComponent:
    """One component of a DescribeClientQuotas filter."""

    entity_type: str
    match_type: int
    match: str | None = None


@dataclass(frozen=True)
class QuotaOp:
    """Set ``key`` to ``value``, or remove it (``value`` None)."""

    key: str
    value: float | None


def entity_of(parts: Iterable[tuple[str, str | None]]) -> ClientQuotaEntity:
    """The entity named by (entity type, name) pairs, a None name meaning the default."""
    named: dict[str, str] = {}
    for entity_type, name in parts:
        if entity_type not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"Unsupported quota entity type {entity_type!r} (metaq: user, client-id)")
        if entity_type in named:
            raise InvalidRequestError(f"Duplicate {entity_type} in the quota entity")
        named[entity_type] = DEFAULT if name is None else name
    if not named:
        raise InvalidRequestError("Invalid client quota entity")
    return ClientQuotaEntity(named.get(USER), named.get(CLIENT_ID))


def entity_parts(entity: ClientQuotaEntity) -> list[tuple[str, str | None]]:
    """(entity type, name) pairs of an entity as the wire names them (None for the default)."""
    parts: list[tuple[str, str | None]] = []
    if entity.user is not None:
        parts.append((USER, None if entity.user == DEFAULT else entity.user))
    if entity.client_id is not None:
        parts.append((CLIENT_ID, None if entity.client_id == DEFAULT else entity.client_id))
    return parts


def describe(stored: Mapping[ClientQuotaEntity, Mapping[str, str]], components: Sequence[FilterComponent],
             strict: bool) -> dict[ClientQuotaEntity, dict[str, float]]:
    """The quota values of the stored entities the filter matches (entities without quota keys left out)."""
    by_type = _components_by_type(components)
    found = {}
    for entity, config in stored.items():
        values = quota_values(config)
        if values and _matches(by_type.get(USER), entity.user, strict) and \
                _matches(by_type.get(CLIENT_ID), entity.client_id, strict):
            found[entity] = values
    return found


def _components_by_type(components: Sequence[FilterComponent]) -> dict[str, FilterComponent]:
    by_type: dict[str, FilterComponent] = {}
    for component in components:
        if component.entity_type not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"Unsupported filter component entity type {component.entity_type!r}")
        if component.entity_type in by_type:
            raise InvalidRequestError(f"Duplicate {component.entity_type} filter component entity type")
        if (component.match_type == MATCH_EXACT) != (component.match is not None):
            raise InvalidRequestError("An EXACT filter component names an entity, DEFAULT and SPECIFIED none")
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidRequestError(f"Unexpected match type {component.match_type}")
        by_type[component.entity_type] = component
    return by_type


def _matches(component: FilterComponent | None, name: str | None, strict: bool) -> bool:
    if component is None:
        return name is None or not strict
    if component.match_type == MATCH_EXACT:
        return name == component.match
    if component.match_type == MATCH_DEFAULT:
        return name == DEFAULT
    return name is not None


def apply_ops(config: Mapping[str, str], ops: Iterable[QuotaOp]) -> dict[str, str]:
    """``config`` with the operations applied; InvalidRequestError for an unknown key or a bad value."""
    result = dict(config)
    for op in ops:
        if op.key not in QUOTA_KEYS:
            raise InvalidRequestError(f"Invalid configuration key {op.key} (metaq: {', '.join(QUOTA_KEYS)})")
        if op.value is None:
            result.pop(op.key, None)
        else:
            result[op.key] = format_value(op.key, op.value)
    return result


def format_value(key: str, value: float) -> str:
    """A quota value as Kafka stores it: byte rates are longs, ``request_percentage`` a double."""
    if value <= 0:
        raise InvalidRequestError(f"Configuration {key} must be positive, not {value}")
    if key in WHOLE_NUMBER_KEYS:
        if value != int(value):
            raise InvalidRequestError(f"Configuration {key} must be a Long value")
        return str(int(value))
    return repr(float(value))
