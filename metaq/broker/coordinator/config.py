"""The group coordinator's settings, derived from the broker's config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from metaq.broker.config import BrokerConfig


@dataclass(frozen=True)
class CoordinatorConfig:
    broker_id: int
    offsets_topic_num_partitions: int = 50
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 0
    flush_each_commit: bool = False
    offsets_commit_required_acks: int = -1
    group_max_member_metadata_bytes: int = 1048576
    group_max_metadata_bytes: int = 8388608

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Self:
        """The coordinator's settings in a broker config (``offsets.retention.minutes`` in ms; a commit is
        flushed at once when ``log.flush.interval.messages`` asks for a flush per message)."""
        return cls(
            broker_id=config.broker_id,
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_retention_ms=config.offsets_retention_minutes * 60000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            flush_each_commit=config.log_flush_interval_messages <= 1,
            offsets_commit_required_acks=config.offsets_commit_required_acks,
            group_max_member_metadata_bytes=config.group_max_member_metadata_bytes,
            group_max_metadata_bytes=config.group_max_metadata_bytes,
        )
