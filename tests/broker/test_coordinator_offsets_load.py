"""Loading a ``__consumer_offsets`` partition whose log holds a batch that does not decode: the batch is
skipped and logged, every commit before and after it is loaded, and the partition serves commits."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from metaq.broker.coordinator.offsets_partition import LOADED, CommittedOffset, OffsetsPartition
from metaq.broker.coordinator.offsets_schema import OFFSETS_TOPIC
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.log.segment import LOG_SUFFIX
from metaq.testing.batches import INVALID_BATCHES


def _open(directory: Path) -> PartitionLog:
    return PartitionLog.open(directory, OFFSETS_TOPIC, 0, LogConfig(), recover=False)


def _write_raw_batch(directory: Path, kind: str) -> None:
    """Append a batch the broker would now refuse straight to the closed log's last segment."""
    log = _open(directory)
    end = log.log_end_offset
    log.close()
    batch = bytearray(INVALID_BATCHES[kind]()[0])
    struct.pack_into(">q", batch, 0, end)
    with open(sorted(directory.glob(f"*{LOG_SUFFIX}"))[-1], "ab") as segment:
        segment.write(batch)


def _commit(part: OffsetsPartition, group: str, partition: int, offset: int) -> None:
    part.append_commits(group, {("t", partition): CommittedOffset(offset, "", 1_700_000_000_000)})


@pytest.mark.parametrize("kind", ["garbage-records", "garbage-gzip", "header-key-not-utf8"])
def test_undecodable_batch_is_skipped_and_logged(tmp_path: Path, kind: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / f"{OFFSETS_TOPIC}-0"
    log = _open(directory)
    part = OffsetsPartition(log)
    for i in range(20):  # several good batches in the same read as the bad one
        _commit(part, "before", i, 100 + i)
    log.close()
    _write_raw_batch(directory, kind)

    log = _open(directory)
    part = OffsetsPartition(log)
    part.load()
    assert part.state == LOADED
    _commit(part, "after", 0, 5)
    log.close()

    log = _open(directory)
    part = OffsetsPartition(log)
    with caplog.at_level(logging.WARNING):
        part.load()
    assert part.state == LOADED
    assert {tp: c.offset for tp, c in part.fetch("before", None).items()} == {("t", i): 100 + i for i in range(20)}
    assert part.fetch("after", None)[("t", 0)].offset == 5
    assert "skipping unreadable batch at offsets 20.." in caplog.text
    log.close()
