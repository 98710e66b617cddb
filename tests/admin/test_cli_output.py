"""The CLI's shared rendering (tables, progress bar) and its usage errors (exit 2, before any connection)."""

from __future__ import annotations

import argparse
import io

import pytest

from metaq.admin.groups import GroupDescription, Member, PartitionLag
from metaq.cli.groups import render_description
from metaq.cli.main import main
from metaq.cli.output import ProgressBar, apply_overrides, table
from metaq.errors import ConfigError


def test_table_aligns_columns_and_shows_unknown_as_dash() -> None:
    text = table(["TOPIC", "LAG", "OWNER"], [("clicks", 5, None), ("a-much-longer-topic", None, True)])
    assert text.splitlines() == [
        "TOPIC                LAG  OWNER",
        "clicks               5    -",
        "a-much-longer-topic  -    yes",
    ]


def test_one_huge_cell_does_not_widen_the_other_rows() -> None:
    huge = "g" * 32_767  # a legal group id; it used to pad every row of `groups list` to 32,767 columns
    lines = table(["GROUP", "STATE"], [("etl", "Stable"), (huge, "Empty"), ("billing", "Dead")]).splitlines()
    assert lines[1] == "etl      Stable"
    assert lines[2] == f"{huge}  Empty"
    assert lines[3] == "billing  Dead"


def test_progress_bar_draws_only_when_enabled() -> None:
    out = io.StringIO()
    with ProgressBar("importing", 4, stream=out, enabled=True, interval_s=0) as bar:
        bar.update(2)
        assert bar.render() == "importing [" + "#" * 15 + "." * 15 + "] 2/4"
        bar.update(2)
    assert out.getvalue().endswith("] 4/4\n") and "\r" in out.getvalue()
    quiet = io.StringIO()  # not a terminal: nothing is drawn by default
    with ProgressBar("importing", 4, stream=quiet) as bar:
        bar.update(4)
    assert quiet.getvalue() == ""
    assert ProgressBar("producing", None).render() == "producing 0"


def test_describe_rendering() -> None:
    d = GroupDescription("etl", [Member("etl_h-1700000000000-ab", "h", {"clicks": 2}, "static", 1700000000000)],
                         [PartitionLag("clicks", 0, 90, 0, 100, "etl_h-1700000000000-ab-0", 1700000000000,
                                       1690000000000, "OK", "zookeeper")])
    text = render_description(d)
    assert text.startswith("Group etl: 1 live member, offsets in zookeeper, total lag 10")
    assert "clicks:2" in text and "2023-11-14T22:13:20Z" in text
    header, row = text.splitlines()[-2:]
    assert header.split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER",
                              "LAST-COMMIT", "SOURCE", "STATUS"]
    assert row.split() == ["clicks", "0", "90", "100", "10", "etl_h-1700000000000-ab-0", "2023-11-14T22:13:20Z",
                           "zookeeper", "OK"]


@pytest.mark.parametrize("argv", [
    ["groups", "describe", "g"],  # neither --zookeeper nor --config
    ["offsets", "reset", "g", "--topic", "t", "--zookeeper", "h:1"],  # no reset mode
    ["offsets", "reset", "g", "--topic", "t", "--to-earliest", "--to-latest", "--zookeeper", "h:1"],
    ["offsets", "reset", "g", "--topic", "t", "--shift-by", "x", "--zookeeper", "h:1"],
    ["console-consumer", "--zookeeper", "h:1", "--topic", "t", "--offset", "5"],  # --offset needs --partition
    ["console-consumer", "--zookeeper", "h:1", "--topic", "t", "--partition", "0", "--group", "g"],
    ["console-consumer", "--zookeeper", "h:1", "--topic", "t", "--partition", "0", "--offset", "first"],
    ["recover", "drop", "--topic", "t", "--group", "g"],  # neither --all nor --id
    ["owners"],
    ["nonsense"],
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_missing_config_file_is_an_error_not_usage(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["groups", "list", "--config", str(tmp_path / "missing.properties")]) == 1
    assert "cannot read config file" in capsys.readouterr().err
    (tmp_path / "c.properties").write_text("group.id=etl\n")
    assert main(["groups", "list", "--config", str(tmp_path / "c.properties")]) == 1
    assert "has no zookeeper.connect" in capsys.readouterr().err


def test_command_line_overrides_win_over_the_config_file() -> None:
    args = argparse.Namespace(property=["linger.ms = 50", "client.id=a=b"])
    props: dict[str, object] = {"linger.ms": 5, "zookeeper.connection.timeout.ms": 6000}
    apply_overrides(props, args, 1500)
    assert props == {"linger.ms": "50", "zookeeper.connection.timeout.ms": 1500, "client.id": "a=b"}
    apply_overrides(props, argparse.Namespace(property=[]), None)  # no timeout given: the file's stays
    assert props["zookeeper.connection.timeout.ms"] == 1500
    with pytest.raises(ConfigError, match=r"--property 'linger\.ms': expected KEY=VALUE"):
        apply_overrides({}, argparse.Namespace(property=["linger.ms"]), None)


def test_console_consumer_formatter_properties_are_kafkas() -> None:
    """``--property print.timestamp=true`` etc., as Kafka's console consumer: the fields in Kafka's order, joined
    by key.separator; the formatter's keys are taken out of the consumer properties."""
    from metaq.cli.console_consumer import Formatter, _formatter

    args = argparse.Namespace(property=["print.offset=true", "print.partition=true", "print.timestamp=true",
                                        "print.key=true", "key.separator=|", "auto.commit.interval.ms=500"],
                              print_key=False)
    formatter = _formatter(args)
    assert formatter == Formatter(timestamp=True, partition=True, offset=True, key=True, separator="|")
    assert args.property == ["auto.commit.interval.ms=500"]
    assert formatter.line(2, 41, 1700000000000, None, b"v") == "CreateTime:1700000000000|Partition:2|Offset:41|null|v"
    assert Formatter(offset=True).line(0, 7, 0, b"k", b"v") == "Offset:7\tv"
    plain = argparse.Namespace(property=["fetch.message.max.bytes=1000"], print_key=False)
    assert _formatter(plain) is None and plain.property == ["fetch.message.max.bytes=1000"]
