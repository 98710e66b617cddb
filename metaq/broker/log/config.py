"""Configuration of the on-disk log (Kafka's ``log.*`` broker properties)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metaq.config import Config, non_negative, positive, prop

_INT32_MAX = 2**31 - 1


def _segment_bytes(value: Any) -> str | None:
    # Positions in the .index are int32, so a segment cannot grow past 2 GiB.
    if value < 14 or value > _INT32_MAX:
        return f"must be between 14 and {_INT32_MAX}"
    return None


def _index_bytes(value: Any) -> str | None:
    # Room for at least one entry of each index (offset 8 bytes, time 12 bytes).
    return None if value >= 12 else "must be >= 12"


@dataclass(frozen=True)
class LogConfig(Config):
    """Segment rolling, indexing, flushing and retention of partition logs.

    Field names are what the code uses; the Kafka property names let a broker ``.properties`` file set them
    (``LogConfig.from_properties({"log.segment.bytes": "1048576"})``)."""

    segment_bytes: int = prop("log.segment.bytes", 1073741824, check=_segment_bytes)
    segment_ms: int = prop("log.roll.ms", 168 * 3600 * 1000, check=positive)
    retention_bytes: int = prop("log.retention.bytes", -1, doc="per partition; negative = unlimited")
    retention_ms: int = prop("log.retention.ms", 168 * 3600 * 1000, doc="negative = unlimited")
    index_interval_bytes: int = prop("log.index.interval.bytes", 4096, check=non_negative)
    index_max_bytes: int = prop("log.index.size.max.bytes", 10485760, check=_index_bytes)
    flush_interval_messages: int = prop("log.flush.interval.messages", 2**63 - 1, check=positive)
    flush_interval_ms: int | None = prop("log.flush.interval.ms", None, check=non_negative)
    segment_delete_delay_ms: int = prop("log.segment.delete.delay.ms", 60000, check=non_negative)
    max_message_bytes: int = prop("message.max.bytes", 1048588, check=positive)
    producer_id_expiration_ms: int = prop("producer.id.expiration.ms", 86400000, check=positive,
                                          doc="forget an idempotent producer idle this long (by its batches' "
                                              "timestamps), as Kafka")

    def __post_init__(self) -> None:
        # Direct construction (tests, embedding) gets the same checks as from_properties().
        self._check_values()
