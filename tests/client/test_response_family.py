"""The client finds a request's response class without kafka-python's weak registry
(metaq/protocol/response_families.py): a per-version class that lost kafka-python's check-then-create race in
``Family[version]`` stays the registry's entry after it is collected, and a send of that API must still decode its
answer."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from metaq.protocol.response_families import response_family
from tests.client.client_fake_broker import FakeBroker
from tests.client.test_client_connection import connect, fake_broker, metadata_fields

pytestmark = pytest.mark.timeout(30)
__all__ = ["fake_broker"]  # the fixture, imported for the tests below


def _lose_the_race(family: type, version: int) -> None:
    """What the losing thread of two in ``VersionSubscriptable.__getitem__`` (kafka/protocol/api_message.py) leaves:
    a versioned class built exactly as there, registered by ``__init_subclass__``, but not the one kept in
    ``_VERSIONS``; its caller drops it and a collection frees it."""
    orphan = type(f"{family.__name__}_v{version}", tuple(family.mro()), {"_class_version": version}, init=False)
    del orphan
    gc.collect()


@pytest.fixture
def registry_restored() -> Iterator[None]:
    """Puts kafka-python's registry entries back (other tests in the worker use kafka-python's own clients)."""
    yield
    for family in (MetadataResponse, OffsetFetchResponse):
        ResponseClassRegistry.register_response_class(weakref.proxy(family))


def test_a_collected_versioned_class_kills_kafka_pythons_registry_entry(registry_restored: None) -> None:
    _lose_the_race(OffsetFetchResponse, 3)
    request = OffsetFetchRequest[3](group_id="g", topics=None)
    request.with_header(correlation_id=1, client_id="c")
    with pytest.raises(ReferenceError):
        ResponseClassRegistry.get_response_class(request.header)
    assert response_family(OffsetFetchRequest) is OffsetFetchResponse
    assert response_family(OffsetFetchRequest[3]) is OffsetFetchResponse


def test_send_decodes_after_the_registry_entry_died(fake_broker: FakeBroker, registry_restored: None) -> None:
    fake_broker.topics = {"t1": 1}
    conn = connect(fake_broker)
    _lose_the_race(MetadataResponse, 4)
    response = conn.send(MetadataRequest, metadata_fields("t1"))
    assert [t.name for t in response.topics] == ["t1"]
    assert type(response) is MetadataResponse
