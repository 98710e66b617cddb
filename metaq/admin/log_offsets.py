"""Where each partition's log starts and ends, and which offset a point in time maps to, asked of its leader.

    log_offsets = BrokerLogOffsets(layout)
    log_offsets.watermarks([("clicks", 0)])          # {("clicks", 0): Watermarks(start=0, end=4300, leader=0)}
    log_offsets.offsets_for_time([("clicks", 0)], 1700000000000)   # {("clicks", 0): 4100}
    log_offsets.close()

The leader comes from the partition's ``state`` node and its address from ``/brokers/ids/<id>``, as Kafka's
ConsumerOffsetChecker finds it, both read anew for every call by :class:`metaq.client.ClusterClient`. A
partition whose leader is missing or does not answer gets a :class:`Watermarks` with ``error`` set instead of
raising: an ops view shows what it can.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from metaq.client.cluster import EARLIEST, LATEST, ClusterClient, ListedOffset, TopicPartition
from metaq.client.security import SecurityConfig
from metaq.client.settings import ConnectionSettings
from metaq.client.versions import DEFAULT_FALLBACK
from metaq.errors import MetaqError, for_code
from metaq.retry import admin_list_offsets
from zk_layout import ZkLayout

log = logging.getLogger(__name__)

__all__ = ["EARLIEST", "LATEST", "BrokerLogOffsets", "LogOffsets", "TopicPartition", "Watermarks"]

_RETRY = admin_list_offsets()


@dataclass(frozen=True, slots=True)
class Watermarks:
    """A partition's log start (low watermark) and log end (high watermark) offsets, or why they are unknown."""

    start: int | None
    end: int | None
    leader: int | None = None
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.start is not None and self.end is not None

    @classmethod
    def unknown(cls, error: str, leader: int | None = None) -> Watermarks:
        return cls(None, None, leader, error)


class LogOffsets(Protocol):
    """What the admin functions need from the brokers; tests pass an in-memory fake."""

    def watermarks(self, keys: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]: ...

    def offsets_for_time(self, keys: Iterable[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]: ...


class BrokerLogOffsets:
    """:class:`LogOffsets` over ListOffsets requests to the partitions' leaders; see the module docstring.

    One connection per leader is kept until :meth:`close`."""

    def __init__(self, layout: ZkLayout, *, client_id: str = "metaq-admin", request_timeout_ms: int = 10000,
                 security: SecurityConfig | None = None, isolation_level: int = 0,
                 broker_version_fallback: str = DEFAULT_FALLBACK) -> None:
        """``isolation_level`` 1 (read_committed): the end of a log is its last stable offset, as a
        read_committed consumer sees it (docs/transactions.md §4); 0 (the default, as Kafka's tools): the
        high watermark. ``broker_version_fallback``: for Kafka 0.8/0.9 brokers (docs/legacy-wire.md)."""
        self._isolation_level = isolation_level
        settings = ConnectionSettings(client_id=client_id, request_timeout_ms=request_timeout_ms,
                                      connect_timeout_ms=request_timeout_ms, security=security or SecurityConfig(),
                                      broker_version_fallback=broker_version_fallback)
        self._client = ClusterClient(layout, settings, metadata_max_age_ms=0)  # every call reads ZooKeeper

    def watermarks(self, keys: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        """Start and end offsets of every partition in ``keys``; one pipelined pair of requests per leader."""
        starts, ends = self._list_offsets_at(keys, [EARLIEST, LATEST])
        return {key: _combine(starts[key], ends[key]) for key in starts}

    def offsets_for_time(self, keys: Iterable[TopicPartition], timestamp_ms: int) -> dict[TopicPartition, int]:
        """The first offset whose record timestamp is at or after ``timestamp_ms``; the log end offset when
        there is none (the time is after the last record), as Kafka's ``--to-datetime`` does. Raises
        :class:`MetaqError` naming the partitions it cannot ask."""
        answers = self._list_offsets_at(keys, [timestamp_ms])[0]
        for key, answer in sorted(answers.items()):
            if answer.offset is None and not answer.no_leader:
                raise MetaqError(f"cannot look up the offset of {key[0]}-{key[1]} by time: {answer.error}")
        problems = {key: answer for key, answer in answers.items() if answer.no_leader}
        if problems:
            raise MetaqError(_describe_problems(problems))
        found: dict[TopicPartition, int] = {}
        pending: list[TopicPartition] = []
        for key, answer in sorted(answers.items()):
            assert answer.offset is not None
            if answer.offset >= 0:
                found[key] = answer.offset
            else:
                pending.append(key)
        for key, marks in self.watermarks(pending).items():
            if marks.end is None:
                raise MetaqError(f"{key[0]}-{key[1]}: {marks.error}")
            found[key] = marks.end
        return found

    def _list_offsets_at(self, keys: Iterable[TopicPartition], timestamps: Sequence[int],
                         ) -> list[dict[TopicPartition, ListedOffset]]:
        """The client's ``list_offsets_at``, asking again (as :data:`_RETRY` allows) for the partitions answered
        with a retriable error: right after a failover the new leader answers OFFSET_NOT_AVAILABLE until its
        high watermark has caught up."""
        wanted = sorted(set(keys))
        results = self._client.list_offsets_at(wanted, timestamps, isolation_level=self._isolation_level)
        attempt, started = 1, time.monotonic()
        while True:
            again = [key for key in wanted if any(_retriable(result[key]) for result in results)]
            if not again or _RETRY.exhausted(attempt, time.monotonic() - started):
                return results
            reason = next(r[k].error for r in results for k in again if _retriable(r[k]))
            log.info("ListOffsets again for %s: %s", again, reason)
            time.sleep(_RETRY.delay(attempt))
            attempt += 1
            for result, answers in zip(results, self._client.list_offsets_at(
                    again, timestamps, isolation_level=self._isolation_level), strict=True):
                result.update(answers)

    def close(self) -> None:
        self._client.close()


def _retriable(answer: ListedOffset) -> bool:
    return answer.error_code != 0 and for_code(answer.error_code).retriable


def _combine(start: ListedOffset, end: ListedOffset) -> Watermarks:
    for answer in (start, end):
        if answer.offset is None:
            return Watermarks.unknown(answer.error or "no answer", answer.broker_id)
    return Watermarks(start.offset, end.offset, start.broker_id)


def _describe_problems(problems: dict[TopicPartition, ListedOffset]) -> str:
    shown = ", ".join(f"{t}-{p} ({a.error})" for (t, p), a in sorted(problems.items())[:5])
    more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
    return f"cannot reach the leader of {shown}{more}"
