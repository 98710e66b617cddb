"""Kafka's offset checkpoint text format.

A checkpoint looks like::

    0                   <- format version
    2                   <- number of entries
    clicks 0 4213       <- topic partition offset
    clicks 1 977

It is always replaced atomically (:func:`metaq.fileio.atomic_write`) so a crash leaves either the old or
the new file, never a torn one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from metaq.errors import StorageError
from metaq.fileio import atomic_write

__all__ = ["CHECKPOINT_VERSION", "read_checkpoint", "write_checkpoint"]

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


def format_checkpoint(entries: Mapping[TopicPartition, int]) -> bytes:
    """The checkpoint text for ``entries``, sorted so the file is stable and diffable."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    for (topic, partition), offset in sorted(entries.items()):
        if not topic or any(ch.isspace() for ch in topic):
            raise StorageError(f"cannot checkpoint topic {topic!r}: empty or contains whitespace")
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_checkpoint(path: Path | str, entries: Mapping[TopicPartition, int]) -> None:
    """Atomically write a version-0 checkpoint of ``(topic, partition) -> offset``."""
    atomic_write(path, format_checkpoint(entries))


def read_checkpoint(path: Path | str) -> dict[TopicPartition, int]:
    """Read a checkpoint (a missing file is empty); a malformed one raises StorageError naming the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise StorageError(f"cannot read checkpoint {path}: {e}") from e
    return parse_checkpoint(text, str(path))


def _int_field(value: str, what: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise StorageError(f"{where}: {what} {value!r} is not an integer") from None


def parse_checkpoint(text: str, name: str = "<checkpoint>") -> dict[TopicPartition, int]:
    """Parse checkpoint text; errors name ``name`` and the 1-based line number."""
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()  # the trailing newline, or blank lines an editor left
    if len(lines) < 2:
        raise StorageError(f"{name}: malformed checkpoint, expected a version line and a count line")
    version = _int_field(lines[0].strip(), "version", f"{name}:1")
    if version != CHECKPOINT_VERSION:
        raise StorageError(f"{name}:1: unsupported checkpoint version {version}, expected {CHECKPOINT_VERSION}")
    count = _int_field(lines[1].strip(), "entry count", f"{name}:2")
    if count < 0 or count != len(lines) - 2:
        raise StorageError(f"{name}:2: entry count {count} does not match the {len(lines) - 2} entry lines")
    entries: dict[TopicPartition, int] = {}
    for number, line in enumerate(lines[2:], start=3):
        where = f"{name}:{number}"
        fields = line.split()
        if len(fields) != 3:
            raise StorageError(f"{where}: expected 'topic partition offset', got {line!r}")
        topic = fields[0]
        partition = _int_field(fields[1], "partition", where)
        offset = _int_field(fields[2], "offset", where)
        if partition < 0:
            raise StorageError(f"{where}: negative partition {partition}")
        entries[(topic, partition)] = offset
    return entries
