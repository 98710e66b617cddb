"""auto.offset.reset accepts the newer clients' earliest/latest as aliases of 0.8's smallest/largest."""

from __future__ import annotations

import pytest

from metaq.consumer import ConsumerConfig
from metaq.errors import ConfigError

BASE = {"group.id": "g", "zookeeper.connect": "127.0.0.1:2181"}


@pytest.mark.parametrize(("given", "meant"), [("earliest", "smallest"), ("latest", "largest"),
                                              ("smallest", "smallest"), ("largest", "largest")])
def test_reset_aliases(given: str, meant: str) -> None:
    assert ConsumerConfig.from_properties({**BASE, "auto.offset.reset": given}).auto_offset_reset == meant


def test_an_unknown_reset_policy_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="auto.offset.reset.*'beginning'"):
        ConsumerConfig.from_properties({**BASE, "auto.offset.reset": "beginning"})
