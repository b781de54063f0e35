"""A plotext chart (textual-plotext) that builds its picture once per data, at most once a second.

plotext draws a scale (values on both axes) that a sparkline has not, but building a picture
costs 10-60 ms of Python. So the chart keeps the built picture while its data, size and theme
stay the same, and takes new data at most every REDRAW_S (a scope toggle or a resize redraws at
once). Subclasses say what to plot in `draw(plt, data)`; they never read the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from textual.color import Color
from textual_plotext import PlotextPlot

if TYPE_CHECKING:
    from textual.app import RenderResult
    from textual.timer import Timer
    from textual_plotext.plot import Plot

D = TypeVar("D")
REDRAW_S = 1.0
"""Least time between two builds of a chart fed with new data while the run goes on."""


class Chart(PlotextPlot, Generic[D]):
    """A plotext picture of `data`; None data draws nothing (the panel says why in words)."""

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.data: D | None = None
        self.builds = 0
        """Pictures built so far (tests count redraws with it)."""
        self._version = 0
        self._built_for: tuple[Any, ...] | None = None
        self._picture: RenderResult = ""
        self._built_at = -REDRAW_S
        self._pending: Timer | None = None

    def show(self, data: D | None, *, now: bool = False) -> None:
        """Take new data: drawn at once when `now` or REDRAW_S passed, else when it has. Data
        equal to what the chart holds changes nothing (an idle run's snapshots, every second)."""
        if data == self.data and not now:
            return
        self.data = data
        self._version += 1
        wait = self._built_at + REDRAW_S - time.monotonic()
        if now or wait <= 0:
            self.refresh()
        elif self._pending is None:
            self._pending = self.set_timer(wait, self._due)

    @property
    def current(self) -> bool:
        """True when the picture on screen was built from the latest data."""
        return self._built_for is not None and self._built_for[0] == self._version

    def _due(self) -> None:
        self._pending = None
        self.refresh()

    def render(self) -> RenderResult:
        key = (self._version, self.size, self.app.theme)
        if key != self._built_for:
            plt = self.plt
            plt.clear_figure()
            if self.data is not None:
                self.draw(plt, self.data)
            self._picture = super().render() if self.data is not None else ""
            self._built_for, self._built_at = key, time.monotonic()
            self.builds += 1
        return self._picture

    def draw(self, plt: Plot, data: D) -> None:
        """Plot `data` on the cleared figure `plt`."""
        raise NotImplementedError

    def axes(
        self, plt: Plot, xs: list[float], y: tuple[float, float], label: Callable[[float], str]
    ) -> None:
        """Name the y range by its values (lowest, middle, highest, as `label` writes them) and
        the x axis by whole step numbers, so the chart carries its own scale."""
        lo, hi = y
        plt.ylim(lo, hi)
        ys = [lo, (lo + hi) / 2, hi]
        plt.yticks(ys, [label(v) for v in ys])
        first, last = xs[0], xs[-1]
        marks = sorted({float(round(first + (last - first) * i / 3)) for i in range(4)})
        plt.xticks(marks, [f"{m:,.0f}" for m in marks])

    def rgb(self, style: str) -> tuple[int, int, int]:
        """A theme colour ("$warning", "$primary-lighten-3") as plotext's (r, g, b)."""
        variables = self.app.theme_variables
        value = variables.get(style.lstrip("$")) or variables.get("foreground") or "white"
        try:
            return Color.parse(value).rgb
        except Exception:  # noqa: BLE001 (a theme value we cannot parse: plain foreground)
            return (200, 200, 200)
