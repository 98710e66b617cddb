"""How long ``metaq <command> --help`` takes: wall time and CPU time (user + system) of the process.

    python -m bench.cli_startup [--runs 10]

Scripts call ``metaq`` often; the target is at most 0.3 s for ``--help`` and simple commands on an idle machine.
On a shared machine wall time mostly measures the wait for a CPU, so the CPU time is reported beside it (the
process is single-threaded until it connects anywhere: on an idle machine its wall time is about its CPU
time), with ``python -c pass`` as the floor and the load average at the start. Best and median of ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from bench.tables import print_table

COMMANDS = (["--help"], ["topics", "--help"], ["groups", "--help"], ["offsets", "reset", "--help"],
            ["console-consumer", "--help"], ["topics", "create", "--help"])


def measure(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one child process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for label, argv in [("python -c pass", [sys.executable, "-c", "pass"])] + [
            (f"metaq {' '.join(c)}", [sys.executable, "-m", "metaq", *c]) for c in COMMANDS]:
        runs = [measure(argv) for _ in range(args.runs)]
        walls, cpus = sorted(w for w, _ in runs), sorted(c for _, c in runs)
        rows.append([label, f"{walls[0]:.3f}", f"{statistics.median(walls):.3f}", f"{cpus[0]:.3f}",
                     f"{statistics.median(cpus):.3f}"])
    print_table(["command", "wall best s", "wall median s", "cpu best s", "cpu median s"], rows)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
