"""The type of a JSON document as metaq builds and reads them (the ``--json`` output of the tools, plans and exports).

Covariant containers (``Sequence``, ``Mapping``) so that a ``list[int]`` or a ``dict[str, str]`` is a JSON value as it
is; what ``json.loads`` returns is one too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JsonValue: TypeAlias = None | bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"]
"""Any JSON value."""

JsonObject: TypeAlias = dict[str, JsonValue]
"""A JSON object being built (``to_json`` results)."""

__all__ = ["JsonObject", "JsonValue"]
