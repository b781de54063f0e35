"""`traceml prune [--older-than 7d] [--dry-run]`: remove the files of runs that are over.

Only runs that are finished or dead, not written to for the given age, and only files we know to
be ours: the run dir's known file names (as `traceml ls` prunes after a week), and the run's
final_summary.json where its run file names it and the file says it is that run's summary. A
live run, another user's file, or anything else in a summary's folder is never touched.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from traceml.errors import ConfigError
from traceml.transport.subscribe.runs import RunEntry, list_runs, prune_runs

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
SUMMARY_SCHEMA_PREFIX = "traceml.summary/"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "prune",
        help="remove the files of finished and dead runs (--dry-run lists them)",
        description="Remove finished and dead runs' files: their run dir under the runtime dir"
        " and the final_summary.json their run file names. Live runs are never touched.",
    )
    parser.add_argument(
        "--older-than",
        metavar="AGE",
        default="7d",
        help="only runs not written to for AGE: 30m, 12h, 7d, 2w (default 7d; 0 = every run"
        " that is over)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would go, remove none")


def parse_age(text: str) -> float:
    """ "7d" -> seconds; a bare number is days.

    Raises:
        ConfigError: not a number with an optional s/m/h/d/w unit.
    """
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"--older-than {text!r}: use a number and a unit, e.g. 30m, 12h or 7d")
    return float(match[1]) * UNITS[match[2] or "d"]


def our_summary(run: RunEntry) -> Path | None:
    """The run's summary file when it exists and says it is this run's summary; else None."""
    path = run.summary_path
    if path is None or not path.is_file() or path.is_symlink():
        return None
    try:
        obj = json.loads(path.read_bytes()[: 4 * 1024 * 1024])
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict) or not str(obj.get("schema", "")).startswith(
        SUMMARY_SCHEMA_PREFIX
    ):
        return None
    run_obj = obj.get("run")
    return path if isinstance(run_obj, dict) and run_obj.get("id") == run.run_id else None


def remove_summary(path: Path, run_id: str) -> None:
    """Remove the summary, and its folder when that is the run's own and now empty."""
    path.unlink(missing_ok=True)
    if path.parent.name == run_id:
        try:
            path.parent.rmdir()
        except OSError:
            return  # something else lives there: leave it


def run(args: argparse.Namespace) -> int:
    age = parse_age(args.older_than)
    now = time.time()
    runs = list_runs(include_finished=True, now=now)
    for warning in runs.warnings:
        print(f"traceml: warning: {warning}", file=sys.stderr)
    over = [r for r in runs if r.state in ("finished", "dead") and now - r.updated >= age]
    verb = "would remove" if args.dry_run else "removed"
    for entry in over:
        summary = our_summary(entry)
        extra = f" and {summary}" if summary is not None else ""
        print(f"{verb} {entry.run_id} ({entry.state}): {entry.dir}{extra}")
        if not args.dry_run:
            if summary is not None:
                remove_summary(summary, entry.run_id)
            prune_runs([entry], now=now, max_age_s=-1.0)
    kept = len(runs) - len(over)
    print(f"{len(over)} run(s) {verb}, {kept} kept (live, or newer than {args.older_than})")
    return 0
