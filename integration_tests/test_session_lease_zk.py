"""The delivery lease against a real ZooKeeper: the negotiated session timeout, renewed for as long as the
session lives."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from metaq.consumer.streams import DeliveryGate
from metaq.testing.wait import wait_until
from metaq.zklease import SessionLease, negotiated_timeout_ms


def test_the_lease_uses_the_negotiated_timeout_and_keeps_renewing(
        make_zk_client: Callable[..., KazooClient]) -> None:
    """The test server (tickTime 200 ms) grants at most 4 s: a client asking for 30 s gets 4 s, and a lease
    computed from the 30 s it asked for would outlive the session."""
    client = make_zk_client(session_timeout_ms=30000)
    assert negotiated_timeout_ms(client) == pytest.approx(4000)
    gate = DeliveryGate(leased=True)
    lease = SessionLease(client, requested_timeout_ms=30000, fraction=0.5, on_renewed=gate.extend,
                         on_void=gate.lapse, name="test-lease")
    assert lease.length_s == pytest.approx(2.0)
    started = time.monotonic()
    lease.start()
    try:
        assert gate.wait(10)
        assert gate.deadline <= time.monotonic() + 2.0  # never beyond sent + fraction x negotiated timeout
        first = lease.renewed_until
        wait_until(lambda: lease.renewals >= 3, 10, "three lease renewals")
        assert lease.renewed_until > first  # renewed about every lease / 4
        assert started < lease.renewed_until - 2.0 < time.monotonic()
    finally:
        lease.stop()
