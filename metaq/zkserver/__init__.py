"""A real Apache ZooKeeper server (standalone or ensemble) as child JVMs: for tests, demos and the CLI.

See :mod:`metaq.zkserver.child` for the guarantees (the JVM never outlives us) and
:mod:`metaq.zkserver.distribution` for where the server jars are looked for.
"""

from __future__ import annotations

from metaq.zkserver.distribution import ZooKeeperDistribution, find_distribution, find_java
from metaq.zkserver.ensemble import ZooKeeperEnsemble
from metaq.zkserver.probe import four_letter_word, free_ports, server_mode
from metaq.zkserver.server import ZooKeeperServer
from metaq.zkserver.tls import ZooKeeperTls

__all__ = [
    "ZooKeeperDistribution",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "ZooKeeperTls",
    "find_distribution",
    "find_java",
    "four_letter_word",
    "free_ports",
    "server_mode",
]
