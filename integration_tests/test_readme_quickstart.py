"""The README's marked shell blocks run as written, so that the documentation cannot drift from the code.

A block preceded by ``<!-- readme-test: NAME PART -->`` belongs to the walk-through NAME: its ``setup`` and
``commands`` parts run line by line (each must exit 0), its ``servers`` part starts each line in the background
and waits for the process's serving line. They run in a fresh directory that holds only links to the
repository's ``.venv`` and a copy of ``examples/``, with the well-known ports (ZooKeeper 2181, the SASL_SSL
listener 9093) replaced by free ones in the commands and the example files: other tests share this machine.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from integration_tests.peers import KCAT
from metaq.broker.process import free_port
from metaq.testing.wait import wait_until

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) (?P<part>setup|servers|commands) -->\n```sh\n(?P<body>.*?)```",
                    re.S)
WELL_KNOWN_PORTS = ("2181", "9093")


def readme_blocks(name: str) -> dict[str, list[str]]:
    """PART -> the command lines of the README's blocks marked for walk-through ``name``."""
    parts: dict[str, list[str]] = {}
    for match in MARKER.finditer((ROOT / "README.md").read_text(encoding="utf-8")):
        if match["name"] == name:
            lines = [line for line in match["body"].splitlines() if line.strip() and not line.startswith("#")]
            parts.setdefault(match["part"], []).extend(lines)
    return parts


def _with_ports(text: str, ports: dict[str, int]) -> str:
    for well_known, port in ports.items():
        text = re.sub(rf"\b{well_known}\b", str(port), text)
    return text


@pytest.fixture
def fresh_dir(tmp_path: Path) -> Iterator[tuple[Path, dict[str, int]]]:
    ports = {p: free_port() for p in WELL_KNOWN_PORTS}
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for example in (tmp_path / "examples").glob("*.properties"):
        example.write_text(_with_ports(example.read_text(), ports))
    yield tmp_path, ports


def _run(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"README command failed ({done.returncode}): {command}\n{done.stdout}{done.stderr}"
    return done.stdout


def _serving_or_exited(proc: subprocess.Popen[bytes], output: Path) -> bool:
    return proc.poll() is not None or b" serving " in output.read_bytes()


def test_tls_quickstart_runs_as_written(fresh_dir: tuple[Path, dict[str, int]]) -> None:
    cwd, ports = fresh_dir
    blocks = readme_blocks("tls-quickstart")
    assert set(blocks) == {"setup", "servers", "commands"} and len(blocks["servers"]) == 2, blocks
    env = {**os.environ, "XDG_DATA_HOME": str(cwd / "xdg"),
           "PATH": f"{Path(KCAT).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in blocks["setup"]:
        _run(_with_ports(command, ports), cwd, env)
    servers: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for i, command in enumerate(blocks["servers"]):
            output = cwd / f"server-{i}.out"
            with output.open("wb") as out:
                servers.append((subprocess.Popen(["bash", "-c", f"exec {_with_ports(command, ports)}"], cwd=cwd,
                                                 env=env, stdout=out, stderr=subprocess.STDOUT), output))
            proc = servers[-1][0]
            wait_until(partial(_serving_or_exited, proc, output), 90, f"the serving line of: {command}")
            assert proc.poll() is None, f"{command} exited: {output.read_text()}"
        *preparation, consume = [_with_ports(c, ports) for c in blocks["commands"]]
        for command in preparation:
            _run(command, cwd, env)
        assert sorted(_run(consume, cwd, env).split()) == ["one", "three", "two"]
    finally:
        # the broker first, and wholly: its orderly stop still talks to ZooKeeper
        for proc, output in reversed(servers):
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(30) == 0, output.read_text()
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
