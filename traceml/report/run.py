"""`traceml report`: one run's summary as a standalone HTML page with its charts.

Verdict and action first, then the phase split, the run over time (from the summary's timeline),
memory, the per-rank table and the system. The page holds plotly.js inline and nothing else from
outside, so it opens offline; its size does not grow with the run (the timeline is bounded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceml._version import __version__
from traceml.report import charts, sections
from traceml.report.html import esc, page

NO_TIMELINE = (
    "This summary has no timeline (a TraceML before the timeline, or a run without steps):"
    " the charts over the run need one."
)


def _section(title: str, *parts: str) -> str:
    return f"<section><h2>{esc(title)}</h2>{''.join(p for p in parts if p)}</section>"


def _chart(fig: Any, div_id: str) -> str:
    return charts.embed(fig, div_id) if fig is not None else ""


def _over_time(summary: Mapping[str, Any]) -> str:
    windows = charts.timeline(summary)
    if not windows:
        return _section("Over the run", f'<p class="note">{esc(NO_TIMELINE)}</p>')
    first, last = windows[0]["first_step"], windows[-1]["last_step"]
    rank = charts.timeline_rank(summary)
    whose = "" if rank is None else f" of rank {rank} (the median rank)"
    note = (
        f'<p class="muted">steps {first}-{last}{esc(whose)} in {len(windows)} windows,'
        " warm-up and slow steps included</p>"
    )
    return _section(
        "Over the run",
        note,
        _chart(charts.step_time_over_run(windows), "step-time-over-run"),
        _chart(charts.memory_over_run(windows), "memory-over-run"),
    )


def _ranks(summary: Mapping[str, Any]) -> str:
    rows = summary["ranks"]
    omitted = summary["run"].get("ranks_omitted") or 0
    more = f'<p class="muted">{omitted} more ranks are not in the summary.</p>' if omitted else ""
    lag = '<p class="muted">lag: how far a rank is behind the median rank, % of a step</p>'
    return _section(
        "Ranks", lag, sections.ranks(rows), more, _chart(charts.rank_phases(rows), "rank-phases")
    )


def render_report(summary: Mapping[str, Any], source: str = "") -> str:
    """The whole HTML document for one run.

    Args:
        summary: A checked "traceml.summary/1" dict (load_summary or build_summary).
        source: Where the summary came from, named in the footer ("" leaves it out).
    """
    step = summary["step_time"]
    body = "".join(
        [
            sections.header(summary),
            sections.verdict(summary),
            _section(
                "Step time",
                sections.step_numbers(step),
                sections.phase_table(step),
                _chart(charts.phase_split(step), "phase-split"),
            ),
            _over_time(summary),
            _section("Memory", sections.memory(summary["step_memory"])),
            _ranks(summary),
            _section("System", sections.system(summary["system"])),
            _section("Other findings", sections.findings(summary)),
        ]
    )
    footer = f"TraceML {esc(__version__)} report" + (f" of {esc(source)}" if source else "")
    title = f"TraceML · {summary['run']['script']} · {summary['run']['id']}"
    return page(title, body, script=charts.plotly_js(), footer=footer)
