"""Configuration of the on-disk log (Kafka's ``log.*`` broker properties)."""

from __future__ import annotations

from dataclasses import dataclass

from metaq.config import Config, non_negative, one_of, positive, prop
from metaq.errors import ConfigError

_INT32_MAX = 2**31 - 1


def _segment_bytes(value: int) -> str | None:
    # Positions in the .index are int32, so a segment cannot grow past 2 GiB.
    if value < 14 or value > _INT32_MAX:
        return f"must be between 14 and {_INT32_MAX}"
    return None


CLEANUP_POLICIES = ("compact", "delete")
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)


def _cleanup_policy(value: tuple[str, ...]) -> str | None:
    # Kafka's LogConfig: a non-empty list of "compact" and/or "delete" (any order, each at most once).
    if not value or any(p not in CLEANUP_POLICIES for p in value) or len(set(value)) != len(value):
        return "must be a non-empty list of 'compact' and 'delete'"
    return None


def _ratio(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


def _index_bytes(value: int) -> str | None:
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

    timestamp_type: str = prop("log.message.timestamp.type", CREATE_TIME, check=one_of(*TIMESTAMP_TYPES),
                               doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps every "
                                   "appended batch with the broker's clock (docs/legacy-wire.md)")

    cleanup_policy: tuple[str, ...] = prop("log.cleanup.policy", ("delete",), check=_cleanup_policy,
                                           doc="compact, delete or both (docs/compaction.md)")
    min_cleanable_dirty_ratio: float = prop("log.cleaner.min.cleanable.ratio", 0.5, check=_ratio,
                                            doc="clean a log once this share of its cleanable bytes is dirty")
    min_compaction_lag_ms: int = prop("log.cleaner.min.compaction.lag.ms", 0, check=non_negative,
                                      doc="records younger than this are never compacted")
    max_compaction_lag_ms: int = prop("log.cleaner.max.compaction.lag.ms", 2**63 - 1, check=positive,
                                      doc="a dirty record older than this makes its log eligible whatever the ratio")
    delete_retention_ms: int = prop("log.cleaner.delete.retention.ms", 86400000, check=non_negative,
                                    doc="how long a tombstone is kept after the cleaner first passed it")

    @property
    def log_append_time(self) -> bool:
        """Whether appended batches get the broker's time (``message.timestamp.type=LogAppendTime``)."""
        return self.timestamp_type == LOG_APPEND_TIME

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts the log (``cleanup.policy`` holds ``compact``)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments (``cleanup.policy`` holds ``delete``)."""
        return "delete" in self.cleanup_policy

    def __post_init__(self) -> None:
        # Direct construction (tests, embedding) gets the same checks as from_properties().
        self._check_values()
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:  # as Kafka's LogConfig.validateValues
            raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) >"
                              f" max.compaction.lag.ms ({self.max_compaction_lag_ms})")
