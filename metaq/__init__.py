"""metaq: ZooKeeper-coordinated message consumption (Kafka 0.8 / MetaQ style) with its own Kafka-wire broker."""

from __future__ import annotations

from typing import Any

from metaq.errors import MetaqError

__version__ = "0.1.0"
__all__ = ["MetaqError", "Producer", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing a leaf module (metaq.errors from zk_layout) pulls in nothing heavy.
    if name == "Producer":
        from metaq.producer import Producer

        return Producer
    raise AttributeError(name)
