"""MetaQ's consistent-hash load balancing as a group assignor (``metaq-consistent-hash``, metaq members only).

MetaQ (Taobao's metamorphosis) offered ``ConsisHashStrategy`` beside its default strategy: every consumer is put
on a ring of 32-bit points (160 per consumer, four per MD5 digest of ``"<consumer>-<i>"``, Ketama style) and
each partition goes to the first consumer point at or after the hash of its name, wrapping round. When a member
joins or leaves, only the partitions on the arcs next to its points move; the price is an uneven split (no
quota). Here the consumer is a member's ``group.instance.id`` if static (so a restart keeps the same points),
else its member id; a partition is named ``"<topic>-<partition>"`` and only members subscribed to its topic are
on its ring::

    consistent_hash_assign({"a": ("t",), "b": ("t",)}, {"t": 4})   # {"a": [...], "b": [...]}

The protocol name is not one Kafka knows: a group whose members all offer it (metaq members) can use it; a
Java or librdkafka member joining makes the coordinator refuse it (INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping, Sequence

TopicPartition = tuple[str, int]
POINTS_PER_CONSUMER = 160  # ConsisHashStrategy.NUM_REPS
NAME = "metaq-consistent-hash"


def ketama_points(consumer: str) -> list[int]:
    """The consumer's points: for i < 40, the MD5 of ``"<consumer>-<i>"`` read as four little-endian uint32."""
    points: list[int] = []
    for i in range(POINTS_PER_CONSUMER // 4):
        digest = hashlib.md5(f"{consumer}-{i}".encode()).digest()
        points.extend(int.from_bytes(digest[4 * h:4 * h + 4], "little") for h in range(4))
    return points


def ketama_hash(key: str) -> int:
    """Ketama's hash of a key: the first four MD5 bytes, little-endian."""
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "little")


class Ring:
    """Points to consumers; a key goes to the first point at or after its hash (wrapping round)."""

    def __init__(self, consumers: Sequence[str]) -> None:
        owners: dict[int, str] = {}
        for consumer in sorted(consumers):  # a collision goes to the later name, as TreeMap.put overwrites
            for point in ketama_points(consumer):
                owners[point] = consumer
        self._points = sorted(owners)
        self._owners = owners

    def owner(self, key: str) -> str | None:
        if not self._points:
            return None
        at = bisect.bisect_left(self._points, ketama_hash(key))
        return self._owners[self._points[at % len(self._points)]]


def consistent_hash_assign(subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int],
                           ring_names: Mapping[str, str] | None = None) -> dict[str, list[TopicPartition]]:
    """member id -> partitions; ``subscriptions``: member id -> topics; ``ring_names``: member id -> the name
    hashed on the ring (default: the member id)."""
    names = dict(ring_names or {})
    result: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        members = [m for m, topics in subscriptions.items() if topic in topics]
        by_name = {names.get(m, m): m for m in members}
        ring = Ring(list(by_name))
        for partition in range(partition_counts.get(topic, 0)):
            owner = ring.owner(f"{topic}-{partition}")
            if owner is not None:
                result[by_name[owner]].append((topic, partition))
    return result
