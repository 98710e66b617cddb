"""Fixtures for producer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.client_fake_broker import FakeBroker
from tests.producer.producer_fakes import FakeLayout


@pytest.fixture
def fake_broker() -> Iterator[FakeBroker]:
    """A FakeBroker (tests/client/client_fake_broker.py) speaking just enough of the protocol to a producer."""
    with FakeBroker() as b:
        yield b


@pytest.fixture
def layout(fake_broker: FakeBroker) -> FakeLayout:
    lay = FakeLayout()
    lay.add_broker(0, fake_broker.port)
    lay.add_topic("t1", 3)
    return lay
