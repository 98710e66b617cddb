"""partition.metadata: Kafka's record of the topic id a partition log belongs to, and the manager's check."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from metaq.broker.log.config import LogConfig
from metaq.broker.log.log_manager import LogManager
from metaq.broker.log.partition_metadata import PARTITION_METADATA_FILE, read_topic_id, write_topic_id
from metaq.errors import StorageError

OLD_ID = "AAAAAAAAAAAAAAAAAAAAAA"
NEW_ID = "BBBBBBBBBBBBBBBBBBBBBB"


def test_written_as_kafka_writes_it(tmp_path: Path) -> None:
    write_topic_id(tmp_path, OLD_ID)
    assert (tmp_path / PARTITION_METADATA_FILE).read_bytes() == f"version: 0\ntopic_id: {OLD_ID}\n".encode()
    assert read_topic_id(tmp_path) == OLD_ID
    assert not list(tmp_path.glob("*.tmp"))  # replaced atomically, no temp file left


def test_a_log_without_the_file_has_no_id(tmp_path: Path) -> None:
    assert read_topic_id(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("version: 0\n", "no topic_id"),
        (f"version: 1\ntopic_id: {OLD_ID}\n", "unsupported version '1'"),
        ("garbage\n", "malformed line 'garbage'"),
        (f"topic_id: {OLD_ID}\n", "unsupported version None"),
    ],
)
def test_a_bad_file_is_named(tmp_path: Path, text: str, complaint: str) -> None:
    (tmp_path / PARTITION_METADATA_FILE).write_text(text)
    with pytest.raises(StorageError, match=rf"{PARTITION_METADATA_FILE}: {complaint}"):
        read_topic_id(tmp_path)


def new_manager(log_dir: Path) -> LogManager:
    manager = LogManager([log_dir], LogConfig())
    manager.load()
    return manager


def test_the_first_check_records_the_id_and_a_different_one_is_refused_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = new_manager(tmp_path)
    assert manager.topic_id_matches("t", 0, OLD_ID)
    assert read_topic_id(tmp_path / "t-0") == OLD_ID
    manager.shutdown()

    manager = new_manager(tmp_path)  # a restart: the topic was re-created meanwhile
    with caplog.at_level(logging.ERROR, logger="metaq.broker.log.log_manager"):
        assert not manager.topic_id_matches("t", 0, NEW_ID)
        assert not manager.topic_id_matches("t", 0, NEW_ID)
    [line] = [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "t-0") in line and OLD_ID in line and NEW_ID in line and "delete or move" in line
    assert read_topic_id(tmp_path / "t-0") == OLD_ID  # the old data is left alone
    assert manager.topic_id_matches("t", 0, OLD_ID)
    manager.shutdown()
