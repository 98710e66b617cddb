"""Child processes that never outlive their parent (embedded servers, brokers started by tools and tests)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: ask Linux to SIGKILL the child when the parent dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)  # bounded: a SIGKILLed process is reaped at once
    return proc.returncode
