"""The report's charts as plotly figures, drawn from summary numbers and the summary's timeline.

Each builder returns a `go.Figure` (or None when the summary has nothing to draw); `embed` turns
one into a <div> and its script, without plotly.js, which the page inlines once. A null number is
left out of a chart (a gap), never drawn as 0. Plotly is imported here only, when a report is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from traceml.records import PHASES

PHASE_COLORS: dict[str, str] = {
    "dataloader": "#e4572e",
    "between": "#f3a712",
    "forward": "#3a7bd5",
    "backward": "#29335c",
    "optimizer": "#17bebb",
    "h2d": "#a8c686",
    "other": "#8a94a6",
}
CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True}
"""No link to plotly's cloud; resize with the window."""
Window = Mapping[str, Any]


def plotly_js() -> str:
    """plotly.js itself, to inline once per page: the report needs no network to open."""
    return str(get_plotlyjs())


def embed(fig: go.Figure, div_id: str) -> str:
    """The figure as a <div> plus the script that draws it (plotly.js must be on the page)."""
    body = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG, validate=True
    )
    return f'<div class="chart">{body}</div>'


def _layout(fig: go.Figure, title: str, height: int, **more: Any) -> go.Figure:
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 48, "b": 48},
        "template": "plotly_white",
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "x unified",
    }
    fig.update_layout(**{**layout, **more})
    return fig


def timeline(summary: Mapping[str, Any]) -> list[Window]:
    """The summary's timeline as one dict per window, in step order; [] when it has none.

    final_summary.json keeps it as columns (`{"rank", "first_step": [...], "mean_ms": [...],
    "phase_ms": {phase: [...]}, ...}`, a column null when nothing measured it); a list of
    window dicts (TimelineWindow.to_json) is taken as it is.
    """
    raw = summary.get("timeline")
    if isinstance(raw, Mapping) and isinstance(raw.get("first_step"), list):
        raw = _rows(raw)
    if not isinstance(raw, list):
        return []
    windows = [w for w in raw if isinstance(w, Mapping) and "first_step" in w]
    return sorted(windows, key=lambda w: w["first_step"])


def timeline_rank(summary: Mapping[str, Any]) -> int | None:
    """Whose timeline the summary holds (the median rank's), when it says so."""
    raw = summary.get("timeline")
    rank = raw.get("rank") if isinstance(raw, Mapping) else None
    return rank if isinstance(rank, int) else None


TIMELINE_FIELDS = (
    "first_step",
    "last_step",
    "steps",
    "mean_ms",
    "p50_ms",
    "p95_ms",
    "max_ms",
    "host_rss_mb",
    "device_allocated_mb",
)


def _cell(column: Any, i: int) -> Any:
    return column[i] if isinstance(column, list) and i < len(column) else None


def _rows(columns: Mapping[str, Any]) -> list[dict[str, Any]]:
    phases = columns.get("phase_ms")
    phases = phases if isinstance(phases, Mapping) else {}
    return [
        {
            **{key: _cell(columns.get(key), i) for key in TIMELINE_FIELDS},
            "phase_ms": {name: _cell(phases.get(name), i) for name in PHASES},
        }
        for i in range(len(columns["first_step"]))
    ]


def _phase_of(window: Window, name: str) -> float | None:
    phases = window.get("phase_ms")
    if isinstance(phases, Mapping):
        value = phases.get(name)
    elif isinstance(phases, Sequence) and len(phases) == len(PHASES):
        value = phases[PHASES.index(name)]
    else:
        value = None
    return float(value) if isinstance(value, (int, float)) else None


def _x(windows: Sequence[Window]) -> list[float]:
    """Each window at its middle step."""
    return [(w["first_step"] + w["last_step"]) / 2 for w in windows]


def _measured(values: Sequence[float | None]) -> bool:
    return any(v is not None for v in values)


def step_time_over_run(windows: Sequence[Window]) -> go.Figure | None:
    """Mean step time split into its phases (stacked), with each window's p50, p95 and max."""
    if not windows:
        return None
    fig, x = go.Figure(), _x(windows)
    for name in PHASES:
        ys = [_phase_of(w, name) for w in windows]
        if _measured(ys):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=ys,
                    name=name,
                    stackgroup="phases",
                    mode="none",
                    fillcolor=PHASE_COLORS[name],
                    hovertemplate="%{y:.2f} ms",
                )
            )
    for key, dash in (("p50_ms", "solid"), ("p95_ms", "dash"), ("max_ms", "dot")):
        ys = [w.get(key) for w in windows]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=ys,
                name=key.removesuffix("_ms"),
                mode="lines",
                line={"color": "#1d2330", "dash": dash, "width": 1.2},
                hovertemplate="%{y:.2f} ms",
            )
        )
    title = "Step time over the run: mean split into phases; p50, p95 and max of each window"
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    return _layout(fig, title, 380)


def memory_over_run(windows: Sequence[Window]) -> go.Figure | None:
    """Host RSS and device allocated (means per window); None when neither was measured."""
    fig, x = go.Figure(), _x(windows)
    series = (
        ("host_rss_mb", "host RSS", "#3a7bd5"),
        ("device_allocated_mb", "device allocated", "#e4572e"),
    )
    for key, label, color in series:
        ys = [w.get(key) for w in windows]
        if _measured(ys):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=ys,
                    name=label,
                    mode="lines",
                    line={"color": color},
                    hovertemplate="%{y:.1f} MB",
                )
            )
    if not fig.data:
        return None
    fig.update_xaxes(title_text="step")
    # From zero: a 2 % wobble must not fill the chart's height.
    fig.update_yaxes(title_text="MB", rangemode="tozero")
    return _layout(fig, "Memory over the run (mean of each window)", 320)


def phase_split(step: Mapping[str, Any]) -> go.Figure | None:
    """One stacked bar: each measured phase's share of the step (after warm-up)."""
    mean = step.get("mean_ms")
    fig = go.Figure()
    for name in PHASES:
        share = step.get(f"{name}_pct")
        if share is None:
            continue
        phase_ms = None if mean is None else share / 100 * mean
        text = f"{name} {share:.1f} %" + ("" if phase_ms is None else f" · {phase_ms:.2f} ms")
        fig.add_trace(
            go.Bar(
                y=["step"],
                x=[share],
                name=name,
                orientation="h",
                marker={"color": PHASE_COLORS[name]},
                hovertext=[text],
                hoverinfo="text",
            )
        )
    if not fig.data:
        return None
    fig.update_xaxes(title_text="% of step time", range=[0, 100])
    fig.update_yaxes(showticklabels=False)
    legend = {"orientation": "h", "y": -0.6, "traceorder": "normal"}
    return _layout(
        fig, "Phase split of a step", 230, barmode="stack", hovermode="closest", legend=legend
    )


def rank_phases(ranks: Sequence[Mapping[str, Any]]) -> go.Figure | None:
    """Each rank's median step time split by its phase shares; None for a one-rank run."""
    if len(ranks) < 2:
        return None
    fig = go.Figure()
    labels = [str(r["rank"]) for r in ranks]
    for name in PHASES:
        ys = [_rank_phase_ms(r, name) for r in ranks]
        if _measured(ys):
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=ys,
                    name=name,
                    marker={"color": PHASE_COLORS[name]},
                    hovertemplate="%{y:.2f} ms",
                )
            )
    fig.update_xaxes(title_text="rank", type="category")
    fig.update_yaxes(title_text="ms (median step x phase share)")
    legend = {"orientation": "h", "y": -0.25, "traceorder": "normal"}
    return _layout(fig, "Ranks: median step split into phases", 340, barmode="stack", legend=legend)


def _rank_phase_ms(rank: Mapping[str, Any], name: str) -> float | None:
    share, median = rank.get(f"{name}_pct"), rank.get("median_ms")
    return None if share is None or median is None else share / 100 * median


def phase_compare(phases: Sequence[Any], labels: tuple[str, str]) -> go.Figure | None:
    """Each phase's ms per step in the baseline and the candidate, side by side.

    Args:
        phases: analysis.compare.PhaseChange values (mean ms per step).
        labels: What to call the two runs in the legend.
    """
    measured = [p for p in phases if p.ms.baseline is not None or p.ms.candidate is not None]
    if not measured:
        return None
    names = [p.phase for p in measured]
    fig = go.Figure()
    for side, label, color in (
        ("baseline", labels[0], "#8a94a6"),
        ("candidate", labels[1], "#3a7bd5"),
    ):
        ys = [getattr(p.ms, side) for p in measured]
        fig.add_trace(
            go.Bar(x=names, y=ys, name=label, marker={"color": color}, hovertemplate="%{y:.2f} ms")
        )
    fig.update_yaxes(title_text="mean ms per step")
    return _layout(fig, "Phases: baseline vs candidate", 340, barmode="group")


def runs_over_time(
    runs: Sequence[tuple[str, Sequence[Window]]], key: str, title: str, unit: str
) -> go.Figure | None:
    """One line per run of a timeline field (e.g. p50_ms, host_rss_mb) against the step."""
    fig = go.Figure()
    for label, windows in runs:
        ys = [w.get(key) for w in windows]
        if windows and _measured(ys):
            fig.add_trace(go.Scatter(x=_x(windows), y=ys, name=label, mode="lines"))
    if not fig.data:
        return None
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text=unit, rangemode="tozero")
    return _layout(fig, title, 320)
