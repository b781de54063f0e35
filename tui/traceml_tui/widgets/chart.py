"""A chart widget that builds its picture once per data, at most once a second.

The picture (traceml_tui.plot: values on both axes, which a sparkline has not) is kept while the
chart's data, size and theme stay the same, and new data is taken at most every REDRAW_S (a
scope toggle or a resize redraws at once): an idle run's snapshots cost the chart nothing.
Subclasses say what to draw in `picture(data, width, height)`; they never read the run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from textual.color import Color
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.timer import Timer

    from traceml_tui.plot import Canvas, Rgb

D = TypeVar("D")
REDRAW_S = 1.0
"""Least time between two builds of a chart fed with new data while the run goes on."""


class Chart(Widget, Generic[D]):
    """A picture of `data`; None data draws nothing (the panel says why in words)."""

    DEFAULT_CSS = """
    Chart {
        width: 1fr;
        height: 1fr;
    }
    """

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.data: D | None = None
        self.builds = 0
        """Pictures built so far (tests count redraws with it)."""
        self._version = 0
        self._built_for: tuple[Any, ...] | None = None
        self._strips: list[Strip] = []
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

    def render_line(self, y: int) -> Strip:
        """Row `y` of the picture (Textual's line API: the strips go to the screen as built,
        with no text to parse again)."""
        strips = self.strips()
        return strips[y] if y < len(strips) else Strip.blank(self.size.width, self.rich_style)

    def strips(self) -> list[Strip]:
        """The picture's rows, built again only when the data, size or theme changed."""
        key = (self._version, self.size, self.app.theme)
        if key != self._built_for:
            width, height = self.size
            canvas = None if self.data is None else self.picture(self.data, width, height)
            self._strips = [] if canvas is None else canvas.strips(self.rich_style)
            self._built_for, self._built_at = key, time.monotonic()
            self.builds += 1
        return self._strips

    @property
    def text(self) -> str:
        """The picture as plain text, a line per row."""
        return "\n".join(strip.text for strip in self.strips())

    def picture(self, data: D, width: int, height: int) -> Canvas | None:
        """`data` drawn in `width` x `height` cells; None when they cannot hold a chart."""
        raise NotImplementedError

    def rgb(self, style: str) -> Rgb:
        """A theme colour ("$warning", "$primary-lighten-3") as (r, g, b)."""
        variables = self.app.theme_variables
        value = variables.get(style.lstrip("$")) or variables.get("foreground") or "white"
        try:
            return Color.parse(value).rgb
        except Exception:  # noqa: BLE001 (a theme value we cannot parse: plain foreground)
            return (200, 200, 200)
