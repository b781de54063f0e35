"""Step-time phase bars: one stacked bar of the median rank's step, then % and ms per phase.

Renders only from its `snapshot` reactive. A phase the loop does not have says "not measured",
never a zero bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from traceml.records import PHASES
from traceml_tui.format import ms, opt_pct
from traceml_tui.snapshot import Snapshot, no_steps_text
from traceml_tui.widgets.redraw import Redraw

PHASE_STYLE = {
    "dataloader": "$warning",
    "between": "$secondary-lighten-2",
    "forward": "$primary",
    "backward": "$primary-lighten-3",
    "optimizer": "$success",
    "h2d": "$error",
    "other": "$foreground-muted",
}
"""Theme colour of each phase, shared with other panels that name phases."""
LABEL = 11
NUMBERS = 18
"""Width of the "  47.0 %   12.3 ms" columns after each bar."""


def segments(shares: Sequence[float | None], width: int) -> list[int]:
    """Cells per phase of a `width`-cell stacked bar (largest remainder, so they sum to width)."""
    measured = [max(0.0, s or 0.0) for s in shares]
    total = sum(measured)
    if total <= 0 or width <= 0:
        return [0] * len(shares)
    exact = [s / total * width for s in measured]
    cells = [int(e) for e in exact]
    order = sorted(range(len(exact)), key=lambda i: cells[i] - exact[i])
    for i in order[: width - sum(cells)]:
        cells[i] += 1
    return cells


def _stacked(shares: Sequence[float | None], width: int) -> Content:
    cells = segments(shares, width)
    parts = [("█" * n, PHASE_STYLE[p]) for p, n in zip(PHASES, cells, strict=True) if n]
    return Content.assemble(*parts)


def _row(phase: str, share: float | None, phase_ms: float | None, width: int) -> Content:
    label = (f"{phase:<{LABEL}}", PHASE_STYLE[phase])
    if share is None:
        return Content.assemble(label, ("not measured", "$text-muted"))
    filled = max(0, min(width, round(share * width)))
    bar = [("█" * filled, PHASE_STYLE[phase]), ("░" * (width - filled), "$panel-lighten-2")]
    return Content.assemble(label, *bar, f"{opt_pct(share):>8} {ms(phase_ms):>9}")


def scope(snap: Snapshot | None) -> str:
    """Which steps and ranks the numbers are over, for the panel's subtitle."""
    if snap is None or no_steps_text(snap) is not None:
        return ""
    view = snap.view
    steps = "whole run after warm-up" if view.kind == "summary" else f"last {view.steps} steps"
    ranks = len(view.active)
    return f"{steps}, median of {ranks} ranks" if ranks > 1 else steps


def phase_content(snap: Snapshot | None, width: int) -> Content:
    """The panel's text for a given width; pure, so tests can check it without an app."""
    empty = no_steps_text(snap)
    if snap is None or empty is not None:
        return Content(empty or "")
    bar_width = max(8, width - LABEL - NUMBERS)
    phases = snap.phases
    title = Content(f"step median {ms(phases.median_ms)} · p95 {ms(phases.p95_ms)}")
    lines = [title, _stacked(phases.share, max(1, width))]
    for p, s, m in zip(PHASES, phases.share, phases.ms, strict=True):
        lines.append(_row(p, s, m, bar_width))
        if p == "backward" and phases.comm_wait_share is not None:
            lines.append(_wait_row(phases.comm_wait_share, phases.comm_wait_ms, bar_width))
    return Content("\n").join(lines)


def _wait_row(share: float, wait_ms: float | None, width: int) -> Content:
    """The part of backward spent waiting for DDP's all-reduce, under the backward bar."""
    filled = max(0, min(width, round(share * width)))
    bar = [("▒" * filled, PHASE_STYLE["backward"]), (" " * (width - filled), "")]
    label = (f"{'  ↳ wait':<{LABEL}}", "$text-muted")
    return Content.assemble(label, *bar, f"{opt_pct(share):>8} {ms(wait_ms):>9}")


class PhaseBars(Widget, can_focus=True):
    """Where the step time goes, phase by phase."""

    BORDER_TITLE = "Step time"

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._redraw = Redraw(self)

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        self.set_class(no_steps_text(snap) is not None, "-waiting")
        self.border_subtitle = scope(snap)
        self._redraw.show(self.render())

    def render(self) -> Content:
        return phase_content(self.snapshot, self.content_size.width)
