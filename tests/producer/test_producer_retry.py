"""The producer.send retry policy: tenacity strategies deciding per batch whether and when to retry."""

from __future__ import annotations

import pytest

from metaq.errors import (
    BrokerConnectionError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from metaq.retry import producer_send


@pytest.mark.parametrize("error", [
    NotLeaderForPartitionError("x"), UnknownTopicOrPartitionError("x"), RequestTimedOutError("x"),
    BrokerConnectionError("x"),
])
def test_retriable_errors_are_retried_up_to_retries(error):
    policy = producer_send(retries=3, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    assert [policy.delay_after(n, error) is not None for n in (1, 2, 3, 4)] == [True, True, True, False]


def test_backoff_grows_and_is_capped():
    policy = producer_send(retries=10, retry_backoff_ms=100, retry_backoff_max_ms=500)
    delays = [policy.delay_after(n, BrokerConnectionError("x")) for n in range(1, 8)]
    assert 0.1 <= delays[0] <= 0.12
    assert 0.2 <= delays[1] <= 0.22
    assert all(0.5 <= d <= 0.52 for d in delays[3:])


@pytest.mark.parametrize("error", [MessageSizeTooLargeError("x"), ValueError("x")])
def test_fatal_errors_are_not_retried(error):
    assert producer_send(retries=5, retry_backoff_ms=1, retry_backoff_max_ms=1).delay_after(1, error) is None


def test_zero_retries():
    policy = producer_send(retries=0, retry_backoff_ms=1, retry_backoff_max_ms=1)
    assert policy.delay_after(1, BrokerConnectionError("x")) is None
