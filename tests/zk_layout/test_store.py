"""ZkLayout's pure parts (against a real ZooKeeper: integration_tests/test_zk_store.py)."""

from __future__ import annotations

import pytest

from metaq.errors import (
    ConfigError,
    ZooKeeperUnavailableError,
)
from metaq.zkclient import connect


def test_connect_timeout_is_unavailable_error() -> None:
    with pytest.raises(ZooKeeperUnavailableError, match=r"cannot connect to ZooKeeper at 127\.0\.0\.1:1 within"):
        connect("127.0.0.1:1", connection_timeout_ms=300)


def test_connect_rejects_bad_connect_strings() -> None:
    for bad in ("", "/chroot", "h:1//x", "h:1/x/"):
        with pytest.raises(ConfigError):
            connect(bad)
