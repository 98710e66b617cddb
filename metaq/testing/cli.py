"""``metaq <args>`` run in the test's own process, for integration tests that call many commands.

    result = run_cli("topics", "list", "--bootstrap-server", bootstrap)
    assert result.returncode == 0, result.stderr

The same ``main`` the ``metaq`` command runs, with stdin, stdout and stderr captured: a Python start and the
client's imports per call cost seconds on a loaded test machine. Commands that must receive signals run as
processes instead.
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

from metaq.cli.main import main as cli_main


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, stdin: str | None = None) -> CliResult:
    """See the module docstring; argparse's usage errors (SystemExit) become the return code."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = int(e.code or 0)
    finally:
        sys.stdin = saved_stdin
    return CliResult(code, out.getvalue(), err.getvalue())
