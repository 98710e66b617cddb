"""Test peers from Maven Central: a set of artifacts and their dependencies resolved into a cache of jars.

Real Apache Kafka brokers, Kafka's Java clients and command-line tools and Spark's Kafka source are the reference
metaq is tested against (docs/compatibility.md). They are fetched by the test command, never committed: each named
set of artifacts (a *peer*) is resolved once with Maven (``mvn dependency:copy-dependencies`` over a generated pom)
into ``$METAQ_PEER_CACHE/<peer name>/`` (default ``~/.cache/metaq/peers``), outside the repository, and is then
run as ``java -cp "<dir>/*" CLASS``.

A directory is complete only once its ``.resolved`` marker exists: a resolution is done in a temporary directory
and renamed into place, under a file lock, so parallel test workers and an interrupted run never see half a set.
A peer that cannot be resolved raises :class:`PeerUnavailableError` carrying Maven's own output, so a test reports
why (the standards forbid a silent skip).

    python -m metaq.testing.maven org.apache.kafka:kafka-clients:3.9.1   # prints the directory
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from metaq.errors import MetaqError

RESOLVED_MARKER = ".resolved"
MVN_TIMEOUT_S = 900.0


class PeerUnavailableError(MetaqError):
    """A test peer could not be resolved or started here; the message carries the tool's own error."""


@dataclass(frozen=True)
class MavenArtifact:
    """One Maven coordinate, with the transitive dependencies to leave out (``group:artifact`` each)."""

    group: str
    artifact: str
    version: str
    classifier: str | None = None
    exclusions: tuple[str, ...] = field(default=())

    @classmethod
    def parse(cls, coordinate: str) -> MavenArtifact:
        """``group:artifact:version`` or ``group:artifact:version:classifier``."""
        parts = coordinate.split(":")
        if len(parts) not in (3, 4) or not all(parts):
            raise ValueError(f"Maven coordinate {coordinate!r}: expected group:artifact:version[:classifier]")
        return cls(parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else None)

    def __str__(self) -> str:
        tail = f":{self.classifier}" if self.classifier else ""
        return f"{self.group}:{self.artifact}:{self.version}{tail}"

    def pom_dependency(self) -> str:
        classifier = f"<classifier>{escape(self.classifier)}</classifier>" if self.classifier else ""
        exclusions = "".join(
            f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
            for g, a in (exclusion.split(":", 1) for exclusion in self.exclusions))
        exclusions = f"<exclusions>{exclusions}</exclusions>" if exclusions else ""
        return (f"<dependency><groupId>{escape(self.group)}</groupId><artifactId>{escape(self.artifact)}"
                f"</artifactId><version>{escape(self.version)}</version>{classifier}{exclusions}</dependency>")


def cache_root() -> Path:
    """Where resolved peers live: ``$METAQ_PEER_CACHE``, else ``~/.cache/metaq/peers`` (outside the repository)."""
    configured = os.environ.get("METAQ_PEER_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "metaq" / "peers"


def classpath(directory: Path) -> str:
    """The ``-cp`` argument for every jar of a resolved peer."""
    return str(directory / "*")


def resolve(name: str, artifacts: Sequence[MavenArtifact], root: Path | None = None) -> Path:
    """The directory holding ``artifacts`` and their dependencies as jars, resolving them on first use.

    ``name`` keys the cache (e.g. ``kafka-3.9.1``): the same name must always mean the same artifacts.
    """
    if not artifacts:
        raise ValueError(f"peer {name!r}: no artifacts to resolve")
    root = root or cache_root()
    target = root / name
    if (target / RESOLVED_MARKER).exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{name}.lock"):
        if (target / RESOLVED_MARKER).exists():
            return target
        _resolve_into(name, artifacts, root, target)
    return target


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _resolve_into(name: str, artifacts: Sequence[MavenArtifact], root: Path, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PeerUnavailableError(f"peer {name}: mvn not found (make test installs Debian's maven package)")
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=root) as work:
        work_dir = Path(work)
        (work_dir / "pom.xml").write_text(_pom(name, artifacts))
        jars = work_dir / "jars"
        command = [mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={jars}",
                   "-DincludeScope=runtime"]
        try:
            done = subprocess.run(command, cwd=work_dir, capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise PeerUnavailableError(f"peer {name}: mvn did not finish within {MVN_TIMEOUT_S:.0f} s") from e
        if done.returncode != 0 or not jars.is_dir():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
            raise PeerUnavailableError(f"peer {name}: resolving {', '.join(map(str, artifacts))} failed:\n{tail}")
        (jars / RESOLVED_MARKER).write_text("\n".join(map(str, artifacts)) + "\n")
        if target.exists():
            shutil.rmtree(target)
        jars.rename(target)


def _pom(name: str, artifacts: Sequence[MavenArtifact]) -> str:
    dependencies = "".join(artifact.pom_dependency() for artifact in artifacts)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>metaq.peers</groupId><artifactId>{escape(name)}</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>")


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m metaq.testing.maven GROUP:ARTIFACT:VERSION[:CLASSIFIER] ...", file=sys.stderr)
        return 2
    artifacts = [MavenArtifact.parse(coordinate) for coordinate in argv]
    name = "adhoc-" + "-".join(f"{a.artifact}-{a.version}" for a in artifacts)
    try:
        print(resolve(name, artifacts))
    except PeerUnavailableError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
