"""The broker's on-disk log storage, in Kafka's format: segmented ``.log`` files of record batches with
sparse ``.index``/``.timeindex`` files, checkpoints, recovery, flushing and retention.

Names are imported lazily, so that importing a leaf module (``metaq.broker.log.config`` from the broker's
config) stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metaq.broker.log.config import LogConfig
    from metaq.broker.log.log_manager import LogManager
    from metaq.broker.log.partition_log import AppendResult, PartitionLog
    from metaq.broker.log.segment_reads import FetchSlice

__all__ = ["AppendResult", "FetchSlice", "LogConfig", "LogManager", "PartitionLog"]

_WHERE = {
    "AppendResult": "metaq.broker.log.partition_log",
    "FetchSlice": "metaq.broker.log.segment_reads",
    "LogConfig": "metaq.broker.log.config",
    "LogManager": "metaq.broker.log.log_manager",
    "PartitionLog": "metaq.broker.log.partition_log",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
