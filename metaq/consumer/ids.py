"""Consumer and thread ids, in the exact form Kafka 0.8 writes them to ZooKeeper.

Other members (and Kafka's tools) parse and sort these strings, so the format is part of the protocol::

    make_consumer_id("etl", hostname="host1", now_ms=1428512949385, uuid_=u)   # "etl_host1-1428512949385-6b2a1f0c"
    make_consumer_id("etl", "test-1")                                          # "etl_test-1"
    make_thread_ids("etl_test-1", 2)                                           # ["etl_test-1-0", "etl_test-1-1"]
    consumer_id_of("etl_test-1-1")                                             # "etl_test-1"
"""

from __future__ import annotations

import socket
import time
import uuid

from metaq.errors import ConfigError
from zk_layout import validate_group


def make_consumer_id(
    group: str,
    consumer_id_config: str | None = None,
    *,
    hostname: str | None = None,
    now_ms: int | None = None,
    uuid_: uuid.UUID | None = None,
) -> str:
    """``<group>_<consumer.id>`` if configured, else ``<group>_<hostname>-<ms>-<8 hex>``.

    The hex part is the first 8 characters of the UUID's most significant 64 bits written without leading
    zeros (Java's ``Long.toHexString(msb).substring(0, 8)``). The keyword arguments make ids reproducible
    in tests; by default they are the local host name, the current time and a random UUID.
    """
    validate_group(group)
    if consumer_id_config is not None:
        return f"{group}_{_check_node_part('consumer.id', consumer_id_config)}"
    host = socket.gethostname() if hostname is None else hostname
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    u = uuid.uuid4() if uuid_ is None else uuid_
    return f"{group}_{_check_node_part('hostname', host)}-{ms}-{format(u.int >> 64, 'x')[:8]}"


def _check_node_part(what: str, value: str) -> str:
    """The id becomes a ZooKeeper node name, so it must be non-empty and free of ``/``."""
    if not value or "/" in value or "\x00" in value:
        raise ConfigError(f"config {what!r}: {value!r} must be non-empty and contain no '/'")
    return value


def make_thread_ids(consumer_id: str, n: int) -> list[str]:
    """``<consumerId>-0`` .. ``<consumerId>-(n-1)``, in stream order (stream i is thread i).

    The assignors sort thread ids as strings themselves; this list is deliberately not sorted that way."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"a stream count must be an integer >= 0, got {n!r}")
    return [f"{consumer_id}-{i}" for i in range(n)]


def split_thread_id(thread_id: str) -> tuple[str, int]:
    """``"g_c1-10"`` -> ``("g_c1", 10)``: the consumer id and the stream number. Splits at the *last* dash,
    because generated consumer ids contain dashes themselves."""
    consumer_id, dash, number = thread_id.rpartition("-")
    if not dash or not consumer_id or not number.isascii() or not number.isdigit():
        raise ValueError(f"not a thread id (<consumerId>-<n>): {thread_id!r}")
    return consumer_id, int(number)


def consumer_id_of(thread_id: str) -> str:
    """The consumer id of a thread id: the owner node data with its ``-<n>`` suffix removed."""
    return split_thread_id(thread_id)[0]
