"""Times as the ops tools print them; a module of its own so that tables can be drawn without importing the
admin API's Kafka clients."""

from __future__ import annotations

import datetime as dt


def format_ms(ms: int | None) -> str:
    """Epoch ms as ISO 8601 UTC with milliseconds, or ``-``."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
