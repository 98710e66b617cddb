"""Kafka's ``partition.metadata`` file: the id of the topic a partition log directory belongs to.

A topic deleted and re-created (for instance after ZooKeeper lost its data while the brokers kept their logs)
has the same name but a new topic id (``/brokers/topics/<t>`` version 3). The file lets the broker tell
the old log from the new topic's, instead of serving the old messages as the new topic's. Format::

    version: 0
    topic_id: <22-character URL-safe base64 UUID>
"""

from __future__ import annotations

from pathlib import Path

from metaq.errors import StorageError
from metaq.fileio import atomic_write

__all__ = ["PARTITION_METADATA_FILE", "read_topic_id", "write_topic_id"]

PARTITION_METADATA_FILE = "partition.metadata"
_VERSION = "0"


def read_topic_id(log_dir: Path) -> str | None:
    """The topic id recorded in ``log_dir`` (None if it has no file); StorageError naming the file if it
    cannot be read or is not in the format above."""
    path = log_dir / PARTITION_METADATA_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise StorageError(f"cannot read {path}: {e}") from e
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            raise StorageError(f"{path}: malformed line {line!r} (expected 'key: value')")
        fields[key.strip()] = value.strip()
    if fields.get("version") != _VERSION:
        raise StorageError(f"{path}: unsupported version {fields.get('version')!r} (expected {_VERSION})")
    topic_id = fields.get("topic_id")
    if not topic_id:
        raise StorageError(f"{path}: no topic_id")
    return topic_id


def write_topic_id(log_dir: Path, topic_id: str) -> None:
    """Record ``topic_id`` in ``log_dir``, atomically (a crash leaves no torn file)."""
    atomic_write(log_dir / PARTITION_METADATA_FILE, f"version: {_VERSION}\ntopic_id: {topic_id}\n".encode())
