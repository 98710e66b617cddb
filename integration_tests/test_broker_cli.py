"""``metaq broker start`` with a bad listener or config file: one line on stderr naming the fault, exit 1
(metaq's convention: 1 for errors, 2 for command-line usage), never a traceback or a hang."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from metaq.broker.process import free_port


def _start(config: str | Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metaq", "broker", "start", "--config", str(config), *extra],
                          capture_output=True, text=True, timeout=60)


def _write(tmp_path: Path, zk_connect: str, listener: str, extra: str = "") -> Path:
    path = tmp_path / "server.properties"
    path.write_text(f"zookeeper.connect={zk_connect}\nlog.dirs={tmp_path / 'logs'}\nlisteners={listener}\n{extra}")
    return path


def _assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("metaq broker: error: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_port_in_use(zk_connect: str, tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = _start(_write(tmp_path, zk_connect, f"PLAINTEXT://127.0.0.1:{port}"))
    _assert_one_line_error(result, "listeners", f"127.0.0.1:{port}", "in use")


@pytest.mark.parametrize("host", ["no-such-host.invalid", "192.0.2.1"])  # unresolvable; TEST-NET, not ours
def test_listener_host_that_is_not_ours(zk_connect: str, tmp_path: Path, host: str) -> None:
    result = _start(_write(tmp_path, zk_connect, f"PLAINTEXT://{host}:{free_port()}"))
    _assert_one_line_error(result, "listeners", host)


def test_config_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"broker.id=0\nzookeeper.connect=h\xe9te:2181\n")
    _assert_one_line_error(_start(path), f"{path}:2", "UTF-8")


def test_config_dev_zero_does_not_hang() -> None:
    _assert_one_line_error(_start("/dev/zero"), "/dev/zero", "larger than")


def test_duplicate_key_names_the_key_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("broker.id=0\nzookeeper.connect=h:2181\n# again\nbroker.id=1\n")
    _assert_one_line_error(_start(path), f"{path}:4", "'broker.id'", "line 1")


def test_the_example_config_starts_prints_one_line_and_stops_cleanly(zk_connect: str, tmp_path: Path) -> None:
    """examples/server.properties works as shipped (only where it points is overridden), the broker says where
    it serves in one line on stdout (with the metrics URL when metrics.port is set, and the log level), and
    SIGTERM ends it with exit 0."""
    example = Path(__file__).resolve().parent.parent / "examples" / "server.properties"
    port, metrics_port = free_port(), free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "metaq", "broker", "start", "--config", str(example),
         "--override", f"zookeeper.connect={zk_connect}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={tmp_path / 'logs'}", "--override", f"metrics.port={metrics_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:  # closes the pipes
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line == (f"metaq broker 0 serving PLAINTEXT://127.0.0.1:{port} (ZooKeeper {zk_connect}; "
                            f"logs in {tmp_path / 'logs'}; metrics http://127.0.0.1:{metrics_port}/metrics; "
                            "log level WARNING)")
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
