"""DescribeClientQuotas filters and AlterClientQuotas alterations (metaq/broker/quota/admin.py) as Kafka's
ZkAdminManager applies them (docs/quotas.md)."""

from __future__ import annotations

import pytest

from metaq.broker.quota.admin import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    FilterComponent,
    QuotaOp,
    apply_ops,
    describe,
    entity_of,
    entity_parts,
)
from metaq.errors import InvalidRequestError
from zk_layout.quotas import ClientQuotaEntity

D = "<default>"
STORED = {
    ClientQuotaEntity("alice", None): {"producer_byte_rate": "100", "SCRAM-SHA-256": "salt=..."},
    ClientQuotaEntity("alice", "app"): {"consumer_byte_rate": "200"},
    ClientQuotaEntity(D, None): {"producer_byte_rate": "300"},
    ClientQuotaEntity(None, "app"): {"request_percentage": "50.0"},
    ClientQuotaEntity(None, D): {"producer_byte_rate": "400"},
    ClientQuotaEntity("bob", None): {"SCRAM-SHA-512": "salt=..."},  # credentials only: not a quota entity
}


def _found(components: list[FilterComponent], strict: bool = False) -> set[ClientQuotaEntity]:
    return set(describe(STORED, components, strict))


def test_no_filter_lists_every_entity_with_quotas() -> None:
    assert _found([]) == set(STORED) - {ClientQuotaEntity("bob", None)}
    assert describe(STORED, [], False)[ClientQuotaEntity("alice", None)] == {"producer_byte_rate": 100.0}


def test_exact_default_and_specified_components() -> None:
    assert _found([FilterComponent(USER, MATCH_EXACT, "alice")]) == {ClientQuotaEntity("alice", None),
                                                                     ClientQuotaEntity("alice", "app")}
    assert _found([FilterComponent(USER, MATCH_EXACT, "alice")], strict=True) == {ClientQuotaEntity("alice", None)}
    assert _found([FilterComponent(USER, MATCH_DEFAULT)]) == {ClientQuotaEntity(D, None)}
    assert _found([FilterComponent(CLIENT_ID, MATCH_SPECIFIED)], strict=True) == {
        ClientQuotaEntity(None, "app"), ClientQuotaEntity(None, D)}


def test_bad_filters_are_invalid_requests() -> None:
    with pytest.raises(InvalidRequestError):
        describe(STORED, [FilterComponent(USER, MATCH_DEFAULT), FilterComponent(USER, MATCH_SPECIFIED)], False)
    with pytest.raises(InvalidRequestError):
        describe(STORED, [FilterComponent("ip", MATCH_SPECIFIED)], False)
    with pytest.raises(InvalidRequestError):
        describe(STORED, [FilterComponent(USER, MATCH_EXACT, None)], False)


def test_entities_on_the_wire_name_the_default_with_null() -> None:
    entity = entity_of([(USER, None), (CLIENT_ID, "app")])
    assert entity == ClientQuotaEntity(D, "app")
    assert entity_parts(entity) == [(USER, None), (CLIENT_ID, "app")]
    with pytest.raises(InvalidRequestError):
        entity_of([])


def test_alterations_keep_other_keys_and_store_kafkas_formats() -> None:
    current = {"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "100"}
    updated = apply_ops(current, [QuotaOp("producer_byte_rate", None), QuotaOp("consumer_byte_rate", 2048.0),
                                  QuotaOp("request_percentage", 25.0)])
    assert updated == {"SCRAM-SHA-256": "salt=...", "consumer_byte_rate": "2048", "request_percentage": "25.0"}
    for bad in (QuotaOp("consumer_byte_rate", 1.5), QuotaOp("no_such_quota", 1.0), QuotaOp("producer_byte_rate", 0)):
        with pytest.raises(InvalidRequestError):
            apply_ops({}, [bad])
