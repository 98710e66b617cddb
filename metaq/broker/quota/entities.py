"""Who a client quota applies to, and which configured quota a request falls under (Kafka's precedence).

An entity is a user, a client id, or both, either of which may be ``<default>`` (:data:`DEFAULT`). Kafka
(``ClientQuotaManager.DefaultQuotaCallback``, docs/quotas.md) takes the first configured entity of:

1. ``/config/users/<user>/clients/<client-id>``      5. ``/config/users/<default>/clients/<default>``
2. ``/config/users/<user>/clients/<default>``        6. ``/config/users/<default>``
3. ``/config/users/<user>``                          7. ``/config/clients/<client-id>``
4. ``/config/users/<default>/clients/<client-id>``   8. ``/config/clients/<default>``

and the clients that match the same entity share one rate (:class:`QuotaKey`): a quota set on a user alone
is shared by all of its client ids, one on a client id alone by every user using it. The quota values of a
matched entity are looked up per quota type, as Kafka keeps one callback per type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zk_layout import paths
from zk_layout.quotas import ClientQuotaEntity

DEFAULT = paths.DEFAULT_ENTITY

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
"""The client quota keys of ZooKeeper-mode Kafka (``controller_mutation_rate`` is KRaft's)."""


@dataclass(frozen=True)
class QuotaKey:
    """The rate a request counts towards (Kafka's metric tags ``user`` and ``client-id``; "" when not part)."""

    user: str
    client_id: str


@dataclass(frozen=True)
class Resolved:
    """The rate a client's request counts towards, and its bound (None: no quota, nothing is counted)."""

    key: QuotaKey
    bound: float | None


def precedence(user: str, client_id: str) -> list[tuple[ClientQuotaEntity, QuotaKey]]:
    """The entities that may hold a client's quota, in Kafka's order, each with the rate it shares."""
    both, user_only, client_only = QuotaKey(user, client_id), QuotaKey(user, ""), QuotaKey("", client_id)
    return [
        (ClientQuotaEntity(user, client_id), both),
        (ClientQuotaEntity(user, DEFAULT), both),
        (ClientQuotaEntity(user, None), user_only),
        (ClientQuotaEntity(DEFAULT, client_id), both),
        (ClientQuotaEntity(DEFAULT, DEFAULT), both),
        (ClientQuotaEntity(DEFAULT, None), user_only),
        (ClientQuotaEntity(None, client_id), client_only),
        (ClientQuotaEntity(None, DEFAULT), client_only),
    ]


def resolve(quotas: Mapping[ClientQuotaEntity, Mapping[str, float]], quota_key: str, user: str,
            client_id: str) -> Resolved:
    """Which rate and bound of ``quota_key`` apply to (``user``, ``client_id``). ``user`` is the principal's
    name: ``ANONYMOUS`` for a connection without authentication, which user defaults apply to, as in Kafka."""
    for entity, key in precedence(user, client_id):
        bound = quotas.get(entity, {}).get(quota_key)
        if bound is not None:
            return Resolved(key, bound)
    return Resolved(QuotaKey("", client_id), None)


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's stored config, as numbers (other keys, such as SCRAM credentials, and
    values that are not numbers are left out)."""
    values: dict[str, float] = {}
    for name in QUOTA_KEYS:
        number = _number(config.get(name))
        if number is not None:
            values[name] = number
    return values


def _number(raw: str | None) -> float | None:
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None
