"""The decoded record, as every reader returns it (record batches v2 in metaq/protocol/records.py and its
pure-Python loops in record_loops.py, message sets v0/v1 in legacy.py): one tuple per record, no object per field,
because the consumer's hot path builds millions of them (docs/architecture.md, "Consumer CPU and the garbage
collector")."""

from __future__ import annotations

__all__ = ["Headers", "Record"]

Headers = tuple[tuple[str, bytes | None], ...]
Record = tuple[int, int, bytes | None, bytes | None, Headers]
"""A decoded record: (offset, timestamp, key, value, headers)."""
