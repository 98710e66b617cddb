"""Python test peers whose pins conflict with metaq's own: each installed into a virtualenv of its own in the
peer cache (:func:`metaq.testing.maven.cache_root`), outside the repository, and run as a child process.

    python = virtualenv("pykafka-2.8.0", ["pykafka==2.8.0"])   # created once, then reused
    subprocess.run([str(python), "-c", script], check=True)

pykafka 2.8 is the case: it pins ``kazoo==2.5.0`` while metaq needs ``kazoo>=2.10``, so pip refuses to
install both into one environment (ResolutionImpossible).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from metaq.testing.maven import cache_root

__all__ = ["virtualenv"]

_DONE = ".installed"
_PIP_TIMEOUT_S = 600


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
