"""`traceml ls [--all] [--json]`: this user's runs from their run files, without connecting.

Never crashes or hangs on a broken run file: it is reported as one line on stderr and skipped,
and the exit code stays 0. Prunes our own dead and finished runs older than a week.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from traceml.transport.subscribe.runs import RunEntry, list_runs, prune_runs

COLUMNS = ("RUN ID", "SCRIPT", "RANKS", "HOST", "STEP", "STEP MS", "DIAGNOSIS", "STATE", "AGE")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list live runs (--all adds finished and dead ones)",
        description="List this user's TraceML runs on this host.",
    )
    parser.add_argument(
        "--all", action="store_true", dest="all", help="include finished and dead runs"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of objects")


def run(args: argparse.Namespace) -> int:
    now = time.time()
    runs = list_runs(include_finished=True, now=now)
    for warning in runs.warnings:
        print(f"traceml: warning: {warning}", file=sys.stderr)
    pruned = set(prune_runs(runs, now=now))
    shown = [r for r in runs if r.run_id not in pruned and (args.all or r.live)]
    if args.json:
        print(json.dumps([{**r.to_json(now), "steps": steps_done(r)} for r in shown], indent=2))
    elif shown:
        print(render_table(shown, now))
    else:
        hint = "" if args.all else " (`traceml ls --all` adds finished and dead ones)"
        print(f"no {'' if args.all else 'live '}runs{hint}")
    return 0


def render_table(runs: list[RunEntry], now: float) -> str:
    """The runs as an aligned text table, one line per run."""
    rows = [COLUMNS, *(_row(r, now) for r in runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _row(run: RunEntry, now: float) -> tuple[str, ...]:
    ranks = f"{len(run.ranks)}/{run.world_size}" if run.world_size > len(run.ranks) else ""
    return (
        run.run_id,
        run.script or "-",
        ranks or str(len(run.ranks)),
        ",".join(run.hosts) or "-",
        "-" if run.last_step is None else str(steps_done(run)),
        "-" if run.last_step_ms is None else f"{run.last_step_ms:.1f}",
        run.primary or "-",
        state_text(run, now),
        format_age(run.age_s(now)),
    )


def steps_done(run: RunEntry) -> int | None:
    """Steps the furthest rank has finished (its last step index is 0-based); None before any."""
    return None if run.last_step is None else run.last_step + 1


def state_text(run: RunEntry, now: float) -> str:
    """The state in words; a stalled or dead run says how long ago its last step ended."""
    if run.state not in ("stalled", "dead"):
        return run.state
    since = [r.last_step_t for r in run.ranks if r.last_step_t is not None]
    if not since:
        return run.state
    stuck = "" if run.state == "dead" else _stuck_in(run)
    return f"{run.state} (no step for {format_age(now - max(since))}{stuck})"


def _stuck_in(run: RunEntry) -> str:
    """ ", in forward": the phase a stalled rank's file says it is in ("" when none says)."""
    stalled = [r for r in run.ranks if run.rank_states.get(r.info.rank) == "stalled"]
    phases = [r.phase for r in stalled or run.ranks if r.phase]
    return f", in {phases[0]}" if phases else ""


def format_age(seconds: float) -> str:
    """12s, 5m, 3h, 2d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
