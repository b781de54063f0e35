"""Step time over time for one rank: its phases stacked, over the last 100 steps or the whole run.

Fed by `show(snapshot, rank, scope)` from the screen; the points come from `chart_data` (recent
records or the rank's timeline), never from the store. The y axis carries its values in ms, the
x axis step numbers; a line under the chart names the colours and the slowest step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content

from traceml_tui import plot
from traceml_tui.chart_data import SCOPE_WORDS, ChartData, ChartScope, chart_data
from traceml_tui.format import ms, steps
from traceml_tui.snapshot import Snapshot, no_steps_text
from traceml_tui.widgets.chart import Chart
from traceml_tui.widgets.phase_bars import PHASE_STYLE
from traceml_tui.widgets.rank_table import PHASE_HEADS
from traceml_tui.widgets.redraw import StaticText

if TYPE_CHECKING:
    from traceml_tui.plot import Canvas

AXIS_CELLS = 8
"""Cells the y axis labels take; the rest of the width gets one point per cell."""
DEFAULT_POINTS = 60


class StepChart(Chart[ChartData]):
    """Stacked phases (bottom: dataloader) of each point's mean step, in ms."""

    def picture(self, data: ChartData, width: int, height: int) -> Canvas | None:
        layers = data.stacked()
        if not layers:  # no phase measured: the step time alone
            layers = [("other", [p.step_ms for p in data.points])]
        top = max(max(layers[-1][1]), 1e-3)
        coloured = [(self.rgb(PHASE_STYLE[phase]), totals) for phase, totals in layers]
        xs = [p.step for p in data.points]
        return plot.stacked(coloured, xs, width, height, (0.0, top * 1.05), ms, steps)


def legend(data: ChartData) -> Content:
    """The phase colours, then the slowest step behind the chart."""
    parts: list[str | tuple[str, str]] = []
    for phase in data.phases:
        parts += [("■", PHASE_STYLE[phase]), f"{PHASE_HEADS[phase]} "]
    slow = data.slowest()
    if slow is not None:
        near = "" if slow.weight == 1 else "~"
        parts.append((f"slowest {ms(slow.max_ms)} at step {near}{steps(slow.step)}", "$text-muted"))
    return Content.assemble(*parts)


class StepChartPanel(Vertical, can_focus=True):
    """How one rank's step time moved: `t` switches the last 100 steps and the whole run."""

    BORDER_TITLE = "Step time over time"

    def __init__(self) -> None:
        super().__init__()
        self.note = StaticText("Waiting for the run…", classes="note")
        self.chart = StepChart(classes="chart")
        self.caption = StaticText("", classes="caption")
        self.scope: ChartScope = "recent"

    def compose(self) -> ComposeResult:
        yield self.note
        yield self.chart
        yield self.caption

    def points(self) -> int:
        width = self.chart.size.width
        return max(10, width - AXIS_CELLS) if width else DEFAULT_POINTS

    def show(self, snap: Snapshot, rank: int | None, scope: ChartScope) -> None:
        """Chart `rank` of `snap` over `scope` (rank None: the run has no ranks yet)."""
        changed = scope != self.scope
        self.scope = scope
        data = chart_data(snap, rank, scope, self.points()) if rank is not None else None
        what = "the last 100 steps" if scope == "recent" else "the whole run"
        self.border_title = f"Step time over {what}" + ("" if rank is None else f" · rank {rank}")
        other = SCOPE_WORDS["run" if scope == "recent" else "recent"]
        self.border_subtitle = f"{data.describe() if data else ''} · t: {other}".lstrip(" ·")
        note = no_steps_text(snap) or ("" if data else self._missing(snap, scope))
        self.note.show(note)
        self.note.display = bool(note)
        self.chart.display = self.caption.display = data is not None
        self.set_class(data is None, "-waiting")
        if data is not None:
            self.caption.show(legend(data))
        self.chart.show(data, now=changed)

    @staticmethod
    def _missing(snap: Snapshot, scope: ChartScope) -> str:
        if snap.summary is not None and scope == "recent":
            return "A summary keeps no single steps: press t for the whole run."
        if snap.summary is not None:
            return "This summary keeps no timeline (written by an older TraceML)."
        return "Waiting for this rank's steps…"
