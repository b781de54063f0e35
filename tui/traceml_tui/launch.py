"""`traceml run` in a terminal: the live view beside the script the launcher started.

The launcher (traceml.cli.run) starts the script, then calls `run_live`, which returns the exit
code the launcher should exit with. Nothing here starts or restarts the script; it is only
stopped when the user asks for it in the quit dialog.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from traceml_tui.app import TraceMLApp, exit_status


def run_live(
    run_id: str,
    log_path: Path,
    child: subprocess.Popen[bytes],
    runtime_dir: Path | None = None,
) -> int:
    """Show the live view of `run_id` and the script's log until the user quits.

    Args:
        run_id: The id the script's TraceML will publish under (its files may not exist yet).
        log_path: The file the launcher writes the script's output to.
        child: The script's process.
        runtime_dir: Where the run files are; None = TraceML's default runtime dir.

    Returns:
        The script's exit status (128 + N when a signal N ended it), or 0 when the user left it
        running detached.
    """
    app = TraceMLApp(run_id, runtime_dir=runtime_dir, log_path=log_path, child=child)
    result = app.run()
    if app.detached:
        say(
            f"traceml: the script runs on (pid {child.pid}); `traceml attach {run_id}` shows it"
            f" again, its output goes to {log_path}"
        )
        return 0
    if result is None:
        print(
            "traceml: the live view stopped; waiting for the script to end (Ctrl-C stops it)",
            file=sys.stderr,
        )
        return wait_for(child)
    return result


def say(line: str) -> None:
    """One line on stderr, unless the terminal is gone (the view left because it was)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def wait_for(child: subprocess.Popen[bytes]) -> int:
    """Wait for the script after the view is gone, passing Ctrl-C (and SIGTERM) on to it.

    The script runs in its own session (so it can outlive the terminal when detached), so the
    terminal's Ctrl-C never reaches it by itself: without this it would be lost, and the
    terminal would wait on a script nothing can interrupt.
    """

    def forward(signum: int, _frame: Any) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return exit_status(child.wait())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
