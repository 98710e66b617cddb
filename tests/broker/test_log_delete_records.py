"""DeleteRecords on a partition log: the log start offset moves inside a segment, stays there through
retention and a restart (log-start-offset-checkpoint), and reads below it are out of range. Also topic
config overrides applied to a LogManager's logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaq.broker.log.config import LogConfig
from metaq.broker.log.loader import LOG_START_OFFSET_CHECKPOINT
from metaq.broker.log.log_manager import LogManager
from metaq.errors import OffsetOutOfRangeError
from tests.broker import make_batch, make_values

HOUR = 3600 * 1000
CONFIG = LogConfig(segment_bytes=1000, segment_delete_delay_ms=0)


def _filled(tmp_path: Path, batches: int = 12) -> LogManager:
    manager = LogManager([tmp_path], CONFIG)
    manager.load()
    log = manager.get_or_create("t", 0)
    for i in range(batches):
        log.append(make_batch(make_values(3, 60), base_ts=i * HOUR), now_ms=i * HOUR)
    return manager


def test_delete_records_moves_the_start_and_drops_whole_segments(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    log = manager.get("t", 0)
    assert log is not None
    bases = log.segment_base_offsets()
    assert len(bases) >= 3
    target = bases[1] + 1  # inside the second segment
    assert manager.delete_records("t", 0, target, now_ms=0) == target
    assert log.log_start_offset == target
    assert log.segment_base_offsets() == bases[1:]  # the first segment is wholly below: deleted
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 1 << 20)
    assert log.read(target, 1 << 20) is not None
    found = log.offset_for_timestamp(0)  # a timestamp below the start answers the start
    assert found is not None and found[0] == target
    # never backwards, never past the end
    assert manager.delete_records("t", 0, 1, now_ms=0) == target
    with pytest.raises(OffsetOutOfRangeError):
        manager.delete_records("t", 0, log.log_end_offset + 1, now_ms=0)
    manager.shutdown()


def test_retention_after_delete_records_keeps_the_start(tmp_path: Path) -> None:
    """Regression: retention used to reset the start to the first remaining segment's base offset, below
    the start DeleteRecords had set."""
    manager = _filled(tmp_path)
    log = manager.get("t", 0)
    assert log is not None
    bases = log.segment_base_offsets()
    target = bases[1] + 2
    manager.delete_records("t", 0, target, now_ms=0)
    manager.set_topic_config("t", LogConfig(segment_bytes=1000, segment_delete_delay_ms=0, retention_bytes=10**9))
    log.delete_old_segments(now_ms=0)  # nothing to delete by size: the start must not move back
    assert log.log_start_offset == target
    manager.shutdown()


def test_the_start_survives_a_restart(tmp_path: Path) -> None:
    manager = _filled(tmp_path)
    log = manager.get("t", 0)
    assert log is not None
    target = log.segment_base_offsets()[0] + 4
    manager.delete_records("t", 0, target, now_ms=0)
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text().splitlines()[2:] == [f"t 0 {target}"]
    manager.release_locks()  # as a crash would: no clean shutdown
    again = LogManager([tmp_path], CONFIG)
    again.load()
    reopened = again.get("t", 0)
    assert reopened is not None and reopened.log_start_offset == target
    again.shutdown()


def test_topic_config_applies_to_existing_and_new_logs(tmp_path: Path) -> None:
    manager = _filled(tmp_path, batches=1)
    small = LogConfig(segment_bytes=200, segment_delete_delay_ms=0)
    manager.set_topic_config("t", small)
    log = manager.get("t", 0)
    assert log is not None and log.config == small
    segments = log.segment_count()
    log.append(make_batch(make_values(2, 60)))
    assert log.segment_count() == segments + 1  # the active segment rolls at the new size
    assert manager.get_or_create("t", 1).config == small
    assert manager.get_or_create("u", 0).config == CONFIG
    manager.set_topic_config("t", LogConfig(segment_delete_delay_ms=0))
    log.flush()
    log.append(make_batch(make_values(1, 10)))
    assert log not in manager.flush_due(0)
    manager.set_topic_config("t", LogConfig(segment_delete_delay_ms=0, flush_interval_messages=1))
    assert log in manager.flush_due(0)  # the topic's flush.messages, not the broker's
    manager.set_topic_config("t", CONFIG)  # back to the broker's config
    assert manager.config_for("t") == CONFIG and log.config == CONFIG
    assert manager.delete_topic("t") == [0, 1]
    assert not list(tmp_path.glob("t-*"))
    manager.shutdown()
