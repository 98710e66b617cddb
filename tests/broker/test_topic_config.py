"""Topic config overrides: validation (errors name the key), mapping onto LogConfig, and the
IncrementalAlterConfigs operations."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from metaq.broker.handlers.configs import APPEND, DELETE, SET, SUBTRACT, _incremental
from metaq.broker.handlers.create_delete_topics import AdminError
from metaq.broker.log.config import LogConfig
from metaq.broker.topic_config import broker_property, default_value, log_config_for, validate_topic_config
from metaq.errors import ConfigError, ErrorCode


def test_validation_normalises_and_names_the_key() -> None:
    assert validate_topic_config({"retention.ms": " 600000 ", "cleanup.policy": "delete"}) == {
        "retention.ms": "600000", "cleanup.policy": "delete"}
    with pytest.raises(ConfigError, match="Unknown topic config name: retention.hours"):
        validate_topic_config({"retention.hours": "1"})
    assert validate_topic_config({"cleanup.policy": " compact, delete", "min.cleanable.dirty.ratio": "0.01",
                                  "delete.retention.ms": "100"}) == {
        "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100"}
    for policy in ("", "compact,compact", "shred"):
        with pytest.raises(ConfigError, match="cleanup.policy: must be a non-empty list"):
            validate_topic_config({"cleanup.policy": policy})
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio: must be between 0 and 1"):
        validate_topic_config({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(ConfigError, match="segment.bytes"):
        validate_topic_config({"segment.bytes": "13"})
    with pytest.raises(ConfigError, match="segment.bytes: Not a number"):
        validate_topic_config({"segment.bytes": "1GB"})
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        validate_topic_config({"min.insync.replicas": "0"})
    with pytest.raises(ConfigError, match="segment.bytes"):
        validate_topic_config({"segment.bytes": str(2**31)})


def test_overrides_map_onto_the_log_config() -> None:
    base = LogConfig()
    config = log_config_for(base, {"retention.ms": "1000", "segment.bytes": "2048", "min.insync.replicas": "2"})
    assert (config.retention_ms, config.segment_bytes) == (1000, 2048)
    assert config.retention_bytes == base.retention_bytes
    assert log_config_for(base, {}) is base
    assert default_value(base, "segment.bytes") == str(base.segment_bytes)
    assert default_value(base, "cleanup.policy") == "delete"
    assert broker_property("retention.ms") == "log.retention.ms"
    assert broker_property("segment.bytes") == "log.segment.bytes"
    assert broker_property("cleanup.policy") == "log.cleanup.policy"
    assert broker_property("min.cleanable.dirty.ratio") == "log.cleaner.min.cleanable.ratio"
    compacted = log_config_for(base, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
                                      "min.compaction.lag.ms": "5", "max.compaction.lag.ms": "60000"})
    assert (compacted.compact, compacted.delete, compacted.min_cleanable_dirty_ratio) == (True, False, 0.1)
    assert (compacted.min_compaction_lag_ms, compacted.max_compaction_lag_ms) == (5, 60000)
    assert default_value(compacted, "cleanup.policy") == "compact"
    with pytest.raises(ConfigError, match="min.compaction.lag.ms .* > max.compaction.lag.ms"):
        log_config_for(base, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def _op(name: str, operation: int, value: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(name=name, config_operation=operation, value=value)


def test_incremental_operations() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "4096"}
    assert _incremental(current, [_op("retention.ms", SET, "2000"), _op("segment.bytes", DELETE)]) == {
        "retention.ms": "2000"}
    assert _incremental({}, [_op("cleanup.policy", APPEND, "delete")]) == {"cleanup.policy": "delete"}
    assert _incremental({}, [_op("cleanup.policy", SUBTRACT, "delete")]) == {"cleanup.policy": ""}
    for ops, code in (
        ([_op("retention.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG),
        ([_op("nope", SET, "1")], ErrorCode.INVALID_CONFIG),
        ([_op("retention.ms", SET, "1"), _op("retention.ms", DELETE)], ErrorCode.INVALID_REQUEST),
        ([_op("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST),
    ):
        with pytest.raises(AdminError) as info:
            _incremental(current, ops)
        assert info.value.code == code


@pytest.mark.parametrize("number", ["1_000", "\u0661\u0660\u0660\u0660", "1e3", "0x10", "", " "])
def test_numbers_are_ascii_digits_as_kafka_reads_them(number: str) -> None:
    """Python's int() takes '1_000' and Arabic-Indic digits; Kafka's ConfigDef does not (blanks are trimmed)."""
    from metaq.broker.config import BrokerConfig

    with pytest.raises(ConfigError, match="retention.ms: Not a number"):
        validate_topic_config({"retention.ms": number})
    zk = {"zookeeper.connect": "127.0.0.1:2181"}
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig.from_properties({**zk, "num.partitions": number})
    assert BrokerConfig.from_properties({**zk, "num.partitions": " 12 "}).num_partitions == 12


def test_message_timestamp_type_is_create_time_or_log_append_time() -> None:
    """Kafka's two timestamp types (matched ignoring case), the broker's log.message.timestamp.type the default;
    anything else is refused."""
    assert validate_topic_config({"message.timestamp.type": "createtime"}) == {"message.timestamp.type": "CreateTime"}
    assert validate_topic_config({"message.timestamp.type": "logappendtime"}) == {
        "message.timestamp.type": "LogAppendTime"}
    with pytest.raises(ConfigError, match="message.timestamp.type: String must be one of: CreateTime, LogAppendTime"):
        validate_topic_config({"message.timestamp.type": "BrokerTime"})
    assert default_value(LogConfig(), "message.timestamp.type") == "CreateTime"
    assert log_config_for(LogConfig(), {"message.timestamp.type": "CreateTime"}) == LogConfig()
    appended = log_config_for(LogConfig(), {"message.timestamp.type": "LogAppendTime"})
    assert appended.log_append_time and not LogConfig().log_append_time
    from metaq.broker.config import BrokerConfig

    broker = BrokerConfig.from_properties({"zookeeper.connect": "127.0.0.1:2181",
                                           "log.message.timestamp.type": "LogAppendTime"})
    assert default_value(broker.log_config(), "message.timestamp.type") == "LogAppendTime"
    assert broker_property("message.timestamp.type") == "log.message.timestamp.type"
    with pytest.raises(ConfigError, match="log.message.timestamp.type"):
        BrokerConfig.from_properties({"zookeeper.connect": "127.0.0.1:2181", "log.message.timestamp.type": "Now"})
