"""GroupMember's commit rules (metaq.consumer.coordination), with a fake coordinator connection: a commit the
coordinator refuses as no longer ours revokes the partitions and is never retried; coordinator errors are."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from metaq.consumer.config import ConsumerConfig
from metaq.consumer.coordination import GroupMember
from metaq.consumer.group_member_state import LOST, NO_GENERATION, STABLE, SYNCING, Generation
from metaq.consumer.partition_info import ChunkQueue, PartitionTopicInfo
from metaq.consumer.streams import DeliveryGate
from metaq.errors import ErrorCode
from zk_layout import TopicCount


class _Channel:
    """Answers each OffsetCommit with the next code of ``codes`` for every partition; records the requests."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.sent: list[Mapping[str, Any]] = []

    def send(self, _request_class: Any, fields: Mapping[str, Any]) -> Any:
        self.sent.append(fields)
        code = self.codes.pop(0)
        return SimpleNamespace(topics=[SimpleNamespace(name=t["name"], partitions=[
            SimpleNamespace(partition_index=p["partition_index"], error_code=code) for p in t["partitions"]])
            for t in fields["topics"]])

    def drop(self) -> None:
        pass

    close = drop


class _Subscription:
    is_wildcard = False

    def topic_count(self) -> TopicCount:
        return TopicCount(subscription={"t": 1})

    def queue_for(self, topic: str, thread_id: str) -> ChunkQueue:
        return ChunkQueue(2)

    def clear_queues(self) -> None:
        pass


def _member(channel: _Channel) -> tuple[GroupMember, PartitionTopicInfo]:
    config = ConsumerConfig.from_properties({"group.id": "g", "zookeeper.connect": "zk:2181",
                                             "group.coordination": "kafka", "offsets.channel.backoff.ms": 1})
    member = GroupMember(config, SimpleNamespace(), "g_c1", _Subscription(), SimpleNamespace(),  # type: ignore[arg-type]
                         DeliveryGate(leased=True))
    member._offsets_channel = channel  # type: ignore[assignment]
    member.generation_info = Generation(3, "m-1", "range")
    member.state = STABLE
    info = PartitionTopicInfo("t", 0, ChunkQueue(2), 10, 10, 3, "g_c1-0")
    member.registry = {("t", 0): info}
    return member, info


@pytest.mark.parametrize("code", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID])
def test_a_fenced_commit_revokes_and_is_not_retried(code: int) -> None:
    channel = _Channel(code)
    member, info = _member(channel)
    member.commit()
    assert len(channel.sent) == 1 and channel.sent[0]["generation_id_or_member_epoch"] == 3
    assert info.revoked and member.state == LOST and member.generation_info is NO_GENERATION
    info.consumed_offset = 20
    member.commit(include_revoked=True)  # nothing more of it, ever: the generation is gone
    assert len(channel.sent) == 1


def test_a_commit_during_a_rebalance_is_not_retried_and_rejoins() -> None:
    channel = _Channel(ErrorCode.REBALANCE_IN_PROGRESS)
    member, info = _member(channel)
    member.commit()
    assert len(channel.sent) == 1 and member._rejoin_needed


def test_coordinator_errors_are_retried_and_unchanged_offsets_not_resent() -> None:
    channel = _Channel(ErrorCode.NOT_COORDINATOR, ErrorCode.NONE)
    member, info = _member(channel)
    member.commit()
    assert len(channel.sent) == 2 and not info.revoked and member.state == STABLE
    member.commit()
    assert len(channel.sent) == 2  # offset 10 is committed already


def test_the_leader_rejoins_when_a_subscribed_topic_gains_partitions() -> None:
    """Java's ConsumerCoordinator compares its assignment snapshot with the metadata: so does the leader, every
    metadata.max.age.ms, reading the partition counts again (ZooKeeper, or Metadata with bootstrap.servers)."""
    partitions: dict[str, tuple[int, ...] | None] = {"t": (0, 1)}
    reads: list[list[str]] = []

    def topic_partition_ids(topics: list[str]) -> dict[str, tuple[int, ...] | None]:
        reads.append(topics)
        return {t: partitions.get(t) for t in topics}

    config = ConsumerConfig.from_properties({"group.id": "g", "bootstrap.servers": "b:9092",
                                             "group.coordination": "kafka", "metadata.max.age.ms": 60000})
    member = GroupMember(config, SimpleNamespace(topic_partition_ids=topic_partition_ids),  # type: ignore[arg-type]
                         "g_c1", _Subscription(), SimpleNamespace(), DeliveryGate(leased=True))
    member.state = STABLE
    member._check_metadata()
    assert reads == []  # not the leader: no snapshot to compare
    member._assigned_counts = {"t": 2}
    member._check_metadata()
    assert reads == [["t"]] and not member._rejoin_needed
    member._check_metadata()
    assert reads == [["t"]]  # the next check waits metadata.max.age.ms
    partitions["t"] = (0, 1, 2)
    member._metadata_check_at = 0.0
    member._check_metadata()
    assert member._rejoin_needed


class _Hooks:
    """A rebalance listener recording its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def before_release(self, partitions: Mapping[str, set[int]]) -> None:
        self.calls.append(("before_release", dict(partitions)))

    def assigned(self, consumer_id: str, assignment: Mapping[str, Mapping[int, str]]) -> None:
        self.calls.append(("assigned", {t: sorted(ps) for t, ps in assignment.items()}))

    def lost(self, partitions: Mapping[str, set[int]]) -> None:
        self.calls.append(("lost", dict(partitions)))


def test_lost_partitions_call_lost_not_before_release() -> None:
    """A fenced commit: the partition is revoked at once, nothing committed; when the member prepares to
    rejoin, the listener hears ``lost`` (Java's onPartitionsLost), never ``before_release``."""
    channel = _Channel(ErrorCode.ILLEGAL_GENERATION)
    member, info = _member(channel)
    hooks = _Hooks()
    member._listener = hooks
    member._fetcher = SimpleNamespace(stop_connections=lambda: None)
    member.commit()
    assert info.revoked and member.state == LOST and hooks.calls == []
    member._revoke_all(commit=False)  # what synced_rebalance does for a LOST member
    assert hooks.calls == [("lost", {"t": {0}})] and member.registry == {}
    member._revoke_all(commit=False)
    assert len(hooks.calls) == 1 and len(channel.sent) == 1


def test_cooperative_assignment_revokes_and_announces_only_what_moved() -> None:
    """KIP-429 onJoinComplete: t-0 assigned again stays the same PartitionTopicInfo (now in generation 4), t-1
    is revoked, committed in generation 4 and named to before_release, t-2 is added and the only one named to
    assigned; the member rejoins so that t-1 can move."""
    channel = _Channel(ErrorCode.NONE)
    member, kept = _member(channel)
    gone = PartitionTopicInfo("t", 1, ChunkQueue(2), 30, 30, 3, "g_c1-0")
    gone.consumed_offset = 35
    member.registry[("t", 1)] = gone
    hooks = _Hooks()
    started: list[list[tuple[str, int]]] = []
    member._listener = hooks
    member._fetcher = SimpleNamespace(start_connections=lambda infos: started.append([i.key for i in infos]))
    member._fetch_offsets = lambda partitions: {("t", 2): 7}  # type: ignore[method-assign]
    member.generation_info = Generation(4, "m-1", "cooperative-sticky")
    member._take_incremental(member.generation_info, [("t", 0), ("t", 2)])
    assert member.registry[("t", 0)] is kept and kept.generation == 4 and not kept.revoked
    assert gone.revoked and channel.sent[0]["generation_id_or_member_epoch"] == 4
    assert channel.sent[0]["topics"][0]["partitions"][0]["partition_index"] == 1
    assert hooks.calls == [("before_release", {"t": {1}}), ("assigned", {"t": [2]})]
    assert sorted(member.registry) == [("t", 0), ("t", 2)] and started == [[("t", 2)]]
    assert member._rejoin_needed and member.state == STABLE


class _Heartbeats:
    """Answers every Heartbeat with ``code``; records the requests."""

    def __init__(self, code: int = 0) -> None:
        self.code = code
        self.sent: list[Mapping[str, Any]] = []

    def send(self, _request_class: Any, fields: Mapping[str, Any]) -> Any:
        self.sent.append(fields)
        return SimpleNamespace(error_code=self.code)

    def drop(self) -> None:
        pass


def test_heartbeats_run_from_the_sync_answer_before_the_partitions_are_taken() -> None:
    """Between the SyncGroup answer and STABLE (the OffsetFetch of the assigned partitions, which may be slow
    under load) the member heartbeats, as Java's heartbeat thread does once SyncGroup succeeded; before the
    answer it does not (its generation is not the coordinator's yet)."""
    member, _info = _member(_Channel())
    heartbeats = _Heartbeats()
    member._heartbeat_channel = heartbeats  # type: ignore[assignment]
    member.state = SYNCING
    member._assigned_generation = 2  # the SyncGroup of generation 3 not answered yet
    member._heartbeat_once()
    assert heartbeats.sent == []
    member._assigned_generation = 3  # answered: fetching offsets now
    member._heartbeat_once()
    assert [h["generation_id"] for h in heartbeats.sent] == [3] and member._proof > 0


def test_a_generation_lost_while_fetching_offsets_takes_nothing() -> None:
    """A heartbeat fenced after the SyncGroup answer: the member takes none of the assigned partitions."""
    member, _info = _member(_Channel())
    member._heartbeat_channel = _Heartbeats(ErrorCode.UNKNOWN_MEMBER_ID)  # type: ignore[assignment]
    member.state = SYNCING
    member._assigned_generation = 3
    member._heartbeat_once()
    assert member.state == LOST and member.generation_info is NO_GENERATION and member._rejoin_needed
