"""``offsets delete`` (kafka-consumer-groups --delete-offsets) for both kinds of group: a ZooKeeper group's offset
nodes go, refused while it has live members unless forced; a coordinator's group gets OffsetDelete and its
per-partition refusals are reported as Kafka's tool reports them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from metaq.admin.broker_groups import CoordinatorGroup, CoordinatorListing
from metaq.admin.group_deletion import delete_offsets
from metaq.admin.log_offsets import TopicPartition
from metaq.errors import ErrorCode, GroupActiveError, GroupNotFoundError
from tests.admin.fakes import FakeLayout


@dataclass
class DeletingCoordinators:
    groups: list[CoordinatorGroup] = field(default_factory=list)
    refuse: dict[TopicPartition, int] = field(default_factory=dict)
    asked: list[tuple[str, int, list[TopicPartition]]] = field(default_factory=list)

    def list(self) -> CoordinatorListing:
        return CoordinatorListing({g.group: g for g in self.groups})

    def delete(self, group: str, coordinator: int) -> int:
        raise AssertionError("not used")

    def delete_offsets(self, group: str, coordinator: int,
                       partitions: Iterable[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        keys = list(partitions)
        self.asked.append((group, coordinator, keys))
        return 0, {k: self.refuse.get(k, 0) for k in keys}


def test_zookeeper_group_offsets_are_deleted_and_the_others_kept() -> None:
    layout = FakeLayout({"clicks": 3})
    for p in range(3):
        layout.commit("etl", "clicks", p, 10 + p)
    results = delete_offsets(layout, "etl", [("clicks", 1), ("clicks", 0)], DeletingCoordinators())
    assert [(r.topic, r.partition, r.status) for r in results] == [("clicks", 0, "Successful"),
                                                                  ("clicks", 1, "Successful")]
    assert set(layout.offset_data["etl"]) == {("clicks", 2)}


def test_zookeeper_group_with_live_members_is_refused_unless_forced() -> None:
    layout = FakeLayout({"clicks": 1})
    layout.commit("etl", "clicks", 0, 5)
    layout.join("etl", "etl_host-1", {"clicks": 1})
    with pytest.raises(GroupActiveError, match="live member.*--force"):
        delete_offsets(layout, "etl", [("clicks", 0)], DeletingCoordinators())
    assert ("clicks", 0) in layout.offset_data["etl"]
    delete_offsets(layout, "etl", [("clicks", 0)], DeletingCoordinators(), force=True)
    assert ("clicks", 0) not in layout.offset_data["etl"]


def test_protocol_group_uses_offset_delete_and_reports_refusals() -> None:
    coordinators = DeletingCoordinators([CoordinatorGroup("stdg", 2, "Stable", "consumer", "range", ())],
                                        refuse={("clicks", 1): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})
    results = delete_offsets(FakeLayout({"clicks": 2}), "stdg", [("clicks", 0), ("clicks", 1)], coordinators)
    assert coordinators.asked == [("stdg", 2, [("clicks", 0), ("clicks", 1)])]
    assert results[0].status == "Successful"
    assert results[1].status.startswith("Error: ") and "(86)" in results[1].status


def test_unknown_group_is_an_error() -> None:
    with pytest.raises(GroupNotFoundError, match="'ghost' does not exist"):
        delete_offsets(FakeLayout({"clicks": 1}), "ghost", [("clicks", 0)], DeletingCoordinators())
