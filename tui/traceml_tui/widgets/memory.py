"""Memory over steps for the focused rank: device allocated and host RSS, each as a sparkline.

Fed by `show(snapshot, rank)` from the screen; the series come from the snapshot's RunView (the
live window), never from the store. Without CUDA, and for a summary (which keeps no series), the
panel says so in words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from traceml.analysis.view import RankWindow, Series
from traceml_tui.format import mb
from traceml_tui.snapshot import Snapshot, no_steps_text

FLAT_FRACTION = 0.01
"""A series that moves less than this share of its top is drawn flat: a sparkline stretches any
range to its full height, which would make noise look like growth."""


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
        f" growth {growth_text} (a summary keeps no per-step series)"
    )


class MemoryPanel(Vertical, can_focus=True):
    """How the focused rank's memory moved over the last steps."""

    BORDER_TITLE = "Memory"

    def __init__(self) -> None:
        super().__init__()
        self.note = Static("Waiting for the run…", classes="note")
        self.labels = {css: Static("", classes=f"label {css}") for css in ("device", "host")}
        self.sparks = {css: Sparkline([], classes=css) for css in ("device", "host")}

    def compose(self) -> ComposeResult:
        yield self.note
        for css in ("device", "host"):
            yield self.labels[css]
            yield self.sparks[css]

    def show(self, snap: Snapshot, rank: int | None) -> None:
        """Draw `rank`'s series from `snap` (rank None: the run has no ranks yet)."""
        self.border_title = "Memory" if rank is None else f"Memory · rank {rank}"
        window = snap.rank(rank) if rank is not None else None
        note = self._note(snap, window)
        self.note.update(note)
        self.note.display = bool(note)
        self.set_class(window is None or window.steps == 0, "-waiting")
        self._series(
            "device", "device allocated", window, window.device_allocated if window else ()
        )
        self._series("host", "host RSS", window, window.host_rss if window else ())

    def _note(self, snap: Snapshot, window: RankWindow | None) -> str:
        if snap.summary is not None:
            return _summary_note(snap.summary)
        if window is None or window.steps == 0:
            return no_steps_text(snap) or "Waiting for this rank's first step…"
        if not window.device_allocated:
            return "No device memory (CPU run): host RSS only."
        return ""

    def _series(self, css: str, name: str, window: RankWindow | None, series: Series) -> None:
        label, spark = self.labels[css], self.sparks[css]
        present = bool(series) and window is not None
        label.display = spark.display = present
        if present and window is not None:
            peak = window.device_peak_allocated_mb if css == "device" else window.host_rss_peak_mb
            values = [v for _, v in series]
            label.update(series_label(name, series, peak))
            spark.data = [0.0] * len(values) if is_flat(values) else values
