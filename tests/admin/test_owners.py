"""metaq owners: orphan and NO_OWNER detection, and deleting only what is still orphaned."""

from __future__ import annotations

import argparse

import pytest

from metaq.admin import OwnersReport
from metaq.admin.groups import NO_OWNER, OK, ORPHAN
from metaq.admin.owners import delete_orphans, owners_report
from metaq.cli import owners as owners_cli
from metaq.errors import GroupNotFoundError
from tests.admin.fakes import FakeLayout

LIVE = "g_live-1700000000000-aaaa0001"
DEAD = "g_dead-1700000000000-dddd0001"


def _layout() -> FakeLayout:
    layout = FakeLayout(topics_={"t": 3, "u": 1})
    layout.join("g", LIVE, {"t": 1})
    layout.own("g", "t", 0, f"{LIVE}-0")
    layout.own("g", "t", 1, f"{DEAD}-0", session=0)  # persistent: left behind by hand
    return layout


def test_orphans_and_unowned_partitions_are_flagged() -> None:
    report = owners_report(_layout(), "g")  # type: ignore[arg-type]
    assert [(r.topic, r.partition, r.consumer_id, r.ephemeral, r.status) for r in report.rows] == [
        ("t", 0, LIVE, True, OK), ("t", 1, DEAD, False, ORPHAN), ("t", 2, None, None, NO_OWNER)]
    assert report.members == [LIVE]
    assert [r.partition for r in report.orphans] == [1] and [r.partition for r in report.unowned] == [2]
    doc = report.to_json()
    assert (doc["orphans"], doc["unowned"], doc["owners"][1]["owner"]) == (1, 1, f"{DEAD}-0")


def test_without_members_unowned_partitions_are_normal() -> None:
    layout = FakeLayout(topics_={"t": 2})
    layout.own("g", "t", 0, f"{DEAD}-0")
    report = owners_report(layout, "g")  # type: ignore[arg-type]
    assert [(r.partition, r.status) for r in report.rows] == [(0, ORPHAN)]


def test_delete_orphans_skips_nodes_that_changed() -> None:
    layout = _layout()
    layout.own("g", "u", 0, f"{DEAD}-1")
    report = owners_report(layout, "g")  # type: ignore[arg-type]
    layout.own("g", "u", 0, f"{LIVE}-0")  # claimed by a live member after the report was read
    assert delete_orphans(layout, report) == [("t", 1)]  # type: ignore[arg-type]
    assert set(layout.owner_data["g"]) == {("t", 0), ("u", 0)}


def test_delete_orphans_skips_a_consumer_that_registered_again() -> None:
    layout = _layout()
    report = owners_report(layout, "g")  # type: ignore[arg-type]
    layout.join("g", DEAD, {"t": 1})
    assert delete_orphans(layout, report) == []  # type: ignore[arg-type]


def test_missing_group() -> None:
    with pytest.raises(GroupNotFoundError):
        owners_report(FakeLayout(), "nope")  # type: ignore[arg-type]


def test_watch_prints_a_frame_only_when_the_owners_change(capsys: pytest.CaptureFixture[str]) -> None:
    """``owners --watch`` polls, but reprints only on a change: three polls of the same owners, then one after
    an orphan is deleted, give two frames."""
    layout = _layout()

    class _Admin:
        polls = 0

        def owners(self, group: str) -> OwnersReport:
            self.polls += 1
            if self.polls == 4:
                layout.owner_data["g"].pop(("t", 1))
            return owners_report(layout, group)  # type: ignore[arg-type]

    for as_json in (False, True):
        args = argparse.Namespace(group="g", watch=0.0, iterations=5, json=as_json)
        assert owners_cli._watch(_Admin(), args) == 0  # type: ignore[arg-type]
        out = capsys.readouterr().out
        frames = len(out.splitlines()) if as_json else out.count("polling every")
        assert frames == 2, out
        layout = _layout()
