"""A Snapshot of a finished run, built from its final_summary.json (README, "final_summary.json").

The summary keeps no single steps, only the median rank's whole-run timeline (schema 1.1), which
becomes that rank's RankWindow.timeline so the charts show the whole run. Pure translation of an
already loaded and schema-checked summary dict: no I/O, no torch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from traceml.analysis.diagnose import Diagnosis
from traceml.analysis.timeline import TimelineWindow
from traceml.analysis.timeline_json import windows_of_columns
from traceml.analysis.view import RankWindow, RunView
from traceml.records import PHASES, Finding
from traceml_tui.snapshot import PhaseSplit, Snapshot


def _share(obj: Mapping[str, Any], phase: str) -> float | None:
    value = obj.get(f"{phase}_pct")
    return None if value is None else float(value) / 100


def _shares(obj: Mapping[str, Any]) -> tuple[float | None, ...]:
    return tuple(_share(obj, p) for p in PHASES)


def _window(w: Mapping[str, Any]) -> TimelineWindow | None:
    """One window of the summary's columnar timeline; None when its step time is missing."""
    if w.get("mean_ms") is None or w.get("first_step") is None:
        return None
    mean = float(w["mean_ms"])
    phases = w.get("phase_ms") or {}
    return TimelineWindow(
        first_step=int(w["first_step"]),
        last_step=int(w.get("last_step") or w["first_step"]),
        steps=int(w.get("steps") or 1),
        mean_ms=mean,
        p50_ms=float(w.get("p50_ms") or mean),
        p95_ms=float(w.get("p95_ms") or mean),
        max_ms=float(w.get("max_ms") or mean),
        phase_ms=tuple(None if phases.get(p) is None else float(phases[p]) for p in PHASES),
        host_rss_mb=w.get("host_rss_mb"),
        device_allocated_mb=w.get("device_allocated_mb"),
    )


def timeline_of(summary: Mapping[str, Any]) -> tuple[int | None, tuple[TimelineWindow, ...]]:
    """(rank, windows) of the summary's timeline; (None, ()) when it has none."""
    line = summary.get("timeline")
    if not isinstance(line, Mapping) or line.get("rank") is None:
        return None, ()
    windows = (_window(w) for w in windows_of_columns(line))
    return int(line["rank"]), tuple(w for w in windows if w is not None)


def _rank(entry: Mapping[str, Any], timeline: tuple[TimelineWindow, ...] = ()) -> RankWindow:
    state = entry.get("state")
    return RankWindow(
        rank=int(entry["rank"]),
        host=str(entry.get("host") or ""),
        steps=int(entry.get("steps") or 0),
        total_steps=int(entry.get("steps") or 0),
        median_ms=entry.get("median_ms"),
        p95_ms=entry.get("p95_ms"),
        phase_share=_shares(entry),
        state=state if state in ("live", "stalled", "dead", "finished") else "finished",
        exit=entry.get("exit"),
        dropped=int(entry.get("dropped") or 0),
        timeline=timeline,
    )


def _view(summary: Mapping[str, Any]) -> RunView:
    run = summary["run"]
    charted, timeline = timeline_of(summary)
    return RunView(
        run_id=str(run["id"]),
        script=str(run.get("script") or ""),
        world_size=int(run.get("world_size") or 1),
        hosts=int(run.get("hosts") or 1),
        device=str(run.get("device") or "cpu"),
        ranks=tuple(
            sorted(
                (_rank(e, timeline if e["rank"] == charted else ()) for e in summary["ranks"]),
                key=lambda r: r.rank,
            )
        ),
        kind="summary",
    )


def _phases(step: Mapping[str, Any]) -> PhaseSplit:
    shares = _shares(step)
    mean = step.get("mean_ms")
    return PhaseSplit(
        share=shares,
        ms=tuple(None if s is None or mean is None else s * mean for s in shares),
        median_ms=step.get("median_ms"),
        p95_ms=step.get("p95_ms"),
    )


def _first(findings: Sequence[Finding], section: str, default: Finding) -> Finding:
    return next((f for f in findings if f.section == section), default)


def _diagnosis(summary: Mapping[str, Any]) -> Diagnosis | None:
    findings = tuple(Finding.from_json(f) for f in summary.get("findings") or ())
    if not findings:
        return None
    return Diagnosis(
        step=_first(findings, "step_time", findings[0]),
        memory=_first(findings, "step_memory", findings[0]),
        ranks=tuple(f for f in findings if f.section == "ranks"),
        findings=findings,
    )


def _lags(summary: Mapping[str, Any]) -> Mapping[int, float]:
    ranks = summary["ranks"]
    return {int(e["rank"]): e["lag_pct"] / 100 for e in ranks if e.get("lag_pct") is not None}


def from_summary(summary: Mapping[str, Any], now: float | None = None) -> Snapshot:
    """The Snapshot of a finished run.

    Args:
        summary: A "traceml.summary/1" object, as `traceml.analysis.summary.load_summary` returns.
        now: Epoch seconds stamped as `taken_at`; default the current time.
    """
    run = summary["run"]
    return Snapshot(
        view=_view(summary),
        diagnosis=_diagnosis(summary),
        phases=_phases(summary["step_time"]),
        taken_at=time.time() if now is None else now,
        lags=MappingProxyType(dict(_lags(summary))),
        source="summary",
        duration_s=run.get("duration_s"),
        run_exit=run.get("exit"),
        summary=MappingProxyType(dict(summary)),
        restarts=int(run.get("restarts") or 0),
    )
