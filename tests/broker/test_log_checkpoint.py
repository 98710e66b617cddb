"""Atomic writes and Kafka's checkpoint text format."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaq.broker.log.checkpoint import read_checkpoint, write_checkpoint
from metaq.errors import StorageError
from metaq.fileio import atomic_write


def test_round_trip_and_exact_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    entries = {("clicks", 1): 977, ("clicks", 0): 4213, ("my-topic.v2", 12): 0}
    write_checkpoint(path, entries)
    assert path.read_text() == "0\n3\nclicks 0 4213\nclicks 1 977\nmy-topic.v2 12 0\n"
    assert read_checkpoint(path) == entries
    assert not list(tmp_path.glob("*.tmp"))


def test_empty_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert read_checkpoint(path) == {}
    write_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_checkpoint(path) == {}


def test_atomic_write_replaces(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_atomic_write_error_is_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot write"):
        atomic_write(tmp_path / "missing-dir" / "f", b"x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a version line"),
        ("0\n", "expected a version line"),
        ("x\n0\n", r"cp:1: version 'x' is not an integer"),
        ("1\n0\n", r"cp:1: unsupported checkpoint version 1"),
        ("0\nfoo\n", r"cp:2: entry count 'foo'"),
        ("0\n2\nt 0 1\n", r"cp:2: entry count 2 does not match the 1 entry lines"),
        ("0\n1\nt 0\n", r"cp:3: expected 'topic partition offset'"),
        ("0\n2\nt 0 1\nt x 1\n", r"cp:4: partition 'x' is not an integer"),
        ("0\n1\nt 0 zz\n", r"cp:3: offset 'zz' is not an integer"),
        ("0\n1\nt -1 5\n", r"cp:3: negative partition"),
    ],
)
def test_malformed_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(StorageError, match=message):
        read_checkpoint(path)


def test_trailing_blank_lines_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n1\nt 3 9\n\n\n")
    assert read_checkpoint(path) == {("t", 3): 9}


def test_topic_with_space_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="whitespace"):
        write_checkpoint(tmp_path / "cp", {("a b", 0): 1})
