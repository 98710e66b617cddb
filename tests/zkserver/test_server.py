"""Finding a ZooKeeper distribution (ZOOKEEPER_HOME, Debian's jars, pyspark's) with nothing started (the
launcher with real JVMs: integration_tests/test_zkserver.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metaq.errors import ZooKeeperServerError
from metaq.zkserver import ZooKeeperServer, distribution, find_distribution

# -- finding a distribution ---------------------------------------------------------------------------------


@pytest.fixture
def nothing_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No Debian jars, no pyspark, no ZOOKEEPER_HOME, no java."""
    monkeypatch.setattr(distribution, "DEBIAN_JAVA_DIR", tmp_path / "usr-share-java")
    monkeypatch.setattr(distribution, "pyspark_jars_dir", lambda: None)
    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return tmp_path


def test_nothing_found_is_one_error_naming_every_place(nothing_installed: Path) -> None:
    with pytest.raises(ZooKeeperServerError) as e:
        ZooKeeperServer().start()
    message = str(e.value)
    assert "ZOOKEEPER_HOME (not set)" in message
    assert str(nothing_installed / "usr-share-java" / "zookeeper.jar") in message
    assert "pyspark" in message
    assert "java: not found" in message


def test_java_missing_is_reported(nothing_installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = nothing_installed / "jars"
    jars.mkdir()
    (jars / "zookeeper-3.9.5.jar").touch()
    monkeypatch.setattr(distribution, "pyspark_jars_dir", lambda: jars)
    with pytest.raises(ZooKeeperServerError, match="no java"):
        find_distribution({"PATH": "", "ZOOKEEPER_HOME": str(nothing_installed / "nowhere")})
    java = nothing_installed / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.touch(mode=0o755)
    found = find_distribution({"JAVA_HOME": str(nothing_installed / "jdk")})
    assert (found.source, found.version, found.java) == ("pyspark", "3.9.5", str(java))
    assert found.classpath == [f"{jars}{os.sep}*"]


def test_zookeeper_home_comes_first(nothing_installed: Path) -> None:
    home = nothing_installed / "apache-zookeeper-3.8.4-bin"
    (home / "lib").mkdir(parents=True)
    (home / "conf").mkdir()
    for name in ("lib/zookeeper-3.8.4.jar", "lib/zookeeper-jute-3.8.4.jar", "lib/logback-classic-1.2.13.jar"):
        (home / name).touch()
    java = nothing_installed / "bin" / "java"
    java.parent.mkdir()
    java.touch(mode=0o755)
    found = find_distribution({"ZOOKEEPER_HOME": str(home), "PATH": str(java.parent)})
    assert (found.source, found.version) == ("ZOOKEEPER_HOME", "3.8.4")
    assert found.classpath[0] == str(home / "conf")
    assert str(home / "lib" / "logback-classic-1.2.13.jar") in found.classpath


def test_debian_layout(nothing_installed: Path) -> None:
    java_dir = nothing_installed / "usr-share-java"
    java_dir.mkdir()
    (java_dir / "zookeeper-3.8.0.jar").touch()
    (java_dir / "zookeeper.jar").symlink_to("zookeeper-3.8.0.jar")
    (java_dir / "slf4j-simple.jar").touch()
    (java_dir / "netty-codec.jar").touch()
    java = nothing_installed / "bin" / "java"
    java.parent.mkdir()
    java.touch(mode=0o755)
    found = find_distribution({"PATH": str(java.parent)})
    assert (found.source, found.version) == ("debian", "3.8.0")
    assert found.classpath == [str(java_dir / n) for n in ("zookeeper.jar", "slf4j-simple.jar", "netty-codec.jar")]


# -- ensemble -----------------------------------------------------------------------------------------------
