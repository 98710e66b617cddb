"""The embedded ZooKeeper launcher: real JVMs, started and killed for real."""

from __future__ import annotations

import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from metaq.errors import ZooKeeperServerError
from metaq.testing.wait import wait_until
from metaq.zkclient import connect
from metaq.zkserver import ZooKeeperEnsemble, ZooKeeperServer, server_mode
from metaq.zkserver.probe import free_ports

FAST = {"tick_time_ms": 200, "force_sync": False}


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (an exited child of someone else not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.fixture
def client_factory() -> Iterator[Callable[..., KazooClient]]:
    clients: list[KazooClient] = []

    def make(connect_string: str, session_timeout_ms: int = 4000) -> KazooClient:
        client = connect(connect_string, session_timeout_ms=session_timeout_ms, connection_timeout_ms=10000)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


def test_start_stop_leaves_no_process_and_no_files() -> None:
    server = ZooKeeperServer(**FAST).start()
    pid, data_dir = server.pid, server.data_dir
    assert pid is not None and alive(pid)
    assert server.mode() == "standalone"
    assert server.connect_string == f"127.0.0.1:{server.port}"
    assert (data_dir / "version-2").is_dir()
    server.stop()
    assert not alive(pid)
    assert not server.running and server.pid is None
    assert not data_dir.exists()
    server.stop()  # idempotent


def test_kill_and_restart_keep_data_and_sessions(tmp_path: Path, client_factory: Callable[..., KazooClient]) -> None:
    # the session must outlive the server's restart, a JVM start that takes several seconds on a loaded machine:
    # 30 s, which needs a 2 s tick (the server caps sessions at 20 ticks)
    with ZooKeeperServer(data_dir=tmp_path / "zk", log_path=tmp_path / "zk.log", tick_time_ms=2000,
                         force_sync=False) as server:
        client = client_factory(server.connect_string, 30000)
        client.create("/persistent", b"kept")
        client.create("/ephemeral", b"", ephemeral=True)
        session_id = client.client_id[0]
        old_pid = server.pid

        server.kill()
        assert old_pid is not None and not alive(old_pid)
        assert not server.running
        server.start()
        assert server.pid != old_pid

        retry = KazooRetry(max_tries=-1, deadline=30, delay=0.05, max_delay=0.2)
        assert retry(client.get, "/persistent")[0] == b"kept"
        assert client.client_id[0] == session_id  # the same session, resumed
        assert client.exists("/ephemeral") is not None

        server.restart()  # graceful this time
        assert retry(client.get, "/persistent")[0] == b"kept"
        assert client.client_id[0] == session_id
    assert (tmp_path / "zk" / "version-2").is_dir()  # a data dir we gave is never removed
    assert "binding to port" in (tmp_path / "zk.log").read_text()


def test_pause_and_resume() -> None:
    with ZooKeeperServer(**FAST) as server:
        server.pause()
        assert server.paused and server.running
        assert server_mode(server.host, server.port, timeout=0.3) is None
        server.resume()
        wait_until(lambda: server.mode() == "standalone", 5, "the resumed server to answer")
        server.pause()  # stop() must also work on a paused JVM
        pid = server.pid
    assert pid is not None and not alive(pid)


def test_a_taken_port_is_one_clear_error_with_the_log_tail_as_its_cause() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ZooKeeperServer(port=port, **FAST)
        with pytest.raises(ZooKeeperServerError, match=f"^port {port} on 127.0.0.1 is already in use") as e:
            server.start(timeout=30)
        assert "\n" not in str(e.value)
        assert e.value.__cause__ is not None
        assert "Address already in use" in str(e.value.__cause__)  # the start-up failure, with the log tail
        assert not server.running
        server.stop()


def test_child_dies_with_its_parent(tmp_path: Path) -> None:
    """Even a SIGKILLed parent (no atexit, no finally) takes its JVM with it."""
    script = textwrap.dedent(
        """
        import sys, time
        from metaq.zkserver import ZooKeeperServer
        server = ZooKeeperServer(tick_time_ms=200, force_sync=False).start()
        print(server.pid, server.data_dir.parent, flush=True)
        time.sleep(120)
        """
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            pid_text, work_dir = parent.stdout.readline().split()
            java_pid = int(pid_text)
            assert alive(java_pid)
        finally:
            parent.kill()
    wait_until(lambda: not alive(java_pid), 10, f"JVM {java_pid} to die with its parent")
    shutil.rmtree(work_dir)  # nobody else can: its owner was SIGKILLed


def test_cli_prints_connect_string_and_stops_on_sigint() -> None:
    driver = textwrap.dedent(
        """
        import argparse, sys
        from metaq.cli import zookeeper
        parser = argparse.ArgumentParser(prog="metaq")
        zookeeper.register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(sys.argv[1:])
        sys.exit(args.func(args))
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", driver, "zookeeper", "start", "--tick-time", "200"],
        stdout=subprocess.PIPE,
        text=True,
    ) as cli:
        try:
            assert cli.stdout is not None
            connect_string = cli.stdout.readline().strip()
            host, _, port = connect_string.partition(":")
            assert host == "127.0.0.1"
            assert server_mode(host, int(port)) == "standalone"
            cli.send_signal(signal.SIGINT)
            assert cli.wait(20) == 0
        finally:
            if cli.poll() is None:
                cli.kill()
    assert server_mode(host, int(port), timeout=0.5) is None


def test_cli_port_in_use_is_one_line_and_exit_code_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "metaq", "zookeeper", "start", "--port", str(port)],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stdout == ""  # no connect string for a server that is not up
    assert result.stderr.strip().splitlines() == [
        f"metaq zookeeper: error: port {port} on 127.0.0.1 is already in use; choose another port or stop what "
        "listens there"]


def test_cli_with_a_port_keeps_its_data_across_restarts(tmp_path: Path) -> None:
    """Without --data-dir a server on a fixed port keeps its data (topics, offsets) in $XDG_DATA_HOME."""
    port = free_ports(1)[0]
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    for run in range(2):
        with subprocess.Popen([sys.executable, "-m", "metaq", "zookeeper", "start", "--port", str(port),
                               "--tick-time", "200"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) as cli:
            try:
                assert cli.stdout is not None and cli.stdout.readline().strip() == f"127.0.0.1:{port}"
                assert cli.stderr is not None and cli.stderr.readline().strip() == (  # the line for people
                    f"metaq zookeeper serving 127.0.0.1:{port} (client port {port}; data in "
                    f"{tmp_path / 'xdg' / 'metaq' / f'zookeeper-{port}'})")
                client = KazooClient(hosts=f"127.0.0.1:{port}")
                client.start(20)
                try:
                    if run == 0:
                        client.create("/kept", b"offsets")
                    else:
                        assert client.get("/kept")[0] == b"offsets"
                finally:
                    client.stop()
                    client.close()
                cli.send_signal(signal.SIGTERM)
                assert cli.wait(20) == 0
            finally:
                if cli.poll() is None:
                    cli.kill()
    assert (tmp_path / "xdg" / "metaq" / f"zookeeper-{port}" / "version-2").is_dir()


# -- finding a distribution ---------------------------------------------------------------------------------


# -- ensemble -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ensemble_survives_losing_its_leader(client_factory: Callable[[str], KazooClient]) -> None:
    with ZooKeeperEnsemble(size=3, tick_time_ms=200) as ensemble:
        assert sorted(m or "" for m in ensemble.modes()) == ["follower", "follower", "leader"]
        client = client_factory(ensemble.connect_string)
        client.create("/before", b"1")

        leader = ensemble.leader_index()
        assert leader is not None
        leader_pid = ensemble.nodes[leader].pid
        ensemble.kill_node(leader)
        assert leader_pid is not None and not alive(leader_pid)

        retry = KazooRetry(max_tries=-1, deadline=20, delay=0.05, max_delay=0.5)
        retry(client.create, "/after", b"2")
        assert client.get("/before")[0] == b"1"

        ensemble.start_node(leader)  # rejoins (as a follower, normally)
        assert ensemble.nodes[leader].mode() in ("follower", "leader")
        pids = [node.pid for node in ensemble.nodes]
    assert all(pid is not None and not alive(pid) for pid in pids)
    assert not ensemble.base_dir.exists()


def test_cli_on_a_terminal_prints_one_line_with_port_and_data_dir(tmp_path: Path) -> None:
    """On a terminal (as a person runs it) one line says what serves where, as the broker's serving line."""
    port = free_ports(1)[0]
    main, terminal = pty.openpty()
    with subprocess.Popen([sys.executable, "-m", "metaq", "zookeeper", "start", "--port", str(port),
                           "--data-dir", str(tmp_path / "zk"), "--tick-time", "200"],
                          stdout=terminal, stderr=subprocess.PIPE, text=True) as cli:
        os.close(terminal)
        try:
            seen = b""
            while b"\n" not in seen:
                chunk = os.read(main, 1024)
                assert chunk, f"the server exited: {cli.stderr.read() if cli.stderr else ''}"
                seen += chunk
            assert seen.decode().strip() == (f"metaq zookeeper serving 127.0.0.1:{port} (client port {port}; "
                                             f"data in {tmp_path / 'zk'})")
            cli.send_signal(signal.SIGTERM)
            assert cli.wait(20) == 0
        finally:
            os.close(main)
            if cli.poll() is None:
                cli.kill()
