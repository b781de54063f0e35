"""`traceml attach [RUN]`: open the live view of a running (or finished) run from any terminal.

The viewer only reads the run: `q` detaches and the job runs on. Textual and the viewer are
imported inside `run`, so `traceml ls` and the training side never load them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from traceml.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "attach",
        help="open the live view of a run (q detaches; the job runs on)",
        description="Open the live view of RUN: an id or a unique prefix, default the newest"
        " live run. A finished run opens from its summary.",
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or unique prefix (see traceml ls)")


def run(args: argparse.Namespace) -> int:
    """Resolve the run (RunNotFoundError: main prints one line, exit 2), then show it."""
    from traceml.transport.subscribe.runs import resolve_run

    entry = resolve_run(args.run)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ConfigError(
            f"traceml attach needs a terminal (stdin and stdout are not a TTY): use `traceml ls`"
            f" for run {entry.run_id}, or `traceml show SUMMARY` for a finished run"
        )
    from traceml_tui.app import TraceMLApp
    from traceml_tui.source import log_path

    log = log_path(entry)
    TraceMLApp(entry.run_id, log_path=log if log.is_file() else None).run()
    return 0
