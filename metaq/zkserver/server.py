"""Run a real Apache ZooKeeper server as a child JVM, for tests, demos and ``metaq zookeeper start``.

Usage::

    with ZooKeeperServer(tick_time_ms=200, force_sync=False) as zk:
        client = KazooClient(zk.connect_string)   # "127.0.0.1:40123"
        zk.kill()        # SIGKILL, for fault tests; the data directory stays
        zk.restart()     # same port and data: clients reconnect to their old sessions

The JVM must never outlive us, whatever way we die: on Linux the child asks the kernel to SIGKILL it when
its parent dies (``prctl(PR_SET_PDEATHSIG)``), it runs in its own session so that a terminal Ctrl-C reaches
only us (we then stop it cleanly), and an ``atexit`` hook stops every server still running.

The server listens on loopback only, without the AdminServer (an HTTP port we do not need), and answers the
four-letter words ``srvr, ruok, mntr, stat, conf``; readiness is "``srvr`` answers with a ``Mode:`` line".

Security, all optional (docs/zookeeper-layout.md, "Authentication, TLS and znode ACLs")::

    ZooKeeperServer(super_digest=digest_identity("super", pw),   # an admin who passes every ACL
                    enforce_auth=True,                            # sessions must authenticate (digest) first
                    tls=ZooKeeperTls(keystore=server_pem, truststore=ca_pem))   # also a TLS port
    server.secure_connect_string                                  # "127.0.0.1:<secureClientPort>"

TLS uses ZooKeeper's Netty connection factory with PEM files (ZooKeeper 3.6+; the Netty jars ship with
pyspark's jars and the Debian package); the plain port stays open for the four-letter words.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self

from metaq.childproc import die_with_parent
from metaq.errors import ZooKeeperServerError
from metaq.zkserver.child import _LIVE, _LIVE_LOCK, _Spawner, _tail
from metaq.zkserver.distribution import ZooKeeperDistribution, find_distribution
from metaq.zkserver.probe import free_ports, server_mode
from metaq.zkserver.tls import ZooKeeperTls

log = logging.getLogger(__name__)

FOUR_LETTER_WORDS = "srvr,ruok,mntr,stat,conf"

DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    # Start-up time dominates a test server's life: C1-only and the serial collector cut it by about a third
    # (measured 1.1 s instead of 1.3-1.9 s on 2 cores) and throughput stays far above what kazoo can drive.
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)

_LOG4J2_PROPERTIES = """\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %-5level [%t] %c{1}: %msg%n
"""

# Apache releases since 3.8 log through logback; without a config logback prints DEBUG, which is very noisy.
_LOGBACK_XML = """\
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level [%thread] %logger{0}: %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""

_BIND_FAILURE_MARKERS = ("Address already in use", "BindException")
_POLL_INTERVAL_S = 0.05


class ZooKeeperServer:
    """A standalone ZooKeeper server in a child JVM.

    Usage::

        server = ZooKeeperServer(tick_time_ms=200, force_sync=False).start()
        server.connect_string        # "127.0.0.1:PORT"
        server.stop()

    ``port=None`` picks a free port (kept across :meth:`restart`); ``data_dir=None`` uses a temporary
    directory removed by :meth:`stop` (but not by :meth:`kill`, so that a killed server can be restarted
    with its data).
    ``force_sync=False`` skips fsync of the transaction log: tests only. ``log_path`` keeps the server log
    (appended across restarts); by default it lives in the temporary work directory.

    All methods may be called from any thread; they serialise on one lock.
    """

    MAIN_CLASS: ClassVar[str] = "org.apache.zookeeper.server.ZooKeeperServerMain"
    _START_ATTEMPTS: ClassVar[int] = 3  # only when we chose the port ourselves and someone else took it

    def __init__(
        self,
        port: int | None = None,
        data_dir: Path | None = None,
        *,
        tick_time_ms: int = 2000,
        force_sync: bool = True,
        host: str = "127.0.0.1",
        heap_mb: int = 256,
        log_path: Path | None = None,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        distribution: ZooKeeperDistribution | None = None,
        super_digest: str | None = None,
        enforce_auth: bool = False,
        tls: ZooKeeperTls | None = None,
    ) -> None:
        if super_digest is not None and not super_digest.startswith("digest:"):
            raise ZooKeeperServerError("super_digest must be a digest identity, digest:user:<base64 sha1> "
                                       "(zk_layout.znode_acls.digest_identity), not a password")
        self.super_digest = super_digest
        self.enforce_auth = enforce_auth
        self.tls = tls
        self._lock = threading.RLock()
        self._host = host
        self._port_chosen = port is None
        chosen = free_ports(2, host)  # distinct: both held open together
        self._port = port if port is not None else chosen[0]
        self._secure_port = (chosen[1] if chosen[1] != port else chosen[0]) if tls is not None else None
        self._data_dir_arg = Path(data_dir).absolute() if data_dir is not None else None
        self._log_path_arg = Path(log_path).absolute() if log_path is not None else None
        self.tick_time_ms = tick_time_ms
        self.force_sync = force_sync
        self.heap_mb = heap_mb
        self.jvm_options = tuple(jvm_options)
        self._distribution = distribution
        self._work_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._paused = False

    # -- properties --------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def connect_string(self) -> str:
        return f"{self._host}:{self._port}"

    @property
    def secure_port(self) -> int | None:
        """The TLS client port (None without ``tls``)."""
        return self._secure_port

    @property
    def secure_connect_string(self) -> str:
        if self._secure_port is None:
            raise ZooKeeperServerError(f"ZooKeeper on {self.connect_string} has no TLS port (started without tls)")
        return f"{self._host}:{self._secure_port}"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the JVM process is alive (also when paused; not necessarily serving)."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def data_dir(self) -> Path:
        if self._data_dir_arg is not None:
            return self._data_dir_arg
        return self._ensure_work_dir() / "data"

    @property
    def log_path(self) -> Path:
        if self._log_path_arg is not None:
            return self._log_path_arg
        return self._ensure_work_dir() / "zookeeper.log"

    @property
    def distribution(self) -> ZooKeeperDistribution | None:
        return self._distribution

    def mode(self) -> str | None:
        """``standalone``/``leader``/``follower`` if the server is serving right now, else None."""
        return server_mode(self._host, self._port)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log (empty if there is none yet): for error messages and reports."""
        path = self._log_path_arg or (self._work_dir / "zookeeper.log" if self._work_dir else None)
        return _tail(path, lines) if path is not None else ""

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> Self:
        """Start the JVM and wait until it serves. No-op if already running."""
        with self._lock:
            if self.running:
                return self
            for attempt in range(1, self._START_ATTEMPTS + 1):
                self.spawn()
                try:
                    self.wait_ready(timeout)
                    return self
                except ZooKeeperServerError as e:
                    if not self._bind_failed():
                        raise
                    if not self._port_chosen:
                        raise ZooKeeperServerError(f"port {self._port} on {self.host} is already in use; choose "
                                                   "another port or stop what listens there") from e
                    if attempt >= self._START_ATTEMPTS:
                        raise
                    log.info("port %d was taken before ZooKeeper bound it; trying another", self._port)
                    self._choose_new_ports()
        raise AssertionError("unreachable")  # the loop returns or raises

    def spawn(self) -> None:
        """Start the JVM without waiting for it to serve (see :meth:`wait_ready`); used to start ensembles."""
        with self._lock:
            if self.running:
                return
            if self._distribution is None:
                self._distribution = find_distribution()
            self._write_files()
            self._close_log()
            self._log_file = self.log_path.open("ab")
            self._log_file.write(f"---- metaq: starting {self.MAIN_CLASS} on port {self._port}\n".encode())
            self._log_file.flush()
            args = self._command(self._distribution)
            log.debug("starting ZooKeeper: %s", " ".join(args))
            log_file = self._log_file
            try:
                self._proc = _Spawner.run(
                    lambda: subprocess.Popen(
                        args,
                        stdin=subprocess.DEVNULL,
                        stdout=log_file,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # a terminal Ctrl-C goes to us only; we stop the child
                        preexec_fn=die_with_parent(),
                        cwd=str(self._ensure_work_dir()),
                    )
                )
            except OSError as e:
                raise ZooKeeperServerError(f"cannot run {args[0]}: {e}") from e
            self._paused = False
            log.info(
                "ZooKeeper %s starting on %s (pid %d)",
                self._distribution.version,
                self.connect_string,
                self._proc.pid,
            )

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until ``srvr`` answers with a ``Mode:`` line; on timeout or early exit kill the JVM and raise
        :class:`ZooKeeperServerError` with the tail of the server log."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = proc.returncode if proc is not None else None
                self._forget_process()
                raise ZooKeeperServerError(
                    f"ZooKeeper on {self.connect_string} exited during start-up (exit code {code}); "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.mode() is not None:
                log.info("ZooKeeper serving on %s", self.connect_string)
                return
            if time.monotonic() >= deadline:
                self._signal_and_reap(signal.SIGKILL, 5)
                raise ZooKeeperServerError(
                    f"ZooKeeper on {self.connect_string} did not serve within {timeout:g} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def stop(self, timeout: float = 10) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and remove the temporary work directory
        (the temporary data directory with it)."""
        with self._lock:
            self._terminate(timeout)
            self._close_log()
            self._remove_work_dir()

    def kill(self) -> None:
        """SIGKILL the JVM, as a crash would. Data and work directory stay, so :meth:`start`/:meth:`restart`
        bring the same server back."""
        with self._lock:
            self._signal_and_reap(signal.SIGKILL, 5)

    def restart(self, timeout: float = 60) -> Self:
        """Stop (gracefully) and start again with the same port and data: sessions survive if the clients
        reconnect within their session timeout."""
        with self._lock:
            self._terminate(10)
            return self.start(timeout)

    def pause(self) -> None:
        """SIGSTOP the JVM: it keeps its sockets but answers nothing, like a long GC pause or a partition."""
        with self._lock:
            self._send(signal.SIGSTOP)
            self._paused = True
            self._wait_stopped()

    def _wait_stopped(self, timeout: float = 5.0) -> None:
        """SIGSTOP is delivered asynchronously: a loaded machine may let the JVM answer a request or two after
        kill() returned. Wait (bounded) until Linux reports the process stopped; elsewhere, return at once."""
        proc = self._proc
        stat = Path(f"/proc/{proc.pid}/stat") if proc is not None else None
        deadline = time.monotonic() + timeout
        while stat is not None and time.monotonic() < deadline:
            try:
                state = stat.read_text().rpartition(")")[2].split()[0]  # the field after "(comm)"
            except (OSError, IndexError):
                return
            if state in ("T", "t"):
                return
            time.sleep(0.01)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        with self._lock:
            self._send(signal.SIGCONT)
            self._paused = False

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self._paused else ("running" if self.running else "stopped")
        return f"<{type(self).__name__} {self.connect_string} {state} pid={self.pid}>"

    # -- hooks for ensemble members ----------------------------------------------------------------

    def _config_lines(self) -> list[str]:
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self._port}",
            f"clientPortAddress={self._host}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
        ]
        if not self.force_sync:
            lines.append("forceSync=no")
        if self.super_digest is not None:  # a system property "zookeeper.<key>", kept off the command line
            lines.append(f"DigestAuthenticationProvider.superDigest={self.super_digest[len('digest:'):]}")
        if self.enforce_auth:
            lines += ["enforce.auth.enabled=true", "enforce.auth.schemes=digest"]
        if self.tls is not None and self._secure_port is not None:
            lines += self.tls.config_lines(self._secure_port)
        return lines

    def _prepare_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def _choose_new_ports(self) -> None:
        self._port, secure = free_ports(2, self._host)
        if self._secure_port is not None:
            self._secure_port = secure

    # -- internals ---------------------------------------------------------------------------------

    def _ensure_work_dir(self) -> Path:
        if self._work_dir is None or not self._work_dir.is_dir():
            self._work_dir = Path(tempfile.mkdtemp(prefix="metaq-zk-"))
            with _LIVE_LOCK:
                _LIVE.add(self)
        return self._work_dir

    def _write_files(self) -> None:
        work = self._ensure_work_dir()
        self._prepare_data_dir()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        (work / "zoo.cfg").write_text("\n".join(self._config_lines()) + "\n", encoding="utf-8")
        (work / "log4j2.properties").write_text(_LOG4J2_PROPERTIES, encoding="utf-8")
        (work / "logback.xml").write_text(_LOGBACK_XML, encoding="utf-8")

    def _command(self, dist: ZooKeeperDistribution) -> list[str]:
        work = self._ensure_work_dir()
        return [
            dist.java,
            f"-Xmx{self.heap_mb}m",
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
            f"-Dlogback.configurationFile={work / 'logback.xml'}",
            "-cp",
            dist.classpath_string,
            self.MAIN_CLASS,
            str(work / "zoo.cfg"),
        ]

    def _bind_failed(self) -> bool:
        tail = self.log_tail(80)
        return any(marker in tail for marker in _BIND_FAILURE_MARKERS)

    def _send(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise ZooKeeperServerError(f"ZooKeeper on {self.connect_string} is not running")
        proc.send_signal(sig)

    def _terminate(self, timeout: float) -> None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
                if self._paused:  # a stopped process acts on SIGTERM only once continued
                    proc.send_signal(signal.SIGCONT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("ZooKeeper pid %d ignored SIGTERM for %g s; killing it", proc.pid, timeout)
        self._signal_and_reap(signal.SIGKILL, 5)

    def _signal_and_reap(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout)  # SIGKILL: the kernel reaps it in milliseconds
            except subprocess.TimeoutExpired as e:
                raise ZooKeeperServerError(f"ZooKeeper pid {proc.pid} did not die after {sig.name}") from e
        self._forget_process()

    def _forget_process(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self._proc = None
        self._paused = False

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None

    def _remove_work_dir(self) -> None:
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None
        with _LIVE_LOCK:
            _LIVE.discard(self)


def stop_all(servers: Iterable[ZooKeeperServer], timeout: float = 10) -> None:
    """Stop several servers, stopping the others even if one fails; re-raise the first failure."""
    first: BaseException | None = None
    for server in servers:
        try:
            server.stop(timeout)
        except Exception as e:  # keep going: leaking a JVM is worse
            first = first or e
    if first is not None:
        raise first
