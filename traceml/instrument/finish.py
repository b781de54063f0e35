"""The end of a rank: build final_summary.json from the store and write it where it belongs.

Runs on the tx thread after the last drain. A summary that cannot be written where asked is
written to the run's private dir instead, and the user is told both paths: nothing is lost.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from traceml.config import Settings
from traceml.errors import TraceMLError
from traceml.records import RankEnd, RankInfo


def summary_path_for(settings: Settings, run_id: str) -> Path:
    """Where the summary goes: --summary / TRACEML_SUMMARY, else traceml-runs/<run-id>/ here."""
    if settings.summary_path is not None:
        return settings.summary_path
    return Path.cwd() / "traceml-runs" / run_id / "final_summary.json"


def fallback_path(run_id: str) -> Path:
    base = Path(tempfile.gettempdir()) / f"traceml-{os.getuid()}" / "summaries" / run_id
    return base / "final_summary.json"


def write_rank_summary(settings: Settings, info: RankInfo, store: Any, end: RankEnd) -> Path | None:
    """Build and write the summary if this rank owns it (rank 0); return where it went."""
    from traceml.analysis.render import render_card
    from traceml.analysis.summary import build_summary, write_summary

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
    target = summary_path_for(settings, info.run_id)
    try:
        path = write_summary(summary, target)
    except TraceMLError as err:
        path = write_summary(summary, fallback_path(info.run_id))
        print(f"traceml: {err.msg}; wrote the summary to {path} instead", file=sys.stderr)
    if os.environ.get("TRACEML_LAUNCHER") != "1":
        print(render_card(summary), file=sys.stderr)
        print(f"traceml: summary written to {path}", file=sys.stderr)
    return path
