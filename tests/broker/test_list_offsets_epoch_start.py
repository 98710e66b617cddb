"""ListOffsets on a new leader whose high watermark is below its leader epoch's start offset: Kafka answers
OFFSET_NOT_AVAILABLE (retriable) for the latest offset and for a timestamp lookup that would reach the HW, so
the latest offset never goes backwards after a failover (metaq/broker/handlers/list_offsets.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metaq.broker.handlers.list_offsets import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    ListedOffset,
    _lookup,
    unconfirmed_error,
)
from metaq.broker.log.config import LogConfig
from metaq.broker.log.partition_log import PartitionLog
from metaq.broker.replication.partition_state import LeaderState
from metaq.errors import ErrorCode, for_code
from tests.broker import make_batch, make_values

OFFSET_NOT_AVAILABLE = ErrorCode.OFFSET_NOT_AVAILABLE


def test_the_error_is_offset_not_available_retriable_code_78() -> None:
    cls = for_code(78)
    assert cls.message == "OFFSET_NOT_AVAILABLE" and cls.retriable and not cls.invalid_metadata


def test_a_leader_is_unconfirmed_until_its_hw_reaches_the_epoch_start_offset() -> None:
    state = LeaderState(broker_id=1, leader_epoch=4, hw=7, started_ms=0, epoch_start_offset=10)
    assert state.epoch_start_unconfirmed
    state.record_fetch(2, 10, leader_leo=10, now_ms=1)
    state.update_hw(10, isr=(1, 2, 3))  # broker 3 has not fetched yet: it counts as being at the old HW
    assert state.hw == 7 and state.epoch_start_unconfirmed
    state.record_fetch(3, 9, leader_leo=10, now_ms=2)
    state.update_hw(10, isr=(1, 2, 3))
    assert state.hw == 9 and state.epoch_start_unconfirmed
    state.record_fetch(3, 10, leader_leo=10, now_ms=3)
    state.update_hw(10, isr=(1, 2, 3))
    assert state.hw == 10 and not state.epoch_start_unconfirmed


@pytest.mark.parametrize(("version", "replica_id", "expected"), [
    (5, -1, OFFSET_NOT_AVAILABLE), (4, -1, ErrorCode.LEADER_NOT_AVAILABLE), (1, -1, ErrorCode.LEADER_NOT_AVAILABLE),
    (0, -1, ErrorCode.NONE), (5, 2, ErrorCode.NONE), (5, -2, ErrorCode.NONE),
])
def test_only_a_clients_request_from_v1_gets_the_error(version: int, replica_id: int, expected: int) -> None:
    assert unconfirmed_error(version, replica_id) == expected


@dataclass
class _Ctx:
    """The part of BrokerContext ``_lookup`` uses, over one real log; ``hw`` stands for the replica manager."""

    plog: PartitionLog
    hw: int
    epoch_start: int

    def denied(self, *_: Any) -> int:
        return 0

    def serving_error(self, *_: Any) -> int:
        return 0

    def epoch_error(self, *_: Any) -> int:
        return 0

    def log_for(self, *_: Any) -> PartitionLog:
        return self.plog

    def high_watermark(self, *_: Any) -> int:
        return self.hw

    def epoch_start_unconfirmed(self, *_: Any) -> bool:
        return self.hw < self.epoch_start


@pytest.fixture
def plog(tmp_path: Path) -> Iterator[PartitionLog]:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), recover=False)
    log.append(make_batch(make_values(10, 20), timestamps=[1000 + 10 * i for i in range(10)]))
    yield log
    log.close()


def _ask(ctx: _Ctx, timestamp: int, unconfirmed: int = OFFSET_NOT_AVAILABLE,
         client: bool = True) -> ListedOffset:
    return _lookup(ctx, "t", 0, timestamp, -1, unconfirmed, client)  # type: ignore[arg-type]


def test_latest_is_not_available_while_the_hw_is_below_the_epoch_start(plog: PartitionLog) -> None:
    ctx = _Ctx(plog, hw=6, epoch_start=10)
    assert _ask(ctx, LATEST) == ListedOffset(OFFSET_NOT_AVAILABLE)
    assert _ask(ctx, LATEST, ErrorCode.LEADER_NOT_AVAILABLE) == ListedOffset(ErrorCode.LEADER_NOT_AVAILABLE)
    assert _ask(ctx, LATEST, ErrorCode.NONE) == ListedOffset(0, offset=6)  # v0 or a replica: answered as before
    assert _ask(ctx, EARLIEST) == ListedOffset(0, offset=0)  # the earliest offset cannot go backwards
    ctx.hw = 10
    assert _ask(ctx, LATEST) == ListedOffset(0, offset=10)


def test_a_timestamp_lookup_fails_only_when_its_answer_would_reach_the_hw(plog: PartitionLog) -> None:
    ctx = _Ctx(plog, hw=6, epoch_start=10)
    assert _ask(ctx, 1050) == ListedOffset(0, offset=5, timestamp=1050)  # below the HW: already confirmed
    assert _ask(ctx, 1060) == ListedOffset(OFFSET_NOT_AVAILABLE)  # offset 6, at the HW
    assert _ask(ctx, 5000) == ListedOffset(OFFSET_NOT_AVAILABLE)  # not found: the answer may be "after the end"
    assert _ask(ctx, MAX_TIMESTAMP) == ListedOffset(OFFSET_NOT_AVAILABLE)
    ctx.hw = 10
    assert _ask(ctx, 1060) == ListedOffset(0, offset=6, timestamp=1060)
    assert _ask(ctx, 5000) == ListedOffset(0)
    assert _ask(ctx, MAX_TIMESTAMP) == ListedOffset(0, offset=9, timestamp=1090)


def test_a_clients_timestamp_lookup_never_answers_an_offset_at_or_past_the_hw(plog: PartitionLog) -> None:
    """Kafka's rule: a client gets only what it can fetch (below the HW); a replica sees up to the log end."""
    ctx = _Ctx(plog, hw=6, epoch_start=0)  # a confirmed leader whose follower lags: records 6..9 above the HW
    assert _ask(ctx, 1050) == ListedOffset(0, offset=5, timestamp=1050)
    assert _ask(ctx, 1060) == ListedOffset(0)  # offset 6 is at the HW
    assert _ask(ctx, MAX_TIMESTAMP) == ListedOffset(0)  # offset 9
    assert _ask(ctx, 1060, ErrorCode.NONE, client=False) == ListedOffset(0, offset=6, timestamp=1060)
    assert _ask(ctx, MAX_TIMESTAMP, ErrorCode.NONE, client=False) == ListedOffset(0, offset=9, timestamp=1090)
    ctx.hw = 10
    assert _ask(ctx, 1060) == ListedOffset(0, offset=6, timestamp=1060)
    assert _ask(ctx, MAX_TIMESTAMP) == ListedOffset(0, offset=9, timestamp=1090)
