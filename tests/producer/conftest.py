"""Fixtures for producer tests."""

from __future__ import annotations

import pytest

from tests.client.client_fake_broker import FakeBroker
from tests.producer.producer_fakes import FakeLayout


@pytest.fixture
def broker():
    with FakeBroker() as b:
        yield b


@pytest.fixture
def layout(broker) -> FakeLayout:
    lay = FakeLayout()
    lay.add_broker(0, broker.port)
    lay.add_topic("t1", 3)
    return lay
