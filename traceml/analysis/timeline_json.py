"""final_summary.json's timeline: windows as columns (a few KB for 64 windows), and back.

Entry i of every list is window i, oldest first; a column that no window measured is null.
Pure: no I/O, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from traceml.analysis.timeline import TimelineWindow
from traceml.records import PHASES


def _sig(value: float | None) -> float | None:
    """Three significant digits (at least one decimal below 100): a summary, not a log."""
    if value is None:
        return None
    if value == 0 or not math.isfinite(value):
        return 0.0
    digits = max(1, 2 - math.floor(math.log10(abs(value))))
    return round(value, digits)


def _column(values: Iterable[float | None]) -> list[float | None] | None:
    """A column of rounded values; None when no window measured it."""
    out = [_sig(v) for v in values]
    return out if any(v is not None for v in out) else None


def timeline_columns(windows: Sequence[TimelineWindow]) -> dict[str, Any]:
    """final_summary.json's timeline: one list per field (columns keep 128 windows a few KB);
    a column that nothing measured is null."""
    return {
        "first_step": [w.first_step for w in windows],
        "last_step": [w.last_step for w in windows],
        "steps": [w.steps for w in windows],
        "mean_ms": _column(w.mean_ms for w in windows),
        "p50_ms": _column(w.p50_ms for w in windows),
        "p95_ms": _column(w.p95_ms for w in windows),
        "max_ms": _column(w.max_ms for w in windows),
        "phase_ms": {p: _column(w.phase_ms[i] for w in windows) for i, p in enumerate(PHASES)},
        "host_rss_mb": _column(w.host_rss_mb for w in windows),
        "device_allocated_mb": _column(w.device_allocated_mb for w in windows),
    }


def windows_of_columns(timeline: Any) -> list[dict[str, Any]]:
    """final_summary.json's columnar timeline back as one dict per window (the fields of
    TimelineWindow.to_json), oldest first; [] for anything else (a summary without one)."""
    if not isinstance(timeline, dict) or not isinstance(timeline.get("first_step"), list):
        return []
    n = len(timeline["first_step"])

    def column(values: Any) -> list[Any]:
        return list(values) if isinstance(values, list) and len(values) == n else [None] * n

    fields = ("first_step", "last_step", "steps", "mean_ms", "p50_ms", "p95_ms", "max_ms")
    more = ("host_rss_mb", "device_allocated_mb")
    cols = {f: column(timeline.get(f)) for f in (*fields, *more)}
    raw = timeline.get("phase_ms")
    phases: dict[str, Any] = raw if isinstance(raw, dict) else {}
    phase_cols = {p: column(phases.get(p)) for p in PHASES}
    return [
        {
            **{f: cols[f][i] for f in fields},
            "phase_ms": {p: phase_cols[p][i] for p in PHASES},
            **{f: cols[f][i] for f in more},
        }
        for i in range(n)
    ]
