"""The end of a rank: build final_summary.json from the store and write it where it belongs.

Runs on the tx thread after the last drain. A summary that cannot be written where asked (folder
gone or read-only, disk full) is written to the run's private dir instead, and one line on stderr
says where; if even that fails, the summary is printed on stderr: it is never lost. Nothing here
raises for a write that fails. Lines go to fd 2 directly, not through sys.stderr: shutdown may
run in a signal handler whose interrupted thread holds sys.stderr's lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from traceml.config import Settings
from traceml.errors import TraceMLError
from traceml.probe import write_stderr
from traceml.records import RankEnd, RankInfo

FALLBACK_NAME = "final_summary.fallback.json"
"""Kept apart from `<run dir>/final_summary.json`, the link the publisher points at the summary."""


def summary_path_for(settings: Settings, run_id: str) -> Path:
    """Where the summary goes: --summary / TRACEML_SUMMARY, else traceml-runs/<run-id>/ here."""
    if settings.summary_path is not None:
        return settings.summary_path
    return Path.cwd() / "traceml-runs" / run_id / "final_summary.json"


def fallback_path(settings: Settings, run_id: str) -> Path:
    """The run's private dir (0700, under TRACEML_RUNTIME_DIR or /tmp/traceml-<uid>)."""
    from traceml.transport.runfiles.rundir import RunDir, resolve_runtime_dir

    return RunDir(resolve_runtime_dir(settings.runtime_dir), run_id).path / FALLBACK_NAME


def write_rank_summary(settings: Settings, info: RankInfo, store: Any, end: RankEnd) -> Path | None:
    """Build and write the summary if this rank owns it (rank 0); return where it went."""
    from traceml.analysis.summary import build_summary

    if info.rank != 0:
        return None
    summary = build_summary(
        store,
        run_id=info.run_id,
        script=info.script,
        argv=list(info.argv),
        started=info.started,
        duration_s=max(0.0, end.t - info.started),
        exit=end.exit,
        device=info.device,
        torch_version=info.torch_version,
    )
    path, trouble = write_somewhere(settings, info.run_id, summary)
    announce(summary, path, trouble)
    return path


def announce(summary: dict[str, Any], path: Path | None, trouble: str | None) -> None:
    """The summary's card and where it went, on stderr (under `traceml run` the launcher prints
    the card itself, from the path it asked for)."""
    from traceml.analysis.render import render_card

    if trouble is None and os.environ.get("TRACEML_LAUNCHER") == "1":
        return
    write_stderr(render_card(summary))
    write_stderr(
        f"traceml: summary written to {path}" if trouble is None else f"traceml: {trouble}"
    )


def write_somewhere(
    settings: Settings, run_id: str, summary: dict[str, Any]
) -> tuple[Path | None, str | None]:
    """(where the summary went, None) or, after a failed write, the line that says what happened."""
    from traceml.analysis.summary import write_summary
    from traceml.transport.runfiles.rundir import RunDir, resolve_runtime_dir

    try:
        return write_summary(summary, summary_path_for(settings, run_id)), None
    except TraceMLError as err:
        first = err.msg
    try:
        RunDir(resolve_runtime_dir(settings.runtime_dir), run_id).create()
        path = write_summary(summary, fallback_path(settings, run_id))
    except TraceMLError as err:
        text = json.dumps(summary, separators=(",", ":"), allow_nan=False)
        return None, f"{first}; the fallback failed too ({err.msg}); the summary: {text}"
    return path, f"{first}; wrote the summary to {path} instead"
