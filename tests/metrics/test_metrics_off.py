"""The ``metrics.enabled=false`` stand-in and its config checks (pure logic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from metaq.broker.config import BrokerConfig
from metaq.broker.server import Broker
from metaq.consumer.config import ConsumerConfig
from metaq.errors import ConfigError
from metaq.metrics.broker import BrokerMetrics
from metaq.metrics.consumer import ConsumerMetrics
from metaq.metrics.off import NoMetrics, disabled


@pytest.mark.parametrize("kind", [ConsumerMetrics, BrokerMetrics])
def test_stand_in_has_every_public_method_and_does_nothing(kind: type) -> None:
    stand_in = disabled(kind)
    methods = [name for name in vars(kind) if not name.startswith("_") and callable(getattr(kind, name))]
    assert methods
    for name in methods:
        assert getattr(stand_in, name)(*range(getattr(kind, name).__code__.co_argcount - 1)) is None
    with pytest.raises(AttributeError, match="no method 'fetchd'"):
        stand_in.fetchd  # noqa: B018 - a misspelt method must not pass silently


def test_real_metrics_register_families_the_stand_in_none() -> None:
    registry = CollectorRegistry()
    disabled(ConsumerMetrics).fetched("t", 1, 100)
    assert list(registry.collect()) == []
    ConsumerMetrics("g", "c", registry).fetched("t", 1, 100)
    assert list(registry.collect()) != []


@pytest.mark.parametrize("config, extra", [(ConsumerConfig, {"group.id": "g"}), (BrokerConfig, {})])
def test_metrics_enabled_defaults_on_and_refuses_a_port_when_off(config: type, extra: dict[str, str]) -> None:
    base = {"zookeeper.connect": "127.0.0.1:2181", **extra}
    assert config.from_properties(base).metrics_enabled is True
    assert config.from_properties({**base, "metrics.enabled": "false"}).metrics_enabled is False
    with pytest.raises(ConfigError, match="'metrics.port': 9404 is set but 'metrics.enabled' is false"):
        config.from_properties({**base, "metrics.enabled": "false", "metrics.port": "9404"})


def test_broker_with_metrics_off_holds_the_stand_in(tmp_path: Path) -> None:
    before = set(REGISTRY._names_to_collectors)
    config = BrokerConfig.from_properties({"zookeeper.connect": "127.0.0.1:2181", "log.dirs": str(tmp_path),
                                           "metrics.enabled": "false"})
    broker = Broker(config)
    assert isinstance(broker.metrics, NoMetrics)
    assert set(REGISTRY._names_to_collectors) == before
