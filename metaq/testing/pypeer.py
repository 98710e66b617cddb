"""Python test peers whose pins conflict with metaq's own: each installed into a virtualenv of its own in the
peer cache (:func:`metaq.testing.maven.cache_root`), outside the repository, and run as a child process.

    python = virtualenv("pykafka-2.8.0", ["pykafka==2.8.0"])   # created once, then reused
    subprocess.run([str(python), "-c", script], check=True)

pykafka 2.8 pins ``kazoo==2.5.0`` while metaq needs ``kazoo>=2.10``, and Quix Streams pins ``confluent-kafka<2.13``
below metaq's, so pip refuses to install either into metaq's environment (ResolutionImpossible).
``python -m metaq.testing.pypeer fetch`` (run by ``make test`` before any test) creates every one in :data:`PEERS`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from metaq.testing.maven import cache_root

__all__ = ["PEERS", "peer_python", "virtualenv"]

_DONE = ".installed"
_PIP_TIMEOUT_S = 600

# virtualenv name -> its requirements: the Python peers the integration tests run
PEERS: dict[str, tuple[str, ...]] = {
    "pykafka-2.8.0": ("pykafka==2.8.0",),
    "quixstreams-3.28.1": ("quixstreams==3.28.1",),
}


def virtualenv(name: str, requirements: Sequence[str], root: Path | None = None) -> Path:
    """The Python of a virtualenv ``name`` holding ``requirements`` (pip's own resolution), created with
    this interpreter's version on first use. ``name`` keys the cache: the same name must always mean the
    same requirements. Raises CalledProcessError carrying pip's output if the install fails."""
    home = (root or cache_root()) / f"venv-{name}"
    python = home / "bin" / "python"
    if (home / _DONE).exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True, capture_output=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
                   check=True, capture_output=True, timeout=_PIP_TIMEOUT_S)
    (home / _DONE).write_text("\n".join(requirements) + "\n")
    return python


def peer_python(name: str) -> Path:
    """The Python of the catalogued peer ``name`` (:data:`PEERS`)."""
    return virtualenv(name, PEERS[name])


def main(argv: Sequence[str]) -> int:
    """``fetch``: create every peer's virtualenv, printing where each is; exit 1 with pip's own error if one
    cannot be."""
    if list(argv) != ["fetch"]:
        print("usage: python -m metaq.testing.pypeer fetch", file=sys.stderr)
        return 2
    failed = []
    for name in PEERS:
        try:
            print(f"{name}: {peer_python(name)}", flush=True)
        except subprocess.CalledProcessError as e:
            print(f"{name}: pip failed: {bytes(e.stderr or b'').decode(errors='replace')[-2000:]}", file=sys.stderr)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
