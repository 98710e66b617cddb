"""How many entries (groups, partitions, topics) one request may name: ``metaq.max.request.entries``.

Requests that list entries cost the broker time and memory per entry, on the one event loop, and up to
``socket.request.max.bytes`` (100 MB) a client could name millions (a DescribeGroups of 1,000,000 ids took
55 s). A request over the bound is not handled: its connection is closed with a log line naming the bound, as
Kafka closes the connection of a frame over ``socket.request.max.bytes`` (a well-behaved client never sends one;
Kafka itself has no such bound). Large frames are also decoded in a worker thread (see
:mod:`metaq.broker.network`), so decoding one does not stall the other connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

from metaq.errors import ProtocolError
from metaq.protocol.apis import ApiKey, api_name
from metaq.protocol.messages import ApiRequest, ApiStruct

T = TypeVar("T")


def _nested(topics: Iterable[ApiStruct] | None, field: str) -> int:
    return sum(len(getattr(topic, field) or ()) for topic in topics or ())


ENTRY_COUNTS: dict[int, Callable[[ApiRequest], int]] = {
    ApiKey.DESCRIBE_GROUPS: lambda r: len(r.groups),
    ApiKey.DELETE_GROUPS: lambda r: len(r.groups_names),
    ApiKey.OFFSET_FETCH: lambda r: _nested(r.topics, "partition_indexes"),
    ApiKey.OFFSET_COMMIT: lambda r: _nested(r.topics, "partitions"),
    ApiKey.OFFSET_DELETE: lambda r: _nested(r.topics, "partitions"),
    ApiKey.LIST_OFFSETS: lambda r: _nested(r.topics, "partitions"),
    ApiKey.DELETE_RECORDS: lambda r: _nested(r.topics, "partitions"),
    ApiKey.CREATE_TOPICS: lambda r: len(r.topics),
    ApiKey.CREATE_PARTITIONS: lambda r: len(r.topics),
    ApiKey.ELECT_LEADERS: lambda r: _nested(r.topic_partitions, "partitions"),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: lambda r: _nested(r.topics, "partitions"),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: lambda r: _nested(r.topics, "partition_indexes"),
}
"""The entries of each bounded API's request (the others are bounded otherwise: Fetch and Produce by bytes)."""


SLICE = 200
"""Entries a handler works through before it lets the event loop serve the other connections."""


def check_entries(api_key: int, request: ApiRequest, limit: int) -> int:
    """The entries ``request`` names (0 for an API not listed); ProtocolError (the connection is closed) if more
    than ``limit``."""
    count = ENTRY_COUNTS.get(api_key)
    n = count(request) if count is not None else 0
    if n > limit:
        raise ProtocolError(f"{api_name(api_key)} request names {n} entries, more than the {limit} one request"
                            f" may (metaq.max.request.entries)")
    return n


async def in_slices(items: Iterable[T]) -> AsyncIterator[T]:
    """``items``, yielding to the event loop after every :data:`SLICE` of them: a long entry list is handled
    without stalling the other connections."""
    for i, item in enumerate(items):
        if i and i % SLICE == 0:
            await asyncio.sleep(0)
        yield item
