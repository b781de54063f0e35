"""Renderers of a Comparison: the plain-text report, the one-row-per-run table, and JSON.

Pure string and dict building: no colours, no terminal queries, no I/O, never torch. A number not
measured renders as "n/a" (text) or null (JSON), never as 0.

The JSON object (`report_to_json`, schema "traceml.compare/1") is stable; fields are only ever
added. Its shape:

    {"schema": "traceml.compare/1",
     "thresholds": {"moderate_pct": 3.0, "material_pct": 8.0},
     "gate": {"fail_on_regression_pct": 5.0 | null, "failed": bool, "failing": [label, ...]},
     "comparisons": [comparison, ...]}          # one per candidate, in argument order

and each comparison (`comparison_to_json`):

    {"verdict": "REGRESSION" | "IMPROVEMENT" | "EQUIVALENT" | "MIXED",
     "reason": "step +18 %: dataloader +12.0 ms",
     "baseline": run, "candidate": run,
     "step_time": {"median_ms": change, "p95_ms": change, "mean_ms": change,
                   "throughput_steps_per_s": change},
     "phases": {"dataloader": {"ms": change, "share_pct": change, "step_fraction_pct": x}, ...},
     "memory": {"basis": "device" | "host" | null, "peak_mb": change,
                "device_peak_allocated_mb": change, "device_peak_reserved_mb": change,
                "host_rss_peak_mb": change, "diagnosis": {"baseline": k, "candidate": k}},
     "ranks": [{"rank": 0, "median_ms": change, "dataloader_pct": change, "lag_pct": change}],
     "notes": ["world size differs: ...", ...]}

where a change is {"baseline": x, "candidate": y, "delta": y - x, "change_pct": 100 * delta / x}
(any of them null when not measured) and a run is {"label", "run_id", "script", "device",
"world_size", "steps", "exit", "primary", "severity", "step_diagnosis", "memory_diagnosis"}.
Phase ms are mean ms per typical step (share x the mean step, as in `traceml show` and the live
view), so they add up to `step_time.mean_ms` and their deltas to its change; share_pct deltas are
percentage points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from traceml.analysis.compare import (
    Change,
    Comparison,
    PhaseChange,
    RankChange,
    RunInfo,
    regressed,
    signed_ms,
    signed_pct,
)
from traceml.analysis.rules import mb, ms

COMPARE_SCHEMA = "traceml.compare/1"
"""The `schema` value of the JSON that `traceml compare --json` prints."""
MAX_RANK_ROWS = 16
"""Rank rows in the text report; bigger jobs show the ranks that changed most."""
LABEL_WIDTH = 36
SCRIPT_WIDTH = 24
"""Widest run label in the table; longer labels keep their end."""


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits) + 0.0


def change_to_json(c: Change, digits: int = 3) -> dict[str, float | None]:
    """A Change as {"baseline", "candidate", "delta", "change_pct"}; null = not measured."""
    return {
        "baseline": _round(c.baseline, digits),
        "candidate": _round(c.candidate, digits),
        "delta": _round(c.delta, digits),
        "change_pct": _round(None if c.ratio is None else c.ratio * 100, 2),
    }


def _run_json(info: RunInfo) -> dict[str, Any]:
    keys = ("label", "run_id", "script", "device", "world_size", "steps", "exit")
    more = ("primary", "severity", "step_diagnosis", "memory_diagnosis")
    return {key: getattr(info, key) for key in (*keys, *more)}


def _phase_json(p: PhaseChange) -> dict[str, Any]:
    fraction = None if p.step_fraction is None else p.step_fraction * 100
    return {
        "ms": change_to_json(p.ms),
        "share_pct": change_to_json(p.share_pct, 1),
        "step_fraction_pct": _round(fraction, 2),
    }


def _rank_json(r: RankChange) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "median_ms": change_to_json(r.median_ms),
        "dataloader_pct": change_to_json(r.dataloader_pct, 1),
        "lag_pct": change_to_json(r.lag_pct, 1),
    }


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    """One Comparison as a JSON-native dict (shape in the module docstring)."""
    memory = c.memory
    return {
        "verdict": c.verdict,
        "reason": c.reason,
        "baseline": _run_json(c.baseline),
        "candidate": _run_json(c.candidate),
        "step_time": {
            "median_ms": change_to_json(c.step_median_ms),
            "p95_ms": change_to_json(c.step_p95_ms),
            "mean_ms": change_to_json(c.step_mean_ms),
            "throughput_steps_per_s": change_to_json(c.throughput),
        },
        "phases": {p.phase: _phase_json(p) for p in c.phases},
        "memory": {
            "basis": memory.basis,
            "peak_mb": change_to_json(memory.peak_mb, 1),
            "device_peak_allocated_mb": change_to_json(memory.device_allocated_mb, 1),
            "device_peak_reserved_mb": change_to_json(memory.device_reserved_mb, 1),
            "host_rss_peak_mb": change_to_json(memory.host_rss_mb, 1),
            "diagnosis": dict(zip(("baseline", "candidate"), memory.diagnosis, strict=True)),
        },
        "ranks": [_rank_json(r) for r in c.ranks],
        "notes": list(c.notes),
    }


def report_to_json(
    comparisons: Sequence[Comparison], fail_on_regression_pct: float | None = None
) -> dict[str, Any]:
    """The whole `traceml compare --json` object: thresholds, the gate, every comparison.

    Args:
        comparisons: One per candidate, against the same baseline; at least one.
        fail_on_regression_pct: The gate's limit on step time growth in percent; None = no gate.
    """
    th = comparisons[0].thresholds
    failing = failing_runs(comparisons, fail_on_regression_pct)
    return {
        "schema": COMPARE_SCHEMA,
        "thresholds": {
            "moderate_pct": _round(th.compare_moderate * 100, 3),
            "material_pct": _round(th.compare_material * 100, 3),
        },
        "gate": {
            "fail_on_regression_pct": fail_on_regression_pct,
            "failed": bool(failing),
            "failing": failing,
        },
        "comparisons": [comparison_to_json(c) for c in comparisons],
    }


def failing_runs(comparisons: Sequence[Comparison], max_pct: float | None) -> list[str]:
    """Labels of the candidates whose step time grew by more than `max_pct` %; [] with no gate."""
    if max_pct is None:
        return []
    return [c.candidate.label for c in comparisons if regressed(c, max_pct)]


def _rate(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f} steps/s" if value >= 10 else f"{value:.3g} steps/s"


def _run_line(role: str, info: RunInfo) -> str:
    ranks = f"{info.world_size} rank{'s' if info.world_size != 1 else ''}"
    facts = [info.label, info.script or "?", f"run {info.run_id}", ranks, info.device]
    return f"  {role:<10} " + " · ".join([*facts, f"{info.steps} steps"])


def _row(name: str, a: str, b: str, change: str) -> str:
    return f"  {name:<16}{a:>16}{b:>16}{change:>14}"


def _step_lines(c: Comparison) -> list[str]:
    median, p95, rate = c.step_median_ms, c.step_p95_ms, c.throughput
    return [
        _row("", "baseline", "candidate", "change"),
        _row("step median", ms(median.baseline), ms(median.candidate), signed_pct(median.ratio)),
        _row("step p95", ms(p95.baseline), ms(p95.candidate), signed_pct(p95.ratio)),
        _row("throughput", _rate(rate.baseline), _rate(rate.candidate), signed_pct(rate.ratio)),
    ]


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def _pp(delta: float | None) -> str:
    return "" if delta is None else f"{delta:+.1f} pp"


def _phase_row(p: PhaseChange) -> str:
    if p.ms.baseline is None and p.ms.candidate is None:
        return f"  {p.phase:<12}not measured"
    a = f"{ms(p.ms.baseline):>9} {_share(p.share_pct.baseline):>7}"
    b = f"{ms(p.ms.candidate):>9} {_share(p.share_pct.candidate):>7}"
    return f"  {p.phase:<12}{a}   {b}   {signed_ms(p.ms.delta):>10} {_pp(p.share_pct.delta):>9}"


def _phase_lines(c: Comparison) -> list[str]:
    head = f"  {'phase (mean)':<12}{'baseline':>17}   {'candidate':>17}   {'change':>20}"
    mean = c.step_mean_ms
    total = (
        f"  {'= mean step':<12}{ms(mean.baseline):>9}{'':>8}   {ms(mean.candidate):>9}{'':>8}"
        f"   {signed_ms(mean.delta):>10}"
    )
    return [head, *(_phase_row(p) for p in c.phases), total]


def _memory_lines(c: Comparison) -> list[str]:
    m = c.memory
    lines = [f"Memory  {m.diagnosis[0]} -> {m.diagnosis[1]}  (* = compared)"]
    rows = (
        ("device peak alloc", m.device_allocated_mb, "device"),
        ("device peak resv", m.device_reserved_mb, None),
        ("host RSS peak", m.host_rss_mb, "host"),
    )
    for name, change, basis in rows:
        if change.baseline is None and change.candidate is None:
            continue
        row = _row(name, mb(change.baseline), mb(change.candidate), signed_pct(change.ratio))
        lines.append(row + (" *" if basis is not None and basis == m.basis else ""))
    return lines


def _rank_lines(c: Comparison) -> list[str]:
    shown = sorted(c.ranks, key=lambda r: -abs(r.median_ms.ratio or 0.0))[:MAX_RANK_ROWS]
    shown.sort(key=lambda r: r.rank)
    lines = ["Ranks  (median step; lag vs the median rank, % of a step)"]
    lines.append(f"  {'rank':>4}{'baseline':>12}{'candidate':>12}{'change':>10}{'lag':>16}")
    for r in shown:
        lag = f"{_opt(r.lag_pct.baseline)} -> {_opt(r.lag_pct.candidate)}"
        lines.append(
            f"  {r.rank:>4}{ms(r.median_ms.baseline):>12}{ms(r.median_ms.candidate):>12}"
            f"{signed_pct(r.median_ms.ratio):>10}{lag:>16}"
        )
    if len(shown) < len(c.ranks):
        lines.append(f"  ... {len(c.ranks) - len(shown)} more ranks (--json lists all)")
    return lines


def _opt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def render_comparison(c: Comparison) -> str:
    """The full text report of one comparison, verdict first.

    Args:
        c: The comparison to show.

    Returns:
        Lines of at most about 80 characters (the labels and notes may be longer), ending in "\\n".
    """
    a, b = c.baseline, c.candidate
    lines = ["TraceML compare", _run_line("baseline", a), _run_line("candidate", b)]
    lines += [f"{c.verdict}  {c.reason}", "─" * 78]
    lines.append(f"Diagnosis  {a.primary} ({a.severity}) -> {b.primary} ({b.severity})")
    lines += ["", *_step_lines(c), "", *_phase_lines(c), "", *_memory_lines(c)]
    if max(a.world_size, b.world_size) > 1:
        lines += ["", *_rank_lines(c)]
    if c.notes:
        lines += ["", "Notes", *(f"  · {note}" for note in c.notes)]
    return "\n".join(lines) + "\n"


def _fit(label: str, width: int = LABEL_WIDTH) -> str:
    return label if len(label) <= width else "…" + label[-(width - 1) :]


def render_table(comparisons: Sequence[Comparison]) -> str:
    """One row per candidate against the shared baseline: the `compare BASE RUN...` view.

    Args:
        comparisons: At least one, all against the same baseline.
    """
    base = comparisons[0].baseline
    width = min(LABEL_WIDTH, max(len(c.candidate.label) for c in comparisons))
    script = min(SCRIPT_WIDTH, max(len(c.candidate.script or "?") for c in comparisons))
    median = comparisons[0].step_median_ms.baseline
    lines = [f"Baseline  {base.label} · {base.script} · run {base.run_id} · median {ms(median)}"]
    lines.append(
        f"{'run':<{width}}  {'script':<{script}}  {'median':>9} {'step':>8} {'p95':>8}"
        f" {'memory':>8}  {'verdict':<11} reason"
    )
    for c in comparisons:
        # The run's label (a path) is cut from the left, so its script keeps a column of its own.
        lines.append(
            f"{_fit(c.candidate.label, width):<{width}}"
            f"  {_fit(c.candidate.script or '?', script):<{script}}"
            f"  {ms(c.step_median_ms.candidate):>9}"
            f" {signed_pct(c.step_median_ms.ratio):>8} {signed_pct(c.step_p95_ms.ratio):>8}"
            f" {signed_pct(c.memory.peak_mb.ratio):>8}  {c.verdict:<11} {c.reason}"
        )
    return "\n".join(lines) + "\n"
