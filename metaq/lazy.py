"""Package attributes imported on first use (PEP 562), so that importing a package for one light name does not
import every module it re-exports: ``metaq --help`` and ZooKeeper-only commands must not pay for the Kafka
clients (tests/test_cli_startup.py).

    __getattr__ = lazy_exports(__name__, globals(), {"Admin": "client", "format_ms": "timefmt"})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, namespace: MutableMapping[str, Any],
                 homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving each name of ``homes`` (name -> submodule) and caching it in the
    package's ``namespace``; other names raise AttributeError as usual."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    return __getattr__
