"""metaq verifiable-consumer's records_consumed batching: a broker-coordinated member reports every record at
once (its commits are reported after the OffsetCommit, so nothing it committed may still be batched)."""

from __future__ import annotations

import json

import pytest

from metaq.cli.verifiable_consumer import ConsumedReport, report_interval_s


def _records(out: str) -> list[tuple[int, int, int]]:
    events = [json.loads(line) for line in out.splitlines()]
    return [(p["partition"], p["minOffset"], p["maxOffset"]) for e in events if e["name"] == "records_consumed"
            for p in e["partitions"]]


def test_a_broker_coordinated_member_reports_each_record_as_it_takes_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_interval_s("kafka", 200) == 0.0
    report = ConsumedReport(report_interval_s("kafka", 200))
    report.add("t", 0, 7)
    report.tick(idle=False)
    assert _records(capsys.readouterr().out) == [(0, 7, 7)]


def test_a_zookeeper_member_batches_until_its_interval(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_interval_s("zookeeper", 200) == 0.2
    report = ConsumedReport(report_interval_s("zookeeper", 200_000))
    report.add("t", 0, 7)
    report.add("t", 0, 8)
    report.tick(idle=False)
    assert _records(capsys.readouterr().out) == []
    report.flush()  # what every ZooKeeper commit does first
    assert _records(capsys.readouterr().out) == [(0, 7, 8)]
