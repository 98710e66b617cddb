"""In-memory stand-ins for ZkLayout and the brokers' log offsets, with just what metaq.admin reads and writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from metaq.admin.log_offsets import TopicPartition, Watermarks
from metaq.errors import KafkaOffsetsUnavailable, MetaqError
from zk_layout import ConsumerNode, OffsetNode, OwnerNode, PartitionState, TopicAssignment, TopicCount, validate_group

NOW_MS = 1_700_000_000_000


@dataclass
class FakeLayout:
    topics_: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    members: dict[str, dict[str, TopicCount]] = field(default_factory=dict)  # group -> id -> registration
    offset_data: dict[str, dict[TopicPartition, OffsetNode]] = field(default_factory=dict)
    owner_data: dict[str, dict[TopicPartition, OwnerNode]] = field(default_factory=dict)
    extra_groups: set[str] = field(default_factory=set)
    persistent: set[str] = field(default_factory=set)  # consumer ids registered by persistent nodes
    clock_ms: int = NOW_MS
    writes: list[tuple[str, str, int, int]] = field(default_factory=list)

    def full_path(self, path: str) -> str:
        return path

    # groups
    def groups(self) -> list[str]:
        return sorted(set(self.members) | set(self.offset_data) | set(self.owner_data) | self.extra_groups)

    def group_exists(self, group: str) -> bool:
        return group in self.groups()

    def consumer_ids(self, group: str) -> list[str]:
        validate_group(group)
        return sorted(self.members.get(group, {}))

    def migration_marker(self, group: str) -> None:
        return None  # never migrated (zk_layout.migration against a real ZooKeeper: integration_tests)

    def consumer_registrations(self, group: str) -> dict[str, TopicCount]:
        return dict(self.members.get(group, {}))

    def consumer_nodes(self, group: str) -> dict[str, ConsumerNode]:
        return {cid: ConsumerNode(reg, 0 if cid in self.persistent else 1)
                for cid, reg in self.members.get(group, {}).items()}

    def offset_nodes(self, group: str) -> dict[TopicPartition, OffsetNode]:
        validate_group(group)
        return dict(self.offset_data.get(group, {}))

    def read_offset(self, group: str, topic: str, partition: int) -> int | None:
        node = self.offset_data.get(group, {}).get((topic, partition))
        return None if node is None else (-1 if node.offset is None else node.offset)

    def write_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        self.clock_ms += 1
        old = self.offset_data.setdefault(group, {}).get((topic, partition))
        ctime = self.clock_ms if old is None else old.ctime_ms
        self.offset_data[group][(topic, partition)] = OffsetNode(offset, ctime, self.clock_ms)
        self.writes.append((group, topic, partition, offset))

    def offsets(self, group: str) -> dict[TopicPartition, int]:
        return {k: n.offset for k, n in self.offset_data.get(group, {}).items() if n.offset is not None}

    def delete_offset(self, group: str, topic: str, partition: int) -> bool:
        return self.offset_data.get(group, {}).pop((topic, partition), None) is not None

    def owners(self, group: str) -> dict[TopicPartition, str]:
        return {k: n.thread_id for k, n in self.owner_data.get(group, {}).items()}

    def owner_nodes(self, group: str) -> dict[TopicPartition, OwnerNode]:
        return dict(self.owner_data.get(group, {}))

    def release_partition(self, group: str, topic: str, partition: int, thread_id: str | None = None) -> bool:
        nodes = self.owner_data.get(group, {})
        node = nodes.get((topic, partition))
        if node is None or (thread_id is not None and node.thread_id != thread_id):
            return False
        del nodes[(topic, partition)]
        return True

    # topics
    def topics(self) -> list[str]:
        return sorted(self.topics_)

    def topic_assignment(self, topic: str) -> TopicAssignment | None:
        count = self.topics_.get(topic)
        return None if count is None else TopicAssignment({p: (0,) for p in range(count)})

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        if topic not in self.topics_:
            return None
        return PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1)

    def topic_config(self, topic: str) -> None:
        return None

    # helpers for tests
    def commit(self, group: str, topic: str, partition: int, offset: int | None, *, age_ms: int = 1000) -> None:
        self.offset_data.setdefault(group, {})[(topic, partition)] = OffsetNode(
            offset, self.clock_ms - age_ms - 5000, self.clock_ms - age_ms)

    def own(self, group: str, topic: str, partition: int, thread_id: str, *, session: int = 0x1234) -> None:
        self.owner_data.setdefault(group, {})[(topic, partition)] = OwnerNode(thread_id, session, NOW_MS - 60000)

    def join(self, group: str, consumer_id: str, subscription: dict[str, int], pattern: str = "static") -> None:
        self.members.setdefault(group, {})[consumer_id] = TopicCount(subscription, pattern, NOW_MS - 120000)


@dataclass
class FakeLogOffsets:
    marks: dict[TopicPartition, Watermarks] = field(default_factory=dict)
    by_time: dict[TopicPartition, int] = field(default_factory=dict)  # answers of offsets_for_time
    asked_times: list[int] = field(default_factory=list)

    def set(self, topic: str, partition: int, start: int, end: int) -> None:
        self.marks[(topic, partition)] = Watermarks(start, end, 0)

    def watermarks(self, keys: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        return {k: self.marks.get(k, Watermarks.unknown("no leader")) for k in keys}

    def offsets_for_time(self, keys: Iterable[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]:
        self.asked_times.append(timestamp_ms)
        result = {}
        for key in keys:
            if key not in self.marks:
                raise MetaqError(f"cannot reach the leader of {key}")
            result[key] = self.by_time.get(key, self.marks[key].end)  # type: ignore[assignment]
        return result


@dataclass
class FakeKafkaOffsets:
    """Groups' offsets in ``__consumer_offsets``; ``refuse`` answers every commit of a group with that code."""

    offsets: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    topic_exists: bool = True
    down: bool = False
    refuse: dict[str, int] = field(default_factory=dict)
    commits: list[tuple[str, dict[TopicPartition, int]]] = field(default_factory=list)

    def available(self) -> bool:
        return self.topic_exists

    def fetch(self, group: str) -> dict[TopicPartition, int]:
        if self.down:
            raise KafkaOffsetsUnavailable(f"the coordinator of group {group!r} is unavailable: down")
        return dict(self.offsets.get(group, {}))

    def commit(self, group: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        self.commits.append((group, dict(offsets)))
        code = self.refuse.get(group, 0)
        if not code:
            self.offsets.setdefault(group, {}).update(offsets)
        return {key: code for key in offsets}
