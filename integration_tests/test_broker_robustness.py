"""Bad input on the wire: random, truncated and oversized frames never crash the broker or disturb
other clients; each gets an error response or a closed connection."""

from __future__ import annotations

import socket
import struct
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from metaq.testing.broker import request, topic_leaders


def _send_raw(bootstrap: str, payload: bytes, timeout: float = 2.0) -> bytes:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)  # a half-open connection: the broker must not wait forever for more
        out = bytearray()
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return bytes(out)


def _healthy(bootstrap: str) -> bool:
    resp = request(bootstrap, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                   ApiVersionsResponse, 3)
    return resp.error_code == 0 and any(k.api_key == 1 for k in resp.api_keys)


frames = st.one_of(
    st.binary(max_size=300),  # anything at all
    st.binary(max_size=300).map(lambda b: struct.pack(">i", len(b)) + b),  # well-framed garbage
    st.tuples(st.integers(-5, 40), st.integers(-3, 20), st.binary(max_size=200)).map(
        lambda t: (lambda body: struct.pack(">i", len(body)) + body)(struct.pack(">hhi", t[0], t[1], 7) + t[2])
    ),  # a plausible header and a garbage body
)


def test_random_frames_never_hurt_the_broker(broker, make_topic) -> None:
    make_topic("robust", partitions=1)
    # a long-polling client keeps working while the garbage flows
    stop = threading.Event()
    errors: list[BaseException] = []

    def poller() -> None:
        try:
            while not stop.is_set():
                assert topic_leaders(broker.bootstrap, "robust") == {0: 0}
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    t = threading.Thread(target=poller, name="healthy-client")
    t.start()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(frames)
    def fuzz(payload: bytes) -> None:
        _send_raw(broker.bootstrap, payload)

    try:
        fuzz()
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors
    assert broker.proc.poll() is None
    assert _healthy(broker.bootstrap)


def test_specific_bad_frames(broker) -> None:
    # a 2 GB size prefix: closed at once, nothing allocated
    assert _send_raw(broker.bootstrap, struct.pack(">i", 0x7FFFFFF0) + b"x" * 10) == b""
    # negative size
    assert _send_raw(broker.bootstrap, struct.pack(">i", -1)) == b""
    # a frame cut short, then the client goes away
    req = MetadataRequest[1](topics=None)
    req.with_header(correlation_id=3, client_id="short")
    wire = req.encode(header=True, framed=True)
    assert _send_raw(broker.bootstrap, wire[:-3]) == b""
    # unknown API key 999 and an unsupported version of Fetch: connection closed
    body = struct.pack(">hhi", 999, 0, 5) + b"\x00\x00"
    assert _send_raw(broker.bootstrap, struct.pack(">i", len(body)) + body) == b""
    body = struct.pack(">hhi", 1, 99, 5) + b"\x00\x00"
    assert _send_raw(broker.bootstrap, struct.pack(">i", len(body)) + body) == b""
    # ApiVersions newer than supported: a v0 answer with UNSUPPORTED_VERSION and the full list (KIP-511)
    body = struct.pack(">hhi", 18, 42, 77) + b"\x00\x00"
    out = _send_raw(broker.bootstrap, struct.pack(">i", len(body)) + body)
    resp = ApiVersionsResponse.decode(out[4:], version=0, header=True)
    assert resp.header.correlation_id == 77 and resp.error_code == 35
    assert {k.api_key for k in resp.api_keys} >= {0, 1, 2, 3, 18}
    # a good request on the same connection after a good one still works (pipelining)
    both = wire + wire
    out = _send_raw(broker.bootstrap, both)
    size = struct.unpack_from(">i", out)[0]
    first = MetadataResponse.decode(out[4:4 + size], version=1, header=True)
    second = MetadataResponse.decode(out[8 + size:], version=1, header=True)
    assert first.brokers[0].node_id == second.brokers[0].node_id == 0
    assert _healthy(broker.bootstrap)
