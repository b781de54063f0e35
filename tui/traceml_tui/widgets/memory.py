"""Memory of the focused rank: device allocated and host RSS in words, and a chart over steps.

Fed by `show(snapshot, rank, scope)` from the screen; the numbers come from the snapshot's
RunView and the chart's points from `chart_data` (the last steps, or the whole run's timeline),
never from the store. The chart shows device memory when the rank has it, else host RSS, on a
y-range that never makes a small wobble look like growth. Without CUDA the panel says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Vertical

from traceml.analysis.view import RankWindow, Series
from traceml_tui import plot
from traceml_tui.chart_data import SCOPE_WORDS, ChartData, ChartScope, chart_data, memory_range
from traceml_tui.format import mb, steps
from traceml_tui.snapshot import Snapshot, no_steps_text
from traceml_tui.widgets.chart import Chart
from traceml_tui.widgets.redraw import StaticText

if TYPE_CHECKING:
    from traceml_tui.plot import Canvas

CHART_POINTS = 48
"""Most points of the memory chart (a narrow panel: about one per cell)."""
FLAT_FRACTION = 0.01
"""A series that moves less than this share of its top is drawn flat: a sparkline stretches any
range to its full height, which would make noise look like growth."""


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """One memory line to chart: its name, theme colour and (step, MB) points."""

    name: str
    style: str
    points: tuple[tuple[float, float], ...]


def is_flat(values: list[float]) -> bool:
    top = max(abs(v) for v in values)
    return max(values) - min(values) <= FLAT_FRACTION * max(top, 1.0)


def series_label(name: str, series: Series, peak: float | None) -> str:
    """ "device allocated 1.2 GB · min 1.0 GB · peak 1.4 GB", the first number being the latest."""
    values = [v for _, v in series]
    if is_flat(values):
        return f"{name} {mb(values[-1])} · flat (peak {mb(peak or max(values))})"
    return f"{name} {mb(values[-1])} · min {mb(min(values))} · peak {mb(peak or max(values))}"


def _summary_note(summary: Mapping[str, Any]) -> str:
    mem = summary["step_memory"]
    growth = mem.get("growth_mb_per_1k_steps")
    growth_text = "n/a" if growth is None else f"{growth:+.1f} MB per 1k steps"
    device = ""
    if mem.get("device_peak_allocated_mb") is not None:
        device = f"device peak {mb(mem['device_peak_allocated_mb'])}, "
    return (
        f"{mem['diagnosis']}: {device}host RSS peak {mb(mem.get('host_rss_peak_mb'))},"
        f" growth {growth_text}"
    )


class MemoryChart(Chart[MemorySeries]):
    """One memory series in MB over steps; its y-range never stretches a wobble to full height."""

    def picture(self, data: MemorySeries, width: int, height: int) -> Canvas | None:
        xs = [x for x, _ in data.points]
        ys = [y for _, y in data.points]
        y = memory_range(ys)
        return plot.line(self.rgb(data.style), xs, ys, width, height, y, mb, steps)


class MemoryPanel(Vertical, can_focus=True):
    """How the focused rank's memory moved, over the last steps or the whole run."""

    BORDER_TITLE = "Memory"

    def __init__(self) -> None:
        super().__init__()
        self.note = StaticText("Waiting for the run…", classes="note")
        self.labels = {css: StaticText("", classes=f"label {css}") for css in ("device", "host")}
        self.chart = MemoryChart(classes="chart")
        self.scope: ChartScope = "recent"

    def compose(self) -> ComposeResult:
        yield self.note
        for css in ("device", "host"):
            yield self.labels[css]
        yield self.chart

    def show(self, snap: Snapshot, rank: int | None, scope: ChartScope = "recent") -> None:
        """Draw `rank`'s memory from `snap` over `scope` (rank None: the run has no ranks yet)."""
        changed, self.scope = scope != self.scope, scope
        self.border_title = "Memory" if rank is None else f"Memory · rank {rank}"
        window = snap.rank(rank) if rank is not None else None
        note = self._note(snap, window)
        self.note.show(note)
        self.note.display = bool(note)
        self.set_class(window is None or window.steps == 0, "-waiting")
        self._label("device", "device", window, window.device_allocated if window else ())
        self._label("host", "host RSS", window, window.host_rss if window else ())
        data = chart_data(snap, rank, scope, CHART_POINTS) if rank is not None else None
        series = memory_series(data) if data is not None else None
        self.border_subtitle = "" if series is None else f"{series.name} · {SCOPE_WORDS[scope]}"
        self.chart.display = series is not None
        self.chart.show(series, now=changed)

    def _note(self, snap: Snapshot, window: RankWindow | None) -> str:
        if snap.summary is not None:
            return _summary_note(snap.summary)
        if window is None or window.steps == 0:
            return no_steps_text(snap) or "Waiting for this rank's first step…"
        if not window.device_allocated:
            return "No device memory (CPU run): host RSS only."
        return ""

    def _label(self, css: str, name: str, window: RankWindow | None, series: Series) -> None:
        label = self.labels[css]
        label.display = bool(series) and window is not None
        if series and window is not None:
            peak = window.device_peak_allocated_mb if css == "device" else window.host_rss_peak_mb
            label.show(series_label(name, series, peak))


def data_scope(data: ChartData | None) -> str:
    return "" if data is None else data.describe()


def memory_series(data: ChartData) -> MemorySeries | None:
    """Device allocated when the rank has it, else host RSS; None when neither was read."""
    device = [(p.step, p.device_mb) for p in data.points if p.device_mb is not None]
    if device:
        return MemorySeries("device allocated", "$primary", tuple(device))
    host = [(p.step, p.host_rss_mb) for p in data.points if p.host_rss_mb is not None]
    return MemorySeries("host RSS", "$success", tuple(host)) if host else None
