"""Find an Apache ZooKeeper server (its jars) and a ``java`` to run it with.

Three places are searched, in this order, and the first that has a ZooKeeper server wins:

1. ``$ZOOKEEPER_HOME``: an unpacked Apache binary release (``lib/*.jar`` and ``zookeeper*.jar`` at the top);
2. Debian's ``zookeeper`` package: ``/usr/share/java/zookeeper.jar`` (its manifest pulls in the dependencies),
   plus ``slf4j-simple.jar`` so that the server logs something, plus the netty jars that are installed;
3. the jars bundled with pyspark (``<pyspark>/jars``), which include ZooKeeper 3.9 and log4j2.

Usage::

    dist = find_distribution()
    dist.classpath, dist.version, dist.source   # ['.../pyspark/jars/*'], '3.9.5', 'pyspark'
    dist.java                                   # '/usr/bin/java'

Nothing found raises one :class:`ZooKeeperServerError` that lists every place looked at, so that the operator
can fix whichever is easiest.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from metaq.errors import ZooKeeperServerError

log = logging.getLogger(__name__)

DEBIAN_JAVA_DIR = Path("/usr/share/java")
"""Where Debian installs jars; a module attribute so that tests can point it elsewhere."""

# Netty is only needed for the Netty connection factory or TLS; harmless to add when present.
_DEBIAN_NETTY_JARS = (
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-resolver.jar",
    "netty-transport.jar",
    "netty-transport-native-unix-common.jar",
    "netty-transport-native-epoll.jar",
)
_VERSION_IN_NAME = re.compile(r"^zookeeper-(\d+\.\d+\.\d+[\w.-]*?)\.jar$")


@dataclass(frozen=True)
class ZooKeeperDistribution:
    """A runnable ZooKeeper server: the classpath entries, its version (``"unknown"`` when the jar names do
    not say), where it was found (``"ZOOKEEPER_HOME"``, ``"debian"`` or ``"pyspark"``) and the java binary."""

    classpath: list[str]
    version: str
    source: str
    java: str = "java"

    @property
    def classpath_string(self) -> str:
        return os.pathsep.join(self.classpath)


def find_java(environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """Return (path of java or None, a description of where we looked)."""
    env = os.environ if environ is None else environ
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate), f"{candidate}"
    found = shutil.which("java", path=env.get("PATH"))
    where = f"$JAVA_HOME/bin/java ({java_home or 'JAVA_HOME not set'}) and `java` on PATH"
    return found, where


def pyspark_jars_dir() -> Path | None:
    """The ``jars`` directory of an installed pyspark, found without importing pyspark (which is slow).

    Under spark-submit pyspark is imported from ``pyspark.zip``, which holds no jars; Spark's own
    ``$SPARK_HOME/jars`` has the same ZooKeeper jars then."""
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        jars = Path(location) / "jars"
        if jars.is_dir():
            return jars
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and (Path(spark_home) / "jars").is_dir():
        return Path(spark_home) / "jars"
    return None


def _version_from_jars(jars: list[Path]) -> str:
    for jar in jars:
        match = _VERSION_IN_NAME.match(jar.name)
        if match:
            return match.group(1)
    return "unknown"


def _from_zookeeper_home(environ: Mapping[str, str]) -> tuple[list[str] | None, str, str]:
    """(classpath or None, version, what was looked at)."""
    home = environ.get("ZOOKEEPER_HOME")
    if not home:
        return None, "", "$ZOOKEEPER_HOME (not set)"
    root = Path(home)
    top = sorted(root.glob("zookeeper*.jar"))
    lib = sorted((root / "lib").glob("*.jar"))
    server_jars = [j for j in top + lib if j.name.startswith("zookeeper") and "jute" not in j.name]
    if not server_jars:
        return None, "", f"$ZOOKEEPER_HOME={home} (no zookeeper*.jar in it or in lib/)"
    classpath = [str(j) for j in top + lib]
    conf = root / "conf"
    if conf.is_dir():
        classpath.insert(0, str(conf))
    return classpath, _version_from_jars(server_jars), f"$ZOOKEEPER_HOME={home}"


def _from_debian(java_dir: Path) -> tuple[list[str] | None, str, str]:
    server = java_dir / "zookeeper.jar"
    if not server.is_file():
        return None, "", f"{server} (Debian package `zookeeper` not installed)"
    classpath = [str(server)]
    for extra in ("slf4j-simple.jar", *_DEBIAN_NETTY_JARS):
        if (java_dir / extra).is_file():
            classpath.append(str(java_dir / extra))
    version = _version_from_jars([server.resolve()])
    return classpath, version, str(server)


def _from_pyspark(jars: Path | None) -> tuple[list[str] | None, str, str]:
    if jars is None:
        return None, "", "pyspark's jars (pyspark is not installed)"
    server_jars = sorted(j for j in jars.glob("zookeeper-*.jar") if "jute" not in j.name)
    if not server_jars:
        return None, "", f"{jars}/zookeeper-*.jar (none there)"
    return [f"{jars}{os.sep}*"], _version_from_jars(server_jars), str(jars)


def find_distribution(environ: Mapping[str, str] | None = None) -> ZooKeeperDistribution:
    """Find java and a ZooKeeper server; see the module docstring for the search order.

    ``environ`` defaults to ``os.environ`` (``ZOOKEEPER_HOME``, ``JAVA_HOME``, ``PATH`` are read from it).
    """
    env = os.environ if environ is None else environ
    java, java_where = find_java(env)
    looked: list[str] = []
    candidates: tuple[tuple[str, Callable[[], tuple[list[str] | None, str, str]]], ...] = (
        ("ZOOKEEPER_HOME", lambda: _from_zookeeper_home(env)),
        ("debian", lambda: _from_debian(DEBIAN_JAVA_DIR)),
        ("pyspark", lambda: _from_pyspark(pyspark_jars_dir())),
    )
    for source, probe in candidates:
        classpath, version, where = probe()
        looked.append(where)
        if classpath is not None:
            if java is None:
                raise ZooKeeperServerError(
                    f"found a ZooKeeper server in {where} but no java: looked at {java_where}; "
                    "install a JDK (17 or newer) or set JAVA_HOME"
                )
            log.debug("ZooKeeper %s from %s, java %s", version, where, java)
            return ZooKeeperDistribution(classpath=classpath, version=version, source=source, java=java)
    java_note = f"; java: {java}" if java else f"; java: not found either (looked at {java_where})"
    raise ZooKeeperServerError(
        "no ZooKeeper server found; looked at: "
        + "; ".join(looked)
        + java_note
        + ". Set ZOOKEEPER_HOME to an Apache ZooKeeper release, `apt-get install zookeeper`, "
        "or `pip install pyspark`"
    )
