"""One large request must not stall every other client (third round of hostile input): a request naming more
entries than ``metaq.max.request.entries`` is refused by closing its connection, large frames are decoded off the
event loop and long entry lists are handled in slices. Beside each attack a well-behaved confluent-kafka client
produces and fetches back; its round trips' p99 is the service bound the broker must keep (500 ms)."""

from __future__ import annotations

import socket
from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import OffsetFetchRequest

from metaq.testing.broker import call
from metaq.testing.probes import RssSampler, WellBehavedClient
from metaq.testing.wait import wait_until

P99_BOUND_S = 0.5


def _send(bootstrap: str, req: Any) -> socket.socket:
    s = socket.create_connection(bootstrap.rsplit(":", 1), timeout=120)  # type: ignore[arg-type]
    req.with_header(correlation_id=1, client_id="hostile")
    s.sendall(bytes(req.encode(header=True, framed=True)))
    return s


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except OSError:
        return True


def test_one_large_request_does_not_stall_other_clients(broker, make_topic) -> None:
    make_topic("probe")
    bootstrap = broker.bootstrap
    assert broker.pid is not None
    attacks = {
        # before: a DescribeGroups of 1,000,000 ids took 55 s on the event loop, 9 of 15 probes timed out
        "DescribeGroups of 300,000 ids": DescribeGroupsRequest[0](groups=[f"g{i}" for i in range(300_000)]),
        "OffsetFetch of 300,000 partitions": OffsetFetchRequest[1](group_id="g", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=list(range(300_000)))]),
    }
    for what, req in attacks.items():
        with RssSampler(broker.pid) as rss, WellBehavedClient(bootstrap, "probe") as client:
            s = _send(bootstrap, req)
            wait_until(lambda: _closed(s), 120, f"the {what} refused")  # noqa: B023 - used at once
            s.close()
            wait_until(lambda: len(client.latencies) >= 20, 30, "probes after the attack")  # noqa: B023
        assert not client.failures, (what, client.failures[:3])
        assert client.p99() <= P99_BOUND_S, f"{what}: p99 {client.p99():.3f} s over {len(client.latencies)} probes"
        assert rss.growth_mb < 300, f"{what}: broker RSS grew {rss.growth_mb:.0f} MB"
    assert "metaq.max.request.entries" in broker.log_tail(200)

    # a legal large request (half the default bound) is answered, without stalling the others either
    with WellBehavedClient(bootstrap, "probe") as client, socket.create_connection(
            bootstrap.rsplit(":", 1), timeout=120) as s:  # type: ignore[arg-type]
        resp = call(s, DescribeGroupsRequest[0](groups=[f"g{i}" for i in range(10_000)]), DescribeGroupsResponse, 0)
        assert len(resp.groups) == 10_000
        wait_until(lambda: len(client.latencies) >= 20, 30, "probes after the request")
    assert not client.failures, client.failures[:3]
    assert client.p99() <= P99_BOUND_S, f"legal request: p99 {client.p99():.3f} s"
