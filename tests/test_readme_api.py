"""The README names library functions with their signatures; those must be the real ones, so that a reader who
calls them as written is not met by a missing argument (``stop_query(q)`` once failed that way)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
# `metaq.module.function(param, param=default, ...)` in backquotes: a documented signature
SIGNATURE = re.compile(r"`(metaq(?:\.\w+)+)\(([^`()]*)\)`")


def _documented() -> list[tuple[str, list[str]]]:
    found = []
    for dotted, params in SIGNATURE.findall(README.read_text(encoding="utf-8")):
        names = [p.split("=")[0].strip() for p in params.split(",") if p.strip()]
        found.append((dotted, names))
    return found


def test_documented_signatures_match_the_code() -> None:
    documented = _documented()
    assert ("metaq.spark.stop_query", ["query", "options", "timeout_s"]) in documented
    for dotted, names in documented:
        module, _, name = dotted.rpartition(".")
        function = getattr(importlib.import_module(module), name)
        actual = [p for p in inspect.signature(function).parameters]
        assert names == actual, f"README documents {dotted}({', '.join(names)}); the code has {actual}"
