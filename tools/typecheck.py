"""The type check of ``make test``: mypy in strict mode over the whole tree, with a ratchet.

Modules listed in ``tools/mypy-ratchet.txt`` are not strict yet: their errors are reported as a count but do
not fail the check. The list may only shrink: a listed module that has become clean fails the check until it
is removed from the list, and a module not listed must be clean. The packages that every other part builds on
(zk_layout, metaq.protocol, metaq.errors, metaq.config, metaq.client) may never be listed.

    .venv/bin/python tools/typecheck.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATCHET = ROOT / "tools" / "mypy-ratchet.txt"
PACKAGES = ["metaq", "zk_layout", "pyspark_metaq"]
ALWAYS_STRICT = ("zk_layout", "metaq/protocol", "metaq/errors.py", "metaq/config.py", "metaq/client")
ERROR_LINE = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: ")


def ratchet() -> list[str]:
    lines = RATCHET.read_text().splitlines() if RATCHET.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def main() -> int:
    result = subprocess.run([sys.executable, "-m", "mypy", *PACKAGES], cwd=ROOT, capture_output=True, text=True)
    errors: Counter[str] = Counter()
    lines_by_path: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        match = ERROR_LINE.match(line)
        if match:
            errors[match["path"]] += 1
            lines_by_path.setdefault(match["path"], []).append(line)
    if result.returncode not in (0, 1) or (result.returncode == 1 and not errors):
        print(result.stdout + result.stderr, file=sys.stderr)
        return 2
    listed = ratchet()
    problems = [f"{path}: may never be in {RATCHET.name}" for path in listed if path.startswith(ALWAYS_STRICT)]
    problems += [f"{path}: listed in {RATCHET.name} but strict now: remove it from the list"
                 for path in listed if not errors[path]]
    for path, count in sorted(errors.items()):
        if path not in listed:
            problems.append(f"{path}: {count} strict-mode error(s); fix them (new code is strict)")
            problems += ["    " + line for line in lines_by_path[path]]
    tolerated = sum(errors[path] for path in listed)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"mypy --strict: clean except {len(listed)} ratchet module(s) with {tolerated} error(s) ({RATCHET.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
