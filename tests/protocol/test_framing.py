"""decode_request: the same result as kafka-python's decoder for well-formed frames, and an error (not a
short value) for a frame a field runs past."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from metaq.errors import ProtocolError
from metaq.protocol.framing import decode_request


def _wire(req, client_id: str = "cli") -> bytes:
    req.with_header(correlation_id=42, client_id=client_id)
    return bytes(req.encode(header=True))


def _fetch(version: int):
    part = FetchRequest.FetchTopic.FetchPartition(partition=3, fetch_offset=7, partition_max_bytes=100)
    return FetchRequest[version](replica_id=-1, max_wait_ms=5, min_bytes=1, max_bytes=1000, isolation_level=0,
                                 topics=[FetchRequest.FetchTopic(topic="t", partitions=[part])])


CASES = [
    (MetadataRequest, 1, lambda: MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name="abc")])),
    (MetadataRequest, 4, lambda: MetadataRequest[4](topics=None, allow_auto_topic_creation=False)),
    (ApiVersionsRequest, 3, lambda: ApiVersionsRequest[3](client_software_name="x", client_software_version="1")),
    (FetchRequest, 4, lambda: _fetch(4)),
    (FetchRequest, 11, lambda: _fetch(11)),
]


@pytest.mark.parametrize(("cls", "version", "make"), CASES)
def test_same_as_kafka_python(cls, version: int, make) -> None:
    wire = _wire(make())
    ours = decode_request(cls, wire, version)
    theirs = cls.decode(wire, version=version, header=True)
    assert ours == theirs
    assert ours.header.correlation_id == 42 and ours.header.client_id == "cli"
    assert decode_request(cls, wire + b"\0\0", version) == theirs  # trailing bytes are tolerated, as in Kafka


def test_string_running_past_the_frame_is_refused() -> None:
    wire = _wire(MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name="garbage-topic")]))
    # kafka-python's decoder returns a short topic name here
    assert MetadataRequest.decode(wire[:-4], version=1, header=True).topics[0].name == "garbage-t"
    with pytest.raises(ProtocolError, match="past the end"):
        decode_request(MetadataRequest, wire[:-4], 1)


def test_client_id_running_past_the_frame_is_refused() -> None:
    wire = _wire(MetadataRequest[1](topics=None), client_id="a-long-client-id")
    with pytest.raises(ProtocolError, match="past"):
        decode_request(MetadataRequest, wire[:14], 1)


def _served() -> list[tuple[object, int]]:
    from metaq.protocol.apis import BROKER_APIS

    return [(entry[0], v) for entry in BROKER_APIS.values() for v in range(entry[2], entry[3] + 1)]


@pytest.mark.parametrize(("cls", "version"), _served())
def test_every_served_request_version_decodes_as_kafka_python_does(cls, version: int) -> None:
    wire = _wire(cls[version]())  # type: ignore[index]
    ours = decode_request(cls, wire, version)
    theirs = cls.decode(wire, version=version, header=True)  # type: ignore[attr-defined]
    assert ours == theirs and ours.header == theirs.header
