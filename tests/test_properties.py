"""load_properties: a bounded read, UTF-8 errors and duplicate keys that name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from metaq.config import MAX_PROPERTIES_BYTES, load_properties
from metaq.errors import ConfigError


def test_reads_keys(tmp_path: Path) -> None:
    path = tmp_path / "a.properties"
    path.write_text("# c\na=1\nb: two\nc=x\\\n  y\n")
    assert load_properties(path) == {"a": "1", "b": "two", "c": "xy"}


def test_duplicate_key(tmp_path: Path) -> None:
    path = tmp_path / "a.properties"
    path.write_text("a=1\nb=2\n\na = 3\n")
    with pytest.raises(ConfigError, match=r"a\.properties:4: key 'a' is set again \(first on line 1\)"):
        load_properties(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "a.properties"
    path.write_bytes(b"a=1\nb=\xff\n")
    with pytest.raises(ConfigError, match=r"a\.properties:2: not UTF-8 text \(byte 0xff"):
        load_properties(path)


def test_too_large(tmp_path: Path) -> None:
    path = tmp_path / "a.properties"
    path.write_bytes(b"#" * (MAX_PROPERTIES_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        load_properties(path)
