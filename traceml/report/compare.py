"""`traceml compare ... --html`: the comparison of runs against a baseline as one standalone page.

A table of every candidate's verdict first, then one section per candidate: verdict and reason,
the two runs, step time, phases (table and chart), memory, ranks, notes, and both runs over time
when their summaries hold a timeline. Phase ms are mean ms per step, as `traceml compare`
prints them. Reads Comparison values and the summaries they came from; plotly.js is inlined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from traceml._version import __version__
from traceml.analysis.compare import Change, Comparison, PhaseChange, RunInfo, signed_ms, signed_pct
from traceml.report import charts
from traceml.report.html import NA, esc, fmt_mb, fmt_ms, fmt_pct, page, table

VERDICT_CLASS = {
    "REGRESSION": "critical",
    "MIXED": "warning",
    "IMPROVEMENT": "good",
    "EQUIVALENT": "info",
}
RUN_HEADERS = ("", "file", "script", "run", "ranks", "device", "steps", "exit", "diagnosis")


def _rate(value: float | None) -> str:
    return NA if value is None else f"{value:.1f} steps/s"


def _run_row(role: str, info: RunInfo) -> list[str]:
    cells = [role, info.label, info.script, info.run_id, str(info.world_size), info.device]
    cells += [str(info.steps), info.exit, f"{info.primary} ({info.severity})"]
    return [esc(c) for c in cells]


def _runs(c: Comparison) -> str:
    rows = [_run_row("baseline", c.baseline), _run_row("candidate", c.candidate)]
    return table(RUN_HEADERS, rows, align=("l",) * len(RUN_HEADERS))


def _change_row(name: str, change: Change, fmt: Any) -> list[str]:
    cells = [name, fmt(change.baseline), fmt(change.candidate), signed_pct(change.ratio)]
    return [esc(c) for c in cells]


def _step(c: Comparison) -> str:
    rows = [
        _change_row("step median", c.step_median_ms, fmt_ms),
        _change_row("step p95", c.step_p95_ms, fmt_ms),
        _change_row("throughput", c.throughput, _rate),
    ]
    return table(["", "baseline", "candidate", "change"], rows, align=("l",))


def _phase_row(p: PhaseChange) -> list[str]:
    if p.ms.baseline is None and p.ms.candidate is None:
        return [esc(p.phase), "not measured", "", "", ""]
    pp = "" if p.share_pct.delta is None else f"{p.share_pct.delta:+.1f} pp"
    cells = [
        p.phase,
        f"{fmt_ms(p.ms.baseline)} · {fmt_pct(p.share_pct.baseline)}",
        f"{fmt_ms(p.ms.candidate)} · {fmt_pct(p.share_pct.candidate)}",
        signed_ms(p.ms.delta),
        pp,
    ]
    return [esc(c) for c in cells]


def _phases(c: Comparison, idx: int) -> str:
    headers = ["phase", "baseline", "candidate", "change", "share"]
    out = table(headers, [_phase_row(p) for p in c.phases], align=("l",))
    fig = charts.phase_compare(c.phases, (c.baseline.label, c.candidate.label))
    return out + (charts.embed(fig, f"cmp{idx}-phases") if fig is not None else "")


def _memory(c: Comparison) -> str:
    m = c.memory
    rows = [
        _change_row("device peak allocated", m.device_allocated_mb, fmt_mb),
        _change_row("device peak reserved", m.device_reserved_mb, fmt_mb),
        _change_row("host RSS peak", m.host_rss_mb, fmt_mb),
        [esc("diagnosis"), esc(m.diagnosis[0]), esc(m.diagnosis[1]), ""],
    ]
    basis = "not compared" if m.basis is None else f"compared by {m.basis} memory"
    note = f'<p class="muted">{esc(basis)}</p>'
    return note + table(["", "baseline", "candidate", "change"], rows, align=("l",))


def _ranks(c: Comparison) -> str:
    if len(c.ranks) < 2:
        return ""
    rows = [
        [
            esc(r.rank),
            esc(f"{fmt_ms(r.median_ms.baseline)} → {fmt_ms(r.median_ms.candidate)}"),
            esc(signed_pct(r.median_ms.ratio)),
            esc(f"{fmt_pct(r.lag_pct.baseline)} → {fmt_pct(r.lag_pct.candidate)}"),
        ]
        for r in c.ranks
    ]
    out = table(["rank", "median step", "change", "lag"], rows, scroll=True)
    return f"<h3>Ranks</h3>{out}"


def _over_time(c: Comparison, summaries: Mapping[str, Mapping[str, Any]], idx: int) -> str:
    runs = [
        (info.label, charts.timeline(summaries.get(info.label, {})))
        for info in (c.baseline, c.candidate)
    ]
    if not all(windows for _, windows in runs):
        return '<p class="note">Over time: both summaries need a timeline.</p>'
    step = charts.runs_over_time(runs, "p50_ms", "Median step time over the run", "ms")
    memory = charts.runs_over_time(runs, "host_rss_mb", "Host RSS over the run", "MB")
    device = charts.runs_over_time(
        runs, "device_allocated_mb", "Device allocated over the run", "MB"
    )
    figs = [(step, "step"), (device or memory, "memory")]
    return "".join(charts.embed(f, f"cmp{idx}-{name}") for f, name in figs if f is not None)


def _notes(c: Comparison) -> str:
    if not c.notes:
        return ""
    items = "".join(f"<li>{esc(n)}</li>" for n in c.notes)
    return f"<h3>Notes</h3><ul>{items}</ul>"


def _verdict(c: Comparison) -> str:
    cls = VERDICT_CLASS.get(c.verdict, "info")
    return (
        f'<div class="card verdict {cls}"><span class="kind">{esc(c.verdict)}</span>'
        f"<div>{esc(c.reason)}</div></div>"
    )


def _section(c: Comparison, summaries: Mapping[str, Mapping[str, Any]], idx: int) -> str:
    title = f"{c.candidate.label} vs {c.baseline.label}"
    parts = [
        f"<h2>{esc(title)}</h2>",
        _verdict(c),
        _runs(c),
        "<h3>Step time</h3>",
        _step(c),
        "<h3>Phases</h3>",
        _phases(c, idx),
        "<h3>Memory</h3>",
        _memory(c),
        _ranks(c),
        "<h3>Over the run</h3>",
        _over_time(c, summaries, idx),
        _notes(c),
    ]
    return f"<section>{''.join(parts)}</section>"


def _overview(comparisons: Sequence[Comparison], failing: Sequence[str]) -> str:
    rows = [
        [
            esc(c.candidate.label),
            esc(c.verdict),
            esc(signed_pct(c.step_median_ms.ratio)),
            esc(c.reason),
            "gate FAILED" if c.candidate.label in failing else "",
        ]
        for c in comparisons
    ]
    headers = ["run", "verdict", "step", "why", ""]
    return table(headers, rows, align=("l", "l", "r", "l", "l"))


def render_compare_report(
    comparisons: Sequence[Comparison],
    summaries: Mapping[str, Mapping[str, Any]],
    failing: Sequence[str] = (),
) -> str:
    """The whole HTML document for `traceml compare --html`.

    Args:
        comparisons: One per candidate, against the same baseline; at least one.
        summaries: The loaded summaries by the label each side has in `comparisons` (for the
            timelines); a label missing here only leaves its charts over time out.
        failing: Labels of the candidates the --fail-on-regression gate failed.
    """
    base = comparisons[0].baseline
    head = f"<h1>{esc(f'TraceML comparison against {base.label}')}</h1>"
    facts = f"baseline {base.script} · run {base.run_id} · {len(comparisons)} run(s) compared"
    body = head + f'<p class="facts">{esc(facts)}</p>' + _overview(comparisons, failing)
    body += "".join(_section(c, summaries, i) for i, c in enumerate(comparisons))
    footer = f"TraceML {esc(__version__)} comparison"
    return page(
        f"TraceML comparison · {base.label}", body, script=charts.plotly_js(), footer=footer
    )
