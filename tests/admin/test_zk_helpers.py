"""The zk_layout helpers the ops tools add, the part that needs no ZooKeeper (the rest:
integration_tests/test_admin_zk_helpers.py)."""

from __future__ import annotations

import pytest

from metaq.errors import ConfigError
from zk_layout import parse_offset_path, paths


def test_parse_offset_path_inverts_offset_path() -> None:
    assert parse_offset_path(paths.offset_path("etl.v2", "page-views", 12)) == ("etl.v2", "page-views", 12)
    for bad in ["/consumers/g/offsets/t", "/consumers/g/owners/t/0", "/consumers/g/offsets/t/01",
                "/brokers/g/offsets/t/0", "/consumers/g/offsets/t/0/x", "/consumers/g/offsets/t/p"]:
        with pytest.raises(ConfigError):
            parse_offset_path(bad)
