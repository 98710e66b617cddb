"""The ops tools ask again for a partition whose leader answered ListOffsets with a retriable error: right
after a failover a new leader answers OFFSET_NOT_AVAILABLE until its high watermark has caught up."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from metaq import retry
from metaq.admin import log_offsets
from metaq.admin.log_offsets import EARLIEST, BrokerLogOffsets
from metaq.client.cluster import ListedOffset, TopicPartition
from metaq.errors import ErrorCode, MetaqError, OffsetNotAvailableError

KEY = ("t", 0)
NOT_AVAILABLE = ListedOffset(None, 1, "OFFSET_NOT_AVAILABLE from broker 1", ErrorCode.OFFSET_NOT_AVAILABLE)


class _Client:
    """Answers each timestamp from a script: the answers of the first calls, then ``end``."""

    def __init__(self, script: list[ListedOffset], end: int) -> None:
        self.script = script
        self.end = end
        self.calls: list[tuple[list[TopicPartition], list[int]]] = []

    def list_offsets_at(self, keys: Iterable[TopicPartition], timestamps: Sequence[int], *,
                        isolation_level: int = 0) -> list[dict[TopicPartition, ListedOffset]]:
        wanted = sorted(keys)
        self.calls.append((wanted, list(timestamps)))
        answer = self.script.pop(0) if self.script else ListedOffset(self.end, 1)
        return [{k: ListedOffset(0, 1) if ts == EARLIEST else answer for k in wanted} for ts in timestamps]


def _offsets(client: _Client) -> BrokerLogOffsets:
    offsets = BrokerLogOffsets.__new__(BrokerLogOffsets)
    offsets._client = client  # type: ignore[assignment]
    offsets._isolation_level = 0
    return offsets


@pytest.fixture(autouse=True)
def fast_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_offsets, "_RETRY", retry.admin_list_offsets(backoff_s=0.001, deadline_s=5.0))


def test_watermarks_ask_again_after_offset_not_available() -> None:
    client = _Client([NOT_AVAILABLE, NOT_AVAILABLE], end=300)
    marks = _offsets(client).watermarks([KEY])
    assert (marks[KEY].start, marks[KEY].end, marks[KEY].error) == (0, 300, None)
    assert len(client.calls) == 3


def test_offsets_for_time_asks_again_after_offset_not_available() -> None:
    client = _Client([NOT_AVAILABLE], end=42)
    assert _offsets(client).offsets_for_time([KEY], 1_700_000_000_000) == {KEY: 42}
    assert [keys for keys, _ in client.calls if keys] == [[KEY], [KEY]]


def test_a_non_retriable_error_is_reported_at_once() -> None:
    denied = ListedOffset(None, 1, "TOPIC_AUTHORIZATION_FAILED from broker 1", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    client = _Client([denied], end=42)
    with pytest.raises(MetaqError, match="TOPIC_AUTHORIZATION_FAILED"):
        _offsets(client).offsets_for_time([KEY], 1_700_000_000_000)
    assert len(client.calls) == 1


def test_the_policy_gives_up_at_its_deadline_and_retries_the_error_class() -> None:
    policy = retry.admin_list_offsets()
    assert policy.delay(1) == policy.delay(10) == 0.2
    assert not policy.exhausted(1000, elapsed_s=4.9) and policy.exhausted(2, elapsed_s=5.0)
    assert policy.retriable(OffsetNotAvailableError("x"))
